package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// metricsOf is what one node's exporter answers: node-2 blackholes kubelings/checkout and sees its clients
// dropped, node-3 blackholes it with nobody using it yet.
var metricsOf = map[string]string{
	"exporter-2": `# TYPE localtraffic_blackhole_reason gauge
localtraffic_blackhole_reason{namespace="kubelings",node="node-2",reason="traffic_lost",service="checkout"} 1
# TYPE localtraffic_arrivals_meter_state gauge
localtraffic_arrivals_meter_state{node="node-2",state="ok"} 1
localtraffic_arrivals_meter_state{node="node-2",state="disabled"} 0
`,
	"exporter-3": `# TYPE localtraffic_blackhole_reason gauge
localtraffic_blackhole_reason{namespace="kubelings",node="node-3",reason="no_traffic_seen",service="checkout"} 1
`,
}

// failing is an exporter that does not answer.
type failing struct{}

func (failing) DoRaw(context.Context) ([]byte, error)         { return nil, io.ErrUnexpectedEOF }
func (failing) Stream(context.Context) (io.ReadCloser, error) { return nil, io.ErrUnexpectedEOF }

type body []byte

func (b body) DoRaw(context.Context) ([]byte, error) { return b, nil }
func (b body) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b)), nil
}

// status --from-exporters reads each node's exporter through the pod proxy into the OBSERVED column: node-2
// loses traffic, node-3 has nobody reaching it yet, node-1's exporter does not answer (its node stays unknown,
// and the error says so).
func TestStatusFromExporters(t *testing.T) {
	objs := drillObjects(true)
	for _, n := range []string{"1", "2", "3"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "localtraffic-system", Name: "exporter-" + n,
				Labels: map[string]string{"app.kubernetes.io/name": "localtraffic-exporter"}},
			Spec: corev1.PodSpec{NodeName: "node-" + n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	cs := fake.NewClientset(objs...)
	cs.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		p := a.(k8stesting.ProxyGetAction)
		m, ok := metricsOf[p.GetName()]
		if !ok || p.GetPort() != "9746" || p.GetPath() != "metrics" {
			return true, failing{}, nil
		}
		return true, body(m), nil
	})
	var out, errOut bytes.Buffer
	a := &app{in: strings.NewReader(""), out: &out, errOut: &errOut, getenv: func(string) string { return "" },
		client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	if code := a.run(context.Background(), []string{"status", "-n", "kubelings", "--from-exporters"}); code != exitFindings {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitFindings, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "OBSERVED") || !strings.Contains(out.String(), "traffic_lost: node-2; no_traffic_seen: node-3") {
		t.Errorf("no OBSERVED column naming node-2 and node-3:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "node-1") {
		t.Errorf("the unanswered exporter is not reported: %q", errOut.String())
	}
	// Without the flag there is no column and no proxy call.
	out.Reset()
	cs.ClearActions()
	a.run(context.Background(), []string{"status", "-n", "kubelings"})
	if strings.Contains(out.String(), "OBSERVED") {
		t.Errorf("OBSERVED without --from-exporters:\n%s", out.String())
	}
	for _, act := range cs.Actions() {
		if act.GetSubresource() == "proxy" {
			t.Errorf("a proxy call without --from-exporters: %v", act)
		}
	}
}
