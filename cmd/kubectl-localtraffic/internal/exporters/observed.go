package exporters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/metricnames"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// exporterReads bounds how many exporters are read at once: each read is a port-forward through the API server.
const exporterReads = 16

// exporterTimeout bounds one exporter's read (port-forward, request and answer).
const exporterTimeout = 20 * time.Second

// ReadObserved asks each node's exporter what it observes (the blackhole reasons of its Services: a reason says
// too when the arrivals meter is blind, not_observed), through a port-forward to the exporter's own port in its
// pod, with the user's own credentials: that one port of the DaemonSet's pods and nothing else. The DaemonSet
// (dsName, or the one running the exporter in namespace) gives the pods, the port, the scheme and the path. It
// needs get on daemonsets, list on pods and get and create on pods/portforward in the exporter's namespace. A pod
// that does not answer leaves its node unknown: the error names the nodes and why, and what did answer is
// returned beside it.
func ReadObserved(ctx context.Context, cs kubernetes.Interface, f cli.Fetcher, namespace, dsName string) (placement.Observed, error) {
	in, err := findExporter(ctx, cs, namespace, dsName)
	if err != nil {
		return nil, err
	}
	if err := canPortForward(ctx, cs, namespace); err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(in.daemonSet.Spec.Selector)
	if err != nil {
		return nil, cli.BadInputf("DaemonSet %s/%s: selector: %w", namespace, in.daemonSet.Name, err)
	}
	pods, err := clusterview.ListAll[corev1.Pod](ctx, "the exporter's pods in "+namespace, func(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
		o.LabelSelector = sel.String()
		return cs.CoreV1().Pods(namespace).List(ctx, o)
	})
	if err != nil {
		return nil, cli.APIError{Err: err}
	}
	var mu sync.Mutex
	obs := placement.Observed{}
	failed := map[string][]string{} // why: nodes
	fail := func(node, why string) {
		mu.Lock()
		failed[why] = append(failed[why], node)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, exporterReads)
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue // not scheduled: no node to report for
		}
		if ref := metav1.GetControllerOf(p); ref != nil && (ref.Kind != "DaemonSet" || ref.Name != in.daemonSet.Name) {
			// Another controller's pod that the DaemonSet's selector happens to match: not an exporter, and
			// the port-forward right reaches whatever it runs. Pods of no controller (static or mirror pods
			// of the DaemonSet's template) are read.
			continue
		}
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			fail(p.Spec.NodeName, fmt.Sprintf("its exporter pod %s is not running (%s)", p.Name, p.Status.Phase))
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			pctx, cancel := context.WithTimeout(ctx, exporterTimeout)
			defer cancel()
			body, err := f.Get(pctx, p, in.port, in.scheme, in.path)
			if err != nil {
				fail(p.Spec.NodeName, cli.OneLine(err.Error()))
				return
			}
			o, err := parseObserved(body)
			if err != nil {
				fail(p.Spec.NodeName, cli.OneLine(err.Error()))
				return
			}
			mu.Lock()
			obs[p.Spec.NodeName] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		var msgs []string
		for why, nodes := range failed {
			sort.Strings(nodes)
			msgs = append(msgs, fmt.Sprintf("no report from the exporter on %s: %s", cli.NodeList(nodes), why))
		}
		sort.Strings(msgs)
		return obs, cli.APIError{Err: errors.New(strings.Join(msgs, "; "))}
	}
	return obs, nil
}

// canPortForward asks the API server whether the user may port-forward to pods in namespace, as kubectl
// port-forward does it (a WebSocket upgrade, a GET that the API server authorizes as get and, since Kubernetes
// 1.35, also as create; SPDY, a POST, as create): when not, one error naming the permission, rather than one
// refusal per node.
func canPortForward(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	var missing []string
	for _, verb := range []string{"get", "create"} {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Resource: "pods", Subresource: "portforward"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return cli.APIError{Err: fmt.Errorf("asking whether you may %s pods/portforward in %s: %w", verb, namespace, err)}
		}
		if !r.Status.Allowed {
			missing = append(missing, verb)
		}
	}
	if len(missing) > 0 {
		v := strings.Join(missing, " and ")
		return cli.APIError{Err: fmt.Errorf("--from-exporters reads each node's exporter through a port-forward to its pod, and you may not "+
			"%s pods/portforward in namespace %s (kubectl auth can-i %s pods/portforward -n %s)", v, namespace, missing[0], namespace)}
	}
	return nil
}

// parseObserved reads an exporter's /metrics: the blackhole reason of each Service the node blackholes, and its
// measured drains.
func parseObserved(body []byte) (placement.NodeObserved, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return placement.NodeObserved{}, fmt.Errorf("reading the exporter's metrics: %w", err)
	}
	o := placement.NodeObserved{Reasons: map[string]string{}}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, m := range fams[metricnames.BlackholeReason].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			key := label(m, metricnames.BlackholeReasonLabelNamespace) + "/" + label(m, metricnames.BlackholeReasonLabelService)
			o.Reasons[key] = label(m, metricnames.BlackholeReasonLabelReason)
		}
	}
	if fam, ok := fams[lbDrainSeconds]; ok {
		o.Drains = drainBuckets(fam)
	}
	return o, nil
}
