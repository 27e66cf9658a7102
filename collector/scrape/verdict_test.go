package scrape

import (
	"net/http"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/collector/scrape/scrapetest"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/verdict"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

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

// fakeEvidence: addresses assigned to the node, and addresses whose drop counter grew.
type fakeEvidence struct {
	assigned map[string]bool
	arriving map[string]bool // address
}

func (e fakeEvidence) Arriving(d verdict.Destination) (string, bool) {
	switch {
	case e.assigned[d.Address]:
		return "assigned", true
	case e.arriving[d.Address]:
		return "counter grew", true
	}
	return "", false
}

type want struct{ inRotation, drops, blackhole bool }

func TestDecide(t *testing.T) {
	ready := kubeview.NodeState{Name: "node-1", Found: true}
	missing := kubeview.NodeState{Name: "node-1"}
	excluded := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true}
	deleting := kubeview.NodeState{Name: "node-1", Found: true, Deleting: true}
	toBeDeleted := kubeview.NodeState{Name: "node-1", Found: true, ToBeDeleted: true}
	checks := func(c4, c6 *nodeprobe.HealthCheck) map[corev1.IPFamily]*nodeprobe.HealthCheck {
		m := map[corev1.IPFamily]*nodeprobe.HealthCheck{}
		if c4 != nil {
			m[v4] = c4
		}
		if c6 != nil {
			m[v6] = c6
		}
		return m
	}
	withIPs := func(s kubeview.ServiceState, lb, ext []string) kubeview.ServiceState {
		s.LoadBalancerIPs, s.ExternalIPs = lb, ext
		return s
	}
	noNodePort := func(s kubeview.ServiceState) kubeview.ServiceState {
		for i := range s.Families {
			s.Families[i].Ports[0].NodePort = 0
		}
		s.Ports[0].NodePort = 0
		return s
	}
	nodePortDrop := []kernelrules.DropRule{{Port: 30090, Counted: true}}

	cases := []struct {
		name string
		in   DecideInput
		want want
	}{
		// NodePort: every NodePortEligible node.
		{"nodeport with a local endpoint serves", DecideInput{Service: scrapetest.NodePortService(1), Node: ready}, want{true, false, false}},
		{"nodeport without one is a blackhole", DecideInput{Service: scrapetest.NodePortService(0), Node: ready}, want{true, true, true}},
		{"no endpoint anywhere is an outage, not a blackhole",
			DecideInput{Service: scrapetest.NodePortService(0, scrapetest.Family(v4, 0, false)), Node: ready}, want{true, false, false}},
		{"excluded node drops but receives nothing", DecideInput{Service: scrapetest.NodePortService(0), Node: excluded}, want{false, true, false}},
		{"deleting node is out of nodeport rotation", DecideInput{Service: scrapetest.NodePortService(0), Node: deleting}, want{false, true, false}},
		{"autoscaler-tainted node is out of nodeport rotation", DecideInput{Service: scrapetest.NodePortService(0), Node: toBeDeleted}, want{false, true, false}},
		{"missing Node object: NodePort clients still reach the node", DecideInput{Service: scrapetest.NodePortService(0), Node: missing}, want{true, true, true}},

		// Dual-stack: a family that drops is enough; agreeing families are fine.
		{"dual-stack, IPv6 endpoint missing here: blackhole",
			DecideInput{Service: scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true)), Node: ready}, want{true, true, true}},
		{"dual-stack, both families local", DecideInput{Service: scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 1, true)), Node: ready},
			want{true, false, false}},
		{"dual-stack rules: only IPv6 drops",
			DecideInput{Service: scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 1, true)), Node: ready,
				Rules: fakeFamilyRules{"IPv4": {"http": nil}, "IPv6": {"http": nodePortDrop}}}, want{true, true, true}},
		{"rules decide when read: API says local, rules drop (stale sync)",
			DecideInput{Service: scrapetest.NodePortService(1), Node: ready, Rules: fakeFamilyRules{"IPv4": {"http": nodePortDrop}}}, want{true, true, true}},
		{"rules decide when read: API says none, rules forward",
			DecideInput{Service: scrapetest.NodePortService(0), Node: ready, Rules: fakeFamilyRules{"IPv4": {"http": nil}}}, want{true, false, false}},
		{"a family whose rules were not read falls back to the API",
			DecideInput{Service: scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true)), Node: ready,
				Rules: fakeFamilyRules{"IPv4": {"http": nil}}}, want{true, true, true}},

		// LoadBalancer: in rotation for a family only while that family's health check answers 200.
		{"LB answering 503 is drained", DecideInput{Service: scrapetest.LBService(), Node: ready, Checks: checks(check(503), nil)}, want{false, true, false}},
		{"LB answering 200 while dropping is a blackhole", DecideInput{Service: scrapetest.LBService(), Node: ready, Checks: checks(check(200), nil)},
			want{true, true, true}},
		{"LB health check refused drains (kube-proxy down)", DecideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: checks(failed(nodeprobe.ResultRefused), nil)}, want{false, true, false}},
		{"LB health check timing out drains", DecideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: checks(failed(nodeprobe.ResultTimeout), nil)}, want{false, true, false}},
		{"LB health check answering 500 drains", DecideInput{Service: scrapetest.LBService(), Node: ready, Checks: checks(check(500), nil)},
			want{false, true, false}},
		{"LB with no address to probe: out of rotation", DecideInput{Service: scrapetest.LBService(), Node: ready,
			Checks: checks(failed(nodeprobe.ResultNoAddress), nil)}, want{false, true, false}},
		{"LB node being deleted is out of every target set", DecideInput{Service: scrapetest.LBService(), Node: deleting,
			Checks: checks(check(200), nil)}, want{false, true, false}},
		{"LB node with the autoscaler taint is out", DecideInput{Service: scrapetest.LBService(), Node: toBeDeleted,
			Checks: checks(check(200), nil)}, want{false, true, false}},
		{"LB node excluded is out", DecideInput{Service: scrapetest.LBService(), Node: excluded, Checks: checks(check(200), nil)},
			want{false, true, false}},
		{"LB with a missing Node object is out", DecideInput{Service: scrapetest.LBService(), Node: missing, Checks: checks(check(200), nil)},
			want{false, true, false}},
		{"dual-stack LB: IPv6 check 200 while IPv6 drops is a blackhole",
			DecideInput{Service: scrapetest.LBService(scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true)), Node: ready, Checks: checks(check(200), check(200))},
			want{true, true, true}},
		{"dual-stack LB: IPv6 check 503 drains the IPv6 family only",
			DecideInput{Service: scrapetest.LBService(scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true)), Node: ready, Checks: checks(check(200), check(503))},
			want{true, true, false}},

		// Load balancer IPs: only the family's programmed ones; Proxy mode ones are left out by kubeview.
		{"allocateLoadBalancerNodePorts false, no programmed IP: nothing to drop",
			DecideInput{Service: noNodePort(scrapetest.LBService()), Node: ready, Checks: checks(check(200), nil)}, want{false, false, false}},
		{"allocateLoadBalancerNodePorts false, VIP ingress IP checked 200 drops: blackhole",
			DecideInput{Service: withIPs(noNodePort(scrapetest.LBService()), []string{"192.0.2.10"}, nil), Node: ready, Checks: checks(check(200), nil)},
			want{true, true, true}},
		{"rules: the LB IP's drop counts, not another address's",
			DecideInput{Service: withIPs(noNodePort(scrapetest.LBService(scrapetest.Family(v4, 0, true))), []string{"192.0.2.10"}, nil), Node: ready,
				Checks: checks(check(200), nil), Rules: fakeFamilyRules{"IPv4": {"http": {{Address: "192.0.2.99", Port: 80}}}}},
			want{true, false, false}},

		// externalIPs: in rotation only with evidence.
		{"externalIP without evidence: not in rotation",
			DecideInput{Service: withIPs(noNodePort(scrapetest.NodePortService(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: fakeEvidence{}}, want{false, true, false}},
		{"externalIP assigned to this node: blackhole",
			DecideInput{Service: withIPs(noNodePort(scrapetest.NodePortService(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: fakeEvidence{assigned: map[string]bool{"198.51.100.7": true}}}, want{true, true, true}},
		{"externalIP whose drop counter grew: blackhole",
			DecideInput{Service: withIPs(noNodePort(scrapetest.NodePortService(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Rules:    fakeFamilyRules{"IPv4": {"http": {{Address: "198.51.100.7", Port: 80, Counted: true}}}},
				Arrivals: fakeEvidence{arriving: map[string]bool{"198.51.100.7": true}}}, want{true, true, true}},
		{"externalIP of the other family is not this family's",
			DecideInput{Service: withIPs(noNodePort(scrapetest.NodePortService(0, scrapetest.Family(v6, 0, true))), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: fakeEvidence{assigned: map[string]bool{"198.51.100.7": true}}}, want{false, false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if got := (want{v.InRotation, v.Drops, v.Blackhole}); got != c.want {
				t.Errorf("Decide = %+v, want %+v\n%+v", got, c.want, v.Families)
			}
			wantSource := SourceAPI
			if c.in.Rules != nil {
				wantSource = SourceRules
			}
			if v.Source != wantSource {
				t.Errorf("source %s, want %s", v.Source, wantSource)
			}
		})
	}
}

// A multi-port Service blackholes when any port drops.
func TestDecideMultiPort(t *testing.T) {
	svc := scrapetest.NodePortService(0, kubeview.FamilyEndpoints{Family: v4, Ports: []kubeview.PortEndpoints{
		{Name: "dns", Protocol: corev1.ProtocolUDP, NodePort: 30053, Local: 1, ClusterWide: true},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, NodePort: 30054, Local: 0, ClusterWide: true},
	}})
	if v := Decide(DecideInput{Service: svc, Node: kubeview.NodeState{Found: true}}); !v.Blackhole {
		t.Errorf("one port without a local endpoint: %+v", v)
	}
}
