package kubeview

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Content types the client speaks. Protobuf is what kube-proxy asks for (its ClientConnection.ContentType
// default, pkg/proxy/apis/config/v1alpha1/defaults.go): the initial list of 200,000 endpoints decodes with a
// fraction of JSON's garbage, and the apiserver serialises an object once per encoding for all its watchers, so
// asking for the encoding kube-proxy asks for costs it no extra encoding. JSON stays acceptable for anything
// served without protobuf (an aggregated or extension API in front of a core resource).
const (
	ContentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	AcceptContentTypes  = ContentTypeProtobuf + ",application/json"
)

// ClientConfig loads the API client's configuration: from kubeconfig, or in-cluster when it is "". It asks for
// protobuf with a JSON fallback (see ContentTypeProtobuf) and names itself userAgent.
func ClientConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("no --kubeconfig and no in-cluster config: %w", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	cfg.ContentType = ContentTypeProtobuf
	cfg.AcceptContentTypes = AcceptContentTypes
	return cfg, nil
}

// NewDynamicClient is the announcers' API client (package announce reads their objects through it):
// ClientConfig's configuration, over JSON (the announcers' CRDs have no protobuf encoding).
func NewDynamicClient(kubeconfig, userAgent string) (dynamic.Interface, error) {
	cfg, err := ClientConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the announcers' dynamic client: %w", err)
	}
	return c, nil
}

// NewClient is the exporter's API client: ClientConfig's configuration, for the resources the view reads.
func NewClient(kubeconfig, userAgent string) (API, error) {
	cfg, err := ClientConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	client, err := newRESTAPI(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	return client, nil
}

// ListOptions kube-proxy v1.37.2 lists and watches with (cmd/kube-proxy/app/server.go, Run): Services without
// the service-proxy-name label and not headless, EndpointSlices without the headless label. The exporter uses
// the same, so that it never lists more than kube-proxy does, and the apiserver's watch cache answers both
// with the same filters. IsExternalLocal and UsableSlice apply the same rules again on what arrives.
//
// kube-apiserver before v1.31 knows no Service field selector but metadata.name and metadata.namespace, and
// answers the headless filter with 400 Bad Request (kube-proxy itself filters on the field only since v1.32).
// serviceFilter then lists every Service without the label, as kube-proxy of those releases does: the
// apiserver's refusal, not a version number, decides.
type serviceFilter struct{ fieldRefused atomic.Bool }

func (f *serviceFilter) listOptions(o *metav1.ListOptions) {
	o.LabelSelector = selectorWithout(labelServiceProxyName)
	if !f.fieldRefused.Load() {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	}
}

// refused reports whether err is the apiserver refusing the field selector (the first time only): the list is
// then worth asking again, without it.
func (f *serviceFilter) refused(err error) bool {
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "field selector") {
		return false
	}
	return f.fieldRefused.CompareAndSwap(false, true)
}

func endpointSliceListOptions(o *metav1.ListOptions) {
	o.LabelSelector = selectorWithout(labelHeadless)
}

// selectorWithout is the label selector "!key": objects without the label key.
func selectorWithout(key string) string { return "!" + key }

// ReleaseListMemory returns the initial lists' garbage to the operating system at once. Every object of the
// first list is decoded whole before the transforms shrink it, so the heap peaks at sync and the view keeps a
// small part of it; left to the Go runtime, the rest goes back at the background scavenger's pace, and the
// process sits at its peak RSS for minutes. One forced collection, once per process start, costs a few
// milliseconds.
func ReleaseListMemory() { debug.FreeOSMemory() }
