package status

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

// withPreStop gives the drill's Deployment a native sleep preStop of n seconds and a grace period.
func withPreStop(objs []runtime.Object, n, grace int64) []runtime.Object {
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: n}}}
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
		}
	}
	return objs
}

func preStopProm(t *testing.T, drain string) (*clitest.FakeProm, string) {
	t.Helper()
	f := &clitest.FakeProm{Answer: clitest.DrainAnswers(clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...), drain)}
	return f, clitest.StartProm(t, f)
}

// status --prometheus -o wide: a second query reads the measured drain (p95 31.2 s over 12 episodes in the
// default week), and the PRESTOP column says what the drill's Deployment lacks: sleep 37 s (32 + the 5 s margin),
// grace 67 s (the 30 s it has for its shutdown kept); the plain table asks one query and shows no column.
func TestStatusPreStopFromPrometheus(t *testing.T) {
	f, url := preStopProm(t, clitest.VectorAnswer(clitest.DrainSeries("31.2", "12")...))
	r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url, "-o", "wide")
	if r.Code != cli.ExitClean || r.ErrOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", r.Code, r.ErrOut, r.Out)
	}
	if !strings.Contains(r.Out, "PRESTOP") || !strings.Contains(r.Out, "sleep 37s, grace 67s (has 0s, 30s)") {
		t.Errorf("no PRESTOP column with the advice:\n%s", r.Out)
	}
	if len(f.Queries) != 2 || !strings.Contains(f.Queries[1], "localtraffic_service_lb_drain_seconds_bucket[1w]") {
		t.Errorf("queries %q: want the verdicts' and the drain's over a week", f.Queries)
	}

	r = runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url, "-o", "json", "--drain-lookback", "3d")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 {
		t.Fatalf("json: %v\n%s", err, r.Out)
	}
	a := st.Items[0].PreStop
	if a == nil || a.PreStopSeconds != 37 || a.Drain.P95Seconds != 31.2 || a.Drain.Episodes != 12 || a.Drain.Source != "prometheus" ||
		len(a.Workloads) != 1 || a.Workloads[0].Name != "checkout" || a.Workloads[0].Needed != "yes" ||
		a.Workloads[0].RecommendedPreStopSeconds != 37 || a.Workloads[0].RecommendedGraceSeconds != 67 {
		t.Errorf("preStop %+v", a)
	}
	if q := f.Queries[len(f.Queries)-1]; !strings.Contains(q, "[3d]") {
		t.Errorf("--drain-lookback 3d: query %s", q)
	}

	// Pods with enough: no recommendation, in the column or the document.
	r = runWith(t, withPreStop(drillObjects(false), 40, 60), "status", "-n", "kubelings", "--prometheus", url, "-o", "wide")
	if !strings.Contains(r.Out, "ok (>=37s)") || strings.Contains(r.Out, "sleep 37s") {
		t.Errorf("a Deployment with a 40 s preStop gets advice:\n%s", r.Out)
	}
	r = runWith(t, withPreStop(drillObjects(false), 40, 60), "status", "-n", "kubelings", "--prometheus", url, "-o", "json")
	st = ServiceStatusList{}
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 || st.Items[0].PreStop == nil {
		t.Fatalf("json: %v\n%s", err, r.Out)
	}
	if w := st.Items[0].PreStop.Workloads[0]; w.Needed != "no" || w.RecommendedPreStopSeconds != 0 || *w.PreStopSeconds != 40 || w.GraceSeconds != 60 {
		t.Errorf("workload %+v, want needed no and no recommendation", w)
	}

	f.Queries = nil
	r = runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url)
	if strings.Contains(r.Out, "PRESTOP") || len(f.Queries) != 1 {
		t.Errorf("the plain table: queries %q, PRESTOP shown:\n%s", f.Queries, r.Out)
	}
}

// No episode in the window: the column says "-" and the document has no preStop. A failed drain query is said in
// one line and exits 3 where nothing else fails; the verdicts stand.
func TestStatusPreStopNoDrain(t *testing.T) {
	_, url := preStopProm(t, clitest.VectorAnswer(clitest.DrainSeries("NaN", "0")...))
	r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url, "-o", "json")
	if r.Code != cli.ExitClean || strings.Contains(r.Out, `"preStop"`) {
		t.Errorf("exit %d, a preStop without an episode:\n%s", r.Code, r.Out)
	}
	f := &clitest.FakeProm{Answer: func(q string) (int, string) {
		if strings.Contains(q, "lb_drain") {
			return http.StatusUnprocessableEntity, `{"status":"error","errorType":"execution","error":"query processing would load too many samples"}`
		}
		return http.StatusOK, clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...)
	}}
	r = runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", clitest.StartProm(t, f), "-o", "wide")
	if r.Code != cli.ExitAPI || strings.Count(r.ErrOut, "\n") != 1 || !strings.Contains(r.ErrOut, "the measured drain") ||
		!strings.Contains(r.ErrOut, "too many samples") || strings.Contains(r.Out, "PRESTOP") {
		t.Errorf("exit %d, stderr %q\n%s", r.Code, r.ErrOut, r.Out)
	}
	clitest.CheckBadInput(t, runWith(t, drillObjects(false), "status", "--drain-lookback", "3d"), "--drain-lookback")
	clitest.CheckBadInput(t, runWith(t, drillObjects(false), "status", "--prometheus", "http://p:9090", "--drain-lookback", "0s"), "--drain-lookback")
}

// drainFetch answers each exporter pod's port-forward with its node's drain histogram of kubelings/checkout.
type drainFetch map[string]string

func (f drainFetch) Get(_ context.Context, pod *corev1.Pod, _ int, _, _ string) ([]byte, error) {
	return []byte(f[pod.Name]), nil
}

func drainHistogram(node, in10, in30 string) string {
	r := strings.NewReplacer("NODE", node, "IN10", in10, "IN30", in30)
	return r.Replace(`# TYPE localtraffic_service_lb_drain_seconds histogram
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="10"} IN10
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="30"} IN30
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="+Inf"} IN30
localtraffic_service_lb_drain_seconds_sum{node="NODE",namespace="kubelings",service="checkout"} 100
localtraffic_service_lb_drain_seconds_count{node="NODE",namespace="kubelings",service="checkout"} IN30
`)
}

// status --from-exporters -o wide: the nodes' histograms summed (node-1: 2 of 4 episodes within 10 s, node-2: 16
// of 16) give p95 20 s, so a 25 s sleep, for pods with a 10 s preStop whose 15 s of grace leave 5 s to shut down.
func TestStatusPreStopFromExporters(t *testing.T) {
	ds := shippedDaemonSet(t)
	objs := append(withPreStop(drillObjects(false), 10, 15), ds)
	objs = append(objs, exporterPods(ds)...)
	cs := fake.NewClientset(objs...)
	allowPortForward(cs, true)
	f := drainFetch{"exporter-1": drainHistogram("node-1", "2", "4"), "exporter-2": drainHistogram("node-2", "16", "16"), "exporter-3": ""}
	var out, errOut bytes.Buffer
	code := execute(exportersApp(cs, f, &out, &errOut), []string{"status", "-n", "kubelings", "--from-exporters", "-o", "wide"})
	if code != cli.ExitClean || !strings.Contains(out.String(), "sleep 25s, grace 30s (has 10s, 15s)") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut.String(), out.String())
	}
}

// On a terminal the OBSERVED and PRESTOP cells are passed over, not painted: the grid's "-" cells after them keep
// their colour (the drill's Deployment moved to node-3 behind a load balancer, node-1 and node-2 excluded from it:
// "-", node-3 "ok 3").
func TestStatusPreStopColour(t *testing.T) {
	objs := clitest.BehindLoadBalancer(drillObjects(true))
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Pod:
			x.Spec.NodeName = "node-3"
		case *corev1.Node:
			if x.Name != "node-3" {
				x.Labels[corev1.LabelNodeExcludeBalancers] = "true"
			}
		case *discoveryv1.EndpointSlice:
			for i := range x.Endpoints {
				x.Endpoints[i].NodeName = ptr.To("node-3")
			}
		}
	}
	_, url := preStopProm(t, clitest.VectorAnswer())
	r := runWith(t, objs, "status", "-n", "kubelings", "--prometheus", url, "-o", "wide", "--color", "always")
	if !regexp.MustCompile(`OK` + regexp.QuoteMeta(cli.Reset) + `\s+1\s+1\s+0\s+-\s+<none>\s+<none>\s+-\s+` + regexp.QuoteMeta(cli.Dim+"-"+cli.Reset) + `\s+` + regexp.QuoteMeta(cli.Dim+"-"+cli.Reset) +
		`\s+` + regexp.QuoteMeta(cli.Green+"ok 3"+cli.Reset)).MatchString(r.Out) {
		t.Errorf("PRESTOP painted or the grid's colours shifted:\n%q", r.Out)
	}
}
