package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// exporterSelector is the label the shipped DaemonSet (deploy/base, the Helm chart) puts on the exporter's pods.
const exporterSelector = "app.kubernetes.io/name=localtraffic-exporter"

// exporterPort is the exporter's default listen port (--web.listen-address :9746).
const exporterPort = 9746

// readObserved asks each node's exporter, through the API server's pod proxy, what it observes: the blackhole
// reasons of its Services (localtraffic_blackhole_reason says too when the arrivals meter is blind:
// not_observed). Read-only, but it needs get on pods/proxy in the
// exporter's namespace (not in the localtraffic-audit ClusterRole: the pod proxy reaches any path of a pod). A
// pod that does not answer leaves its node unknown; the error says which, and the status is still printed.
func readObserved(ctx context.Context, cs kubernetes.Interface, namespace string) (placement.Observed, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: exporterSelector})
	if err != nil {
		return nil, fmt.Errorf("listing the exporter's pods in %s: %w", namespace, err)
	}
	obs := placement.Observed{}
	var failed []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		body, err := cs.CoreV1().Pods(namespace).ProxyGet("http", p.Name, strconv.Itoa(exporterPort), "metrics", nil).DoRaw(pctx)
		cancel()
		if err != nil {
			failed = append(failed, p.Spec.NodeName)
			continue
		}
		o, err := parseObserved(body)
		if err != nil {
			failed = append(failed, p.Spec.NodeName)
			continue
		}
		obs[p.Spec.NodeName] = o
	}
	if len(failed) > 0 {
		return obs, fmt.Errorf("no report from the exporter on %v", failed)
	}
	return obs, nil
}

// parseObserved reads an exporter's /metrics.
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
	for _, m := range fams["localtraffic_blackhole_reason"].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			o.Reasons[label(m, "namespace")+"/"+label(m, "service")] = label(m, "reason")
		}
	}
	return o, nil
}
