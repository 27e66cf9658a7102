package scrape

import (
	"net/http"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

// decideInput is everything the exporter read for the verdict of one Service on its node.
type decideInput struct {
	Service kubeview.ServiceState
	Node    kubeview.NodeState
	// Checks is the health check node port's answer per family; absent for a family not probed.
	Checks map[corev1.IPFamily]*nodeprobe.HealthCheck
	// Rules is kube-proxy's programmed state; nil when it could not be read (the API view decides).
	Rules FamilyRules
	// Arrivals is the evidence that an externalIP's traffic reaches this node; nil: none does.
	Arrivals verdict.Arrivals
}

// decideOne decides one Service as a scrape does (a decider of its own), so these rows test the adapter the
// scrape uses.
func decideOne(in decideInput) verdict.Verdict {
	return newDecider(in.Rules, in.Arrivals).decide(in.Service, in.Node, in.Checks)
}

func check(status int) *nodeprobe.HealthCheck {
	switch status {
	case http.StatusOK:
		return &nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: status}
	case http.StatusServiceUnavailable:
		return &nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: status}
	}
	return &nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: status}
}

func failed(r nodeprobe.Result) *nodeprobe.HealthCheck {
	return &nodeprobe.HealthCheck{Result: r, LocalEndpoints: -1}
}

// fakeFamilyRules: per family, per port name, the drop rules.
type fakeFamilyRules map[string]map[string][]kernelrules.DropRule

func (f fakeFamilyRules) HasFamily(family string) bool { _, ok := f[family]; return ok }

func (f fakeFamilyRules) Family(sp kernelrules.ServicePort, family string) kernelrules.PortState {
	drops, ok := f[family][sp.Port]
	if !ok {
		return kernelrules.PortState{}
	}
	return kernelrules.PortState{Programmed: true, Drop: len(drops) > 0, Drops: drops, LocalEndpoints: map[bool]int{true: 0, false: 1}[len(drops) > 0]}
}

// The decision's rules are tested where they live (verdict: TestDecideTable); these rows test only
// the adapting: the probes' answers and kube-proxy's rules as read become the verdict's evidence unchanged.
func TestDecideAdaptsTheEvidence(t *testing.T) {
	ready := kubeview.NodeState{Name: "node-1", Found: true}
	lbWithIP := scrapetest.LBService()
	lbWithIP.LoadBalancerIPs = []string{"192.0.2.10"}
	checks := func(c *nodeprobe.HealthCheck) map[corev1.IPFamily]*nodeprobe.HealthCheck {
		return map[corev1.IPFamily]*nodeprobe.HealthCheck{v4: c}
	}
	type want struct {
		inRotation, blackhole bool
		source                verdict.Source
	}
	cases := []struct {
		name string
		in   decideInput
		want want
	}{
		{"a 200 keeps the node in rotation", decideInput{Service: scrapetest.LBService(), Node: ready, Checks: checks(check(200))},
			want{true, true, SourceAPI}},
		{"a 503 drains it", decideInput{Service: scrapetest.LBService(), Node: ready, Checks: checks(check(503))}, want{false, false, SourceAPI}},
		{"a refused probe is passed on as refused: drained", decideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: checks(failed(nodeprobe.ResultRefused))}, want{false, false, SourceAPI}},
		{"no address to probe is passed on: out", decideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: checks(failed(nodeprobe.ResultNoAddress))}, want{false, false, SourceAPI}},
		{"a family without a probe has no health check answer", decideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: map[corev1.IPFamily]*nodeprobe.HealthCheck{v4: nil}}, want{false, false, SourceAPI}},
		{"rules read: the source is the rules, a NodePort drop rule drops the NodePort",
			decideInput{Service: scrapetest.NodePortService(1), Node: ready, Rules: fakeFamilyRules{"IPv4": {"http": {{Port: 30090}}}}},
			want{true, true, SourceRules}},
		{"a drop rule at another address drops nothing here",
			decideInput{Service: lbWithIP, Node: ready, Checks: checks(check(200)), Rules: fakeFamilyRules{"IPv4": {"http": {{Address: "192.0.2.99", Port: 80}}}}},
			want{true, false, SourceRules}},
		{"a rule for all destinations drops the load balancer IP too",
			decideInput{Service: lbWithIP, Node: ready, Checks: checks(check(200)), Rules: fakeFamilyRules{"IPv4": {"http": {{AllDestinations: true}}}}},
			want{true, true, SourceRules}},
		{"kube-proxy not programmed: nothing drops whatever the API says",
			decideInput{Service: scrapetest.NodePortService(0), Node: ready, Rules: notProgrammed{}}, want{true, false, SourceRules}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := decideOne(c.in)
			if got := (want{v.InRotation, v.Blackhole, v.Source}); got != c.want {
				t.Errorf("decideOne = %+v, want %+v\n%+v", got, c.want, v.Families)
			}
		})
	}
}

// A port whose rules send its traffic only to endpoints that no longer exist drops every destination in fact.
func TestVerdictRulesGoneDropsEverything(t *testing.T) {
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	vr := newVerdictRules(fakeFamilyRules{"IPv4": {"http": nil}})
	if st := vr.Family(sp, "IPv4"); st.Drop {
		t.Fatalf("forwarding rules read as a drop: %+v", st)
	}
	vr.markGone(sp, "IPv4")
	svc := scrapetest.LBService()
	svc.LoadBalancerIPs = []string{"192.0.2.10"}
	v := decideOne(decideInput{Service: svc, Node: kubeview.NodeState{Name: "node-1", Found: true},
		Checks: map[corev1.IPFamily]*nodeprobe.HealthCheck{v4: check(200)}, Rules: vr})
	if !v.Blackhole {
		t.Fatalf("gone endpoints: %+v", v.Families)
	}
	for _, e := range v.Families[0].Entries {
		if !e.Dropped {
			t.Errorf("%s %s not dropped", e.Kind, e.Address)
		}
	}
}
