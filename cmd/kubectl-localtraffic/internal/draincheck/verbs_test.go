package draincheck

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// drain-check reads the announcers too. The replicas spread over three nodes, MetalLB names node-2 for the VIP:
// MetalLB announces a Local Service only from a node with a ready local endpoint, so draining node-2 moves the
// address to node-1 or node-3, a failover window (LB CHECK "failover", a line under the Service, the verdict's
// note), not a loss: exit 0 (before, exit 1 naming node-2 as dropping the VIP). Without the record node-2 is
// merely drained by its health check (exit 0).
func TestDrainCheckAnnouncers(t *testing.T) {
	drain := []string{"drain-check", "node-2", "-n", "kubelings", "-o", "json"}
	r := invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(), drain...)
	if r.Code != 0 {
		t.Errorf("no record: exit %d, want 0\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(l2Status("node-2")), drain...)
	rep := drainReport(t, r)
	f := rep.Services[0].AnnouncerFailover
	if r.Code != 0 || rep.Loses || f == nil || !slices.Equal(f.To, []string{"node-1", "node-3"}) || f.LocalBackendGate ||
		len(rep.Services[0].Unknown) > 0 || rep.Services[0].LoadBalancerCheck != nil {
		t.Errorf("MetalLB names node-2: exit %d, want 0 with a failover to node-1 and node-3\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(l2Status("node-2")), "drain-check", "node-2", "-n", "kubelings")
	if !regexp.MustCompile(`(?m)^kubelings/checkout\s.*\sfailover\s+ok$`).MatchString(r.Out) {
		t.Errorf("text: LB CHECK is not failover, DRAIN not ok:\n%s", r.Out)
	}
	for _, want := range []string{"metallb_l2 announces the load balancer IP from node-2 and follows local endpoints: " +
		"it moves to a node with a ready local endpoint (node-1, node-3) once node-2's pods stop",
		"draining node-2 leaves every Local Service served; announcers move the load balancer IP of 1 of them off node-2"} {
		if r.Code != 0 || !strings.Contains(r.Out, want) {
			t.Errorf("text: exit %d, want %q in\n%s", r.Code, want, r.Out)
		}
	}
	if strings.Contains(r.Out, "its load balancers keep sending") {
		t.Errorf("text gives the failover a load balancer's check window:\n%s", r.Out)
	}
}

// The announcers that follow local endpoints move; where no other node with a ready local endpoint that load
// balancers may use remains, nobody announces the address and the drain loses it. An announcer that does not
// follow local endpoints (OpenELB) keeps naming the drained node, which then drops the VIP; and a drain that
// leaves no endpoint anywhere is the outage it was, said once.
func TestDrainCheckAnnouncerMoves(t *testing.T) {
	drain := []string{"drain-check", "node-2", "-n", "kubelings", "-o", "json"}
	excludeOthers := func(objs []runtime.Object) []runtime.Object {
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok && n.Name != "node-2" {
				n.Labels[corev1.LabelNodeExcludeBalancers] = ""
			}
		}
		return objs
	}
	annotate := func(k, v string) func([]runtime.Object) []runtime.Object {
		return func(objs []runtime.Object) []runtime.Object {
			for _, o := range objs {
				if s, ok := o.(*corev1.Service); ok {
					metav1.SetMetaDataAnnotation(&s.ObjectMeta, k, v)
				}
			}
			return objs
		}
	}
	same := func(objs []runtime.Object) []runtime.Object { return objs }
	for _, c := range []struct {
		name     string
		objs     func([]runtime.Object) []runtime.Object
		record   runtime.Object
		failover bool
		gate     bool
		loses    string // a line of Why, "" when it does not lose
	}{
		{"Cilium's lease on node-2", same, clitest.CiliumLease("kube-system", "node-2", time.Now()), true, true, ""},
		{"kube-vip names node-2", annotate(announce.AnnotationKubeVIPHost, "node-2"), nil, true, false, ""},
		{"MetalLB names node-2, the other nodes excluded from load balancers", excludeOthers, l2Status("node-2"), false, false,
			"metallb_l2 announces the load balancer IP from node-2 and moves it only to a node with a ready local endpoint: none that " +
				"load balancers may use remains once node-2's pods are evicted, so nobody announces the address"},
		{"OpenELB names node-2: it does not follow local endpoints", annotate(announce.AnnotationOpenELBLayer2, "node-2"), nil, false, false,
			"node-2 would drop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var recs []runtime.Object
			if c.record != nil {
				recs = append(recs, c.record)
			}
			r := invokeAnnouncedOn(t, c.objs(drillObjects(false)), fakeAnnouncers(recs...), drain...)
			rep := drainReport(t, r)
			d := rep.Services[0]
			if (d.AnnouncerFailover != nil) != c.failover || c.failover && d.AnnouncerFailover.LocalBackendGate != c.gate {
				t.Errorf("failover %+v, want %v (gate %v)", d.AnnouncerFailover, c.failover, c.gate)
			}
			why := strings.Join(d.Why, "\n")
			if d.Loses != (c.loses != "") || !strings.Contains(why, c.loses) || (r.Code == 1) != d.Loses {
				t.Errorf("exit %d, loses %v (%s), want the loss %q", r.Code, d.Loses, why, c.loses)
			}
		})
	}
	// A budget that allows no disruption holds node-2's pod: the drain waits, node-2 keeps its endpoint, and the
	// announcer stays.
	r := invokeAnnouncedOn(t, append(drillObjects(false), pdbAllowing(0)), fakeAnnouncers(l2Status("node-2")), drain...)
	if d := drainReport(t, r).Services[0]; r.Code != 0 || d.AnnouncerFailover != nil || len(d.Blocked) != 1 || d.Loses {
		t.Errorf("node-2's pod held: exit %d, failover %+v, blocked %v, loses %v; want 0, none, one, no", r.Code, d.AnnouncerFailover, d.Blocked, d.Loses)
	}
	// All three replicas on node-1, which MetalLB names: draining it leaves no endpoint anywhere, the outage line only.
	r = invokeAnnouncedOn(t, drillObjects(true), fakeAnnouncers(l2Status("node-1")), "drain-check", "node-1", "-n", "kubelings", "-o", "json")
	d := drainReport(t, r).Services[0]
	if r.Code != 1 || len(d.Why) != 1 || !strings.Contains(d.Why[0], "no endpoint left anywhere") || d.AnnouncerFailover != nil {
		t.Errorf("draining the only serving node: exit %d, why %q, failover %+v", r.Code, d.Why, d.AnnouncerFailover)
	}
	// The text says Cilium's gate.
	r = invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(clitest.CiliumLease("kube-system", "node-2", time.Now())),
		"drain-check", "node-2", "-n", "kubelings")
	if !strings.Contains(r.Out, "Cilium moves it only with its local-backend gate (1.20.2 and later)") {
		t.Errorf("text does not say Cilium's gate:\n%s", r.Out)
	}
}

// drainReport decodes drain-check -o json with one Service.
// A Cilium lease's holder announces the externalIPs a policy with externalIPs true selects, whatever the
// Service's type: draining the holder, node-2, moves them to a node with a ready local endpoint, a failover the
// report names, in JSON and in text, as for a load balancer IP, and no loss of the address: node-2 no longer
// receives it. (The drain loses NodePort clients of node-2, as for any Local NodePort Service: exit 1 for that
// alone.) Before, a NodePort Service's leaving announcer went unsaid, and node-2 was said to drop the externalIP.
func TestDrainCheckCiliumExternalIP(t *testing.T) {
	objs := drillObjects(false)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Spec.ExternalIPs = []string{"192.0.2.50"}
		}
	}
	policy := clitest.CiliumPolicy("ext", nil)
	spec := policy.Object["spec"].(map[string]any)
	spec["loadBalancerIPs"], spec["externalIPs"] = false, true
	dyn := fakeAnnouncers(policy, clitest.CiliumLease("kube-system", "node-2", time.Now()))
	invokeOn := func(args ...string) result {
		return clitest.InvokeWithAnnouncers(t, []cli.Verb{NewCmd}, objs, dyn, &clitest.StepClock{T: time.Now()}, args...)
	}
	r := invokeOn("drain-check", "node-2", "-n", "kubelings", "-o", "json")
	rep := drainReport(t, r)
	d := rep.Services[0]
	if f := d.AnnouncerFailover; f == nil || f.Announces != "externalIP" || !slices.Equal(f.Sources, []announce.Source{announce.SourceCiliumL2}) ||
		!slices.Equal(f.To, []string{"node-1", "node-3"}) || !f.LocalBackendGate {
		t.Errorf("Cilium's lease on node-2 for the externalIP: failover %+v; want cilium_l2 moving the externalIP to node-1 and node-3 "+
			"behind its gate\n%s%s", d.AnnouncerFailover, r.Out, r.ErrOut)
	}
	if len(d.Why) != 1 || !strings.HasPrefix(d.Why[0], "node-2 would drop NodePort 30090/TCP: ") {
		t.Errorf("why %q: want node-2's NodePort alone (the externalIP leaves with the lease, and another node takes it)", d.Why)
	}
	r = invokeOn("drain-check", "node-2", "-n", "kubelings")
	if want := "cilium_l2 announces the externalIP from node-2 and follows local endpoints"; !strings.Contains(r.Out, want) {
		t.Errorf("text: want %q in\n%s", want, r.Out)
	}
}

func drainReport(t *testing.T, r result) placement.DrainReport {
	t.Helper()
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil || len(rep.Services) != 1 {
		t.Fatalf("drain-check -o json (exit %d): %v\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	return rep
}

// drain-check --prometheus: a drain the API finds harmless fails while the exporters report the Service
// blackholed now, and says so under the Service and in JSON.
func TestDrainCheckPrometheus(t *testing.T) {
	objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
	f := &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer(append(clitest.ReportedBy("1", "node-1", "node-2", "node-3"),
		clitest.ReasonSeries("node-3", "health_check_ignored"))...)}
	url := clitest.StartProm(t, f)
	r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url)
	if r.Code != cli.ExitFindings || !strings.Contains(r.Out, "now, before any drain, its exporters report health_check_ignored on node-3") ||
		!strings.Contains(r.Out, "the exporters report 1 of these Local Service(s) blackholed now") {
		t.Errorf("exit %d, want 1 and node-3's blackhole named:\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url, "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil || rep.ObservedBlackholes != 1 || len(rep.Services) != 1 ||
		strings.Join(rep.Services[0].Observed["health_check_ignored"], ",") != "node-3" || rep.Loses {
		t.Errorf("json %v: %+v", err, rep)
	}
	// The exporters report nothing: the API's verdict stands (exit 0); a node unheard of makes it 3.
	f.Body = clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...)
	if r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.Code != cli.ExitClean {
		t.Errorf("clean: exit %d\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	f.Body = clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2")...)
	if r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.Code != cli.ExitAPI || !strings.Contains(r.ErrOut, "node-3") {
		t.Errorf("node-3 unheard of: exit %d, stderr %q", r.Code, r.ErrOut)
	}
}

// Completion through cobra's __complete: NODE completes the nodes.
func TestDrainCheckCompletion(t *testing.T) {
	args, want := []string{"__complete", "drain-check", "node-"}, "node-1\nnode-2\nnode-3\n:4\n"
	if r := invoke(t, "", nil, false, drillObjects(true), args...); r.Out != want {
		t.Errorf("%v: %q, want %q", args, r.Out, want)
	}
}
