package draincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// spreadBehindLB is the drill spread over three nodes behind an annotated load balancer (10 s × 3), with a
// PodDisruptionBudget that allows one disruption: draining node-1 loses nothing but the load balancer's window.
func spreadBehindLB() []runtime.Object {
	return append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
}

// drain-check --prometheus: where the exporters measured the Service's drain (p95 31.2 s over 12 episodes), the
// window is the measured one, not the annotations' 30 s, and says so; under the Service, the exact preStop and
// grace its Deployment lacks. The exit status stays 0: the window is not a loss. Without an episode, the
// annotations' window stands.
func TestDrainCheckMeasuredDrain(t *testing.T) {
	reported := clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...)
	f := &clitest.FakeProm{Answer: clitest.DrainAnswers(reported, clitest.VectorAnswer(clitest.DrainSeries("31.2", "12")...))}
	url := clitest.StartProm(t, f)
	r := invoke(t, "", nil, false, spreadBehindLB(), "drain-check", "node-1", "-n", "kubelings", "--prometheus", url)
	if r.Code != cli.ExitClean || r.ErrOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", r.Code, r.ErrOut, r.Out)
	}
	for _, want := range []string{"31.2s measured (p95 of 12)",
		"keep sending new connections to node-1 for up to 31.2s (measured by the exporters: the p95 of their episodes)",
		"Deployment checkout's pods stop serving after 0s: set lifecycle.preStop.sleep.seconds: 37 and terminationGracePeriodSeconds: 67"} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("text without %q:\n%s", want, r.Out)
		}
	}
	if len(f.Queries) != 2 {
		t.Errorf("queries %q: want the verdicts' and the drain's", f.Queries)
	}

	r = invoke(t, "", nil, false, spreadBehindLB(), "drain-check", "node-1", "-n", "kubelings", "--prometheus", url, "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil || len(rep.Services) != 1 {
		t.Fatalf("json: %v\n%s", err, r.Out)
	}
	s := rep.Services[0]
	if w := s.LoadBalancerWindow; w == nil || w.Source != placement.WindowMeasured || w.Seconds != 31.2 ||
		s.LoadBalancerCheck == nil || s.LoadBalancerCheck.Seconds != 30 || s.MeasuredDrain == nil || s.PreStop == nil ||
		s.PreStop.Workloads[0].RecommendedPreStopSeconds != 37 {
		t.Errorf("service %+v: want the measured window (31.2 s), the annotations' check kept beside it, and the advice", s)
	}

	f.Answer = clitest.DrainAnswers(reported, clitest.VectorAnswer())
	r = invoke(t, "", nil, false, spreadBehindLB(), "drain-check", "node-1", "-n", "kubelings", "--prometheus", url)
	if r.Code != cli.ExitClean || !strings.Contains(r.Out, "for up to 30s after its pods stop") || strings.Contains(r.Out, "measured") ||
		strings.Contains(r.Out, "preStop") {
		t.Errorf("no episode: exit %d, want the annotations' 30 s window and no advice:\n%s", r.Code, r.Out)
	}
	r = invoke(t, "", nil, false, spreadBehindLB(), "drain-check", "node-1", "-n", "kubelings", "--prometheus", url, "--from-exporters")
	clitest.CheckBadInput(t, r, "choose one")
}

// exporterFetch answers each exporter pod with its node's drain histogram of kubelings/checkout.
type exporterFetch map[string]string

func (f exporterFetch) Get(_ context.Context, pod *corev1.Pod, _ int, _, _ string) ([]byte, error) {
	return []byte(f[pod.Name]), nil
}

const histogram = `# TYPE localtraffic_service_lb_drain_seconds histogram
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="10"} 2
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="60"} 4
localtraffic_service_lb_drain_seconds_bucket{node="NODE",namespace="kubelings",service="checkout",le="+Inf"} 4
localtraffic_service_lb_drain_seconds_sum{node="NODE",namespace="kubelings",service="checkout"} 100
localtraffic_service_lb_drain_seconds_count{node="NODE",namespace="kubelings",service="checkout"} 4
`

// drain-check --from-exporters: the exporters' histograms (4 episodes on each of node-2 and node-3, half within
// 10 s, the rest within 60 s) give p95 55 s, which the window and the advice use (sleep 60 s); the exporters'
// verdicts come along (node-1's exporter reports no blackhole).
func TestDrainCheckMeasuredFromExporters(t *testing.T) {
	b, err := os.ReadFile("../../../../deploy/base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := sigsyaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	objs := append(spreadBehindLB(), &ds)
	for _, n := range []string{"1", "2", "3"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "exporter-" + n, Labels: ds.Spec.Template.Labels},
			Spec: corev1.PodSpec{NodeName: "node-" + n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	fetch := exporterFetch{"exporter-1": "", "exporter-2": strings.ReplaceAll(histogram, "NODE", "node-2"),
		"exporter-3": strings.ReplaceAll(histogram, "NODE", "node-3")}
	var out, errOut bytes.Buffer
	env := clitest.Env("", cs, &out, &errOut)
	env.Forward = func(*genericclioptions.ConfigFlags) (cli.Fetcher, error) { return fetch, nil }
	code := clitest.Execute(env, []string{"drain-check", "node-1", "-n", "kubelings", "--from-exporters"}, NewCmd)
	if code != cli.ExitClean || errOut.Len() > 0 {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut.String(), out.String())
	}
	for _, want := range []string{"55s measured (p95 of 8)", "set lifecycle.preStop.sleep.seconds: 60 and terminationGracePeriodSeconds: 90"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text without %q:\n%s", want, out.String())
		}
	}
}
