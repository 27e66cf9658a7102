package kubeview

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// kubeProxyListOptions is what kube-proxy v1.37.2 lists and watches Services and EndpointSlices with, built
// as cmd/kube-proxy/app/server.go (ProxyServer.Run) builds it: labels.NewRequirement(..., DoesNotExist) for
// apis.LabelServiceProxyName and v1.IsHeadlessService, and fields.OneTermNotEqualSelector("spec.clusterIP",
// v1.ClusterIPNone) for Services.
func kubeProxyListOptions(t *testing.T) map[string]metav1.ListOptions {
	t.Helper()
	noProxyName, err := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	if err != nil {
		t.Fatal(err)
	}
	noHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]metav1.ListOptions{
		"services": {
			LabelSelector: labels.NewSelector().Add(*noProxyName).String(),
			FieldSelector: fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String(),
		},
		"endpointslices": {LabelSelector: labels.NewSelector().Add(*noHeadless).String()},
	}
}

// The exporter lists and watches exactly what kube-proxy does: the same selectors on Services and
// EndpointSlices (never more objects), and its own Node only.
func TestListOptionsAreKubeProxys(t *testing.T) {
	client := fake.NewClientset(nodeObj("node-1"), localService("shop", "web", corev1.ServiceTypeNodePort))
	syncedView(t, client)
	want := kubeProxyListOptions(t)
	want["nodes"] = metav1.ListOptions{FieldSelector: "metadata.name=node-1"}
	seen := map[string]bool{}
	for _, a := range client.Actions() {
		var lbl labels.Selector
		var fld fields.Selector
		switch a := a.(type) {
		case k8stesting.ListAction:
			lbl, fld = a.GetListRestrictions().Labels, a.GetListRestrictions().Fields
		case k8stesting.WatchAction:
			lbl, fld = a.GetWatchRestrictions().Labels, a.GetWatchRestrictions().Fields
		default:
			continue
		}
		r := a.GetResource().Resource
		w, ok := want[r]
		if !ok {
			t.Errorf("%s %s: the exporter watches nothing of that resource", a.GetVerb(), r)
			continue
		}
		seen[r] = true
		if got := lbl.String(); got != w.LabelSelector {
			t.Errorf("%s %s: label selector %q, kube-proxy's is %q", a.GetVerb(), r, got, w.LabelSelector)
		}
		if got := fld.String(); got != w.FieldSelector {
			t.Errorf("%s %s: field selector %q, kube-proxy's is %q", a.GetVerb(), r, got, w.FieldSelector)
		}
	}
	for r := range want {
		if !seen[r] {
			t.Errorf("no list or watch of %s", r)
		}
	}
}

// The client asks for protobuf, falling back to JSON, as kube-proxy's default ClientConnection does.
func TestClientConfigProtobuf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ClientConfig(path, "localtraffic-exporter/test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ContentType != "application/vnd.kubernetes.protobuf" ||
		cfg.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("content type %q, accept %q: want protobuf with a JSON fallback", cfg.ContentType, cfg.AcceptContentTypes)
	}
	if cfg.UserAgent != "localtraffic-exporter/test" {
		t.Errorf("user agent %q", cfg.UserAgent)
	}
	if _, err := ClientConfig(filepath.Join(t.TempDir(), "missing"), "x"); err == nil {
		t.Error("a missing kubeconfig must fail")
	}
}

// kube-apiserver before v1.31 refuses the headless field selector with 400 Bad Request; the exporter then lists
// and watches Services without it, as kube-proxy of those releases does, and leaves the headless ones out on
// arrival. Without the retry the Services informer never syncs.
func TestServicesWithoutTheFieldSelectorWhereRefused(t *testing.T) {
	headless := localService("shop", "db", corev1.ServiceTypeClusterIP)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	client := fake.NewClientset(nodeObj("node-1"), localService("shop", "web", corev1.ServiceTypeNodePort), headless)
	var refused atomic.Int32 // counted on the informer's goroutine, read here after sync
	refuse := func(a k8stesting.Action) (bool, runtime.Object, error) {
		var fld fields.Selector
		switch a := a.(type) {
		case k8stesting.ListAction:
			fld = a.GetListRestrictions().Fields
		case k8stesting.WatchAction:
			fld = a.GetWatchRestrictions().Fields
		}
		if fld == nil || fld.Empty() {
			return false, nil, nil
		}
		refused.Add(1)
		// kube-apiserver v1.29.15's answer, word for word.
		return true, nil, apierrors.NewBadRequest(`"spec.clusterIP" is not a known field selector: only "metadata.name", "metadata.namespace"`)
	}
	client.PrependReactor("list", "services", refuse)
	client.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		_, _, err := refuse(a)
		return err != nil, nil, err
	})
	v, _ := syncedView(t, client)
	snap, err := v.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Services) != 1 || snap.Services[0].Name != "web" {
		t.Errorf("services %v: want shop/web alone (the headless one left out on arrival)", snap.Services)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("the field selector was asked %d times: want once, then never again", n)
	}
}
