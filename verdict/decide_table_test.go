package verdict

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// The decision table: every rule of Decide, row by row, over the package's own evidence types (the exporter
// adapts its probes and rules into them in scrape, whose tests check only that adapting).

// tableFamily is one family's single port "http" (NodePort 30090) with local endpoints; clusterWide false means
// no endpoint anywhere.
func tableFamily(f corev1.IPFamily, local int, clusterWide bool) kubeview.FamilyEndpoints {
	return kubeview.FamilyEndpoints{Family: f, LocalEndpoints: local, LocalReadyEndpoints: local,
		Ports: []kubeview.PortEndpoints{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090, Local: local, ClusterWide: clusterWide}}}
}

func tableNodePort(local int, fams ...kubeview.FamilyEndpoints) kubeview.ServiceState {
	if len(fams) == 0 {
		fams = []kubeview.FamilyEndpoints{tableFamily(corev1.IPv4Protocol, local, true)}
	}
	return kubeview.ServiceState{Namespace: "kubelings", Name: "checkout", Type: corev1.ServiceTypeNodePort,
		Ports:    []kubeview.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}},
		Families: fams}
}

func tableLB(fams ...kubeview.FamilyEndpoints) kubeview.ServiceState {
	s := tableNodePort(0, fams...)
	s.Type, s.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
	return s
}

// check is a health check node port's answer with status, as the exporter's probe classifies it.
func check(status int) *HealthCheck {
	switch status {
	case http.StatusOK:
		return &HealthCheck{StatusCode: status, Result: "ok"}
	case http.StatusServiceUnavailable:
		return &HealthCheck{StatusCode: status, Result: "unavailable"}
	}
	return &HealthCheck{StatusCode: status, Result: "invalid"}
}

// failed is a probe that got no HTTP answer (result: refused, timeout, no_address, ...).
func failed(result string) *HealthCheck { return &HealthCheck{Result: result} }

// tableDrop is one of kube-proxy's drop rules for a Service port: for the NodePort (Address "") or an address
// and port.
type tableDrop struct {
	Address string
	Port    int32
	Counted bool
}

// tableRules: per family, per port name, the drop rules; a port listed without drops forwards.
type tableRules map[string]map[string][]tableDrop

func (f tableRules) HasFamily(fam corev1.IPFamily) bool { _, ok := f[string(fam)]; return ok }

func (f tableRules) Drops(d Destination) bool {
	for _, r := range f[string(d.Family)][d.Port] {
		if r.Address == d.Address && r.Port == d.DestPort {
			return true
		}
	}
	return false
}

// tableArrivals: addresses assigned to the node, and addresses whose drop counter grew.
type tableArrivals struct {
	assigned map[string]bool
	arriving map[string]bool
}

func (e tableArrivals) Arriving(d Destination) (string, bool) {
	switch {
	case e.assigned[d.Address]:
		return "assigned", true
	case e.arriving[d.Address]:
		return "counter grew", true
	}
	return "", false
}

// tableInput is one row's inputs: what the exporter reads for one Service on its node.
type tableInput struct {
	Service  kubeview.ServiceState
	Node     kubeview.NodeState
	Checks   map[corev1.IPFamily]*HealthCheck
	Rules    tableRules // nil: not read, the API view decides
	Arrivals Arrivals
}

// decide runs Decide with node evidence, as the exporter does: no entry is left Unknown.
func (in tableInput) decide() Verdict {
	ev := &Evidence{Arrivals: in.Arrivals, HealthChecks: map[corev1.IPFamily]HealthCheck{}}
	if in.Rules != nil {
		ev.Rules = in.Rules
	}
	for f, hc := range in.Checks {
		if hc != nil {
			ev.HealthChecks[f] = *hc
		}
	}
	return Decide(Input{Service: in.Service, Node: in.Node, Evidence: ev})
}

type tableWant struct{ inRotation, drops, blackhole bool }

func TestDecideTable(t *testing.T) {
	ready := kubeview.NodeState{Name: "node-1", Found: true}
	missing := kubeview.NodeState{Name: "node-1"}
	excluded := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true}
	deleting := kubeview.NodeState{Name: "node-1", Found: true, Deleting: true}
	toBeDeleted := kubeview.NodeState{Name: "node-1", Found: true, ToBeDeleted: true}
	checks := func(c4, c6 *HealthCheck) map[corev1.IPFamily]*HealthCheck {
		m := map[corev1.IPFamily]*HealthCheck{}
		if c4 != nil {
			m[corev1.IPv4Protocol] = c4
		}
		if c6 != nil {
			m[corev1.IPv6Protocol] = c6
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
	nodePortDrop := []tableDrop{{Port: 30090, Counted: true}}

	cases := []struct {
		name string
		in   tableInput
		want tableWant
	}{
		// NodePort: every NodePortEligible node.
		{"nodeport with a local endpoint serves", tableInput{Service: tableNodePort(1), Node: ready}, tableWant{true, false, false}},
		{"nodeport without one is a blackhole", tableInput{Service: tableNodePort(0), Node: ready}, tableWant{true, true, true}},
		{"no endpoint anywhere is an outage, not a blackhole",
			tableInput{Service: tableNodePort(0, tableFamily(corev1.IPv4Protocol, 0, false)), Node: ready}, tableWant{true, false, false}},
		{"excluded node drops but receives nothing", tableInput{Service: tableNodePort(0), Node: excluded}, tableWant{false, true, false}},
		{"deleting node is out of nodeport rotation", tableInput{Service: tableNodePort(0), Node: deleting}, tableWant{false, true, false}},
		{"autoscaler-tainted node is out of nodeport rotation", tableInput{Service: tableNodePort(0), Node: toBeDeleted}, tableWant{false, true, false}},
		{"missing Node object: NodePort clients still reach the node", tableInput{Service: tableNodePort(0), Node: missing}, tableWant{true, true, true}},

		// Dual-stack: a family that drops is enough; agreeing families are fine.
		{"dual-stack, IPv6 endpoint missing here: blackhole",
			tableInput{Service: tableNodePort(0, tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 0, true)), Node: ready}, tableWant{true, true, true}},
		{"dual-stack, both families local", tableInput{Service: tableNodePort(0, tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 1, true)), Node: ready},
			tableWant{true, false, false}},
		{"dual-stack rules: only IPv6 drops",
			tableInput{Service: tableNodePort(0, tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 1, true)), Node: ready,
				Rules: tableRules{"IPv4": {"http": nil}, "IPv6": {"http": nodePortDrop}}}, tableWant{true, true, true}},
		{"rules decide when read: API says local, rules drop (stale sync)",
			tableInput{Service: tableNodePort(1), Node: ready, Rules: tableRules{"IPv4": {"http": nodePortDrop}}}, tableWant{true, true, true}},
		{"rules decide when read: API says none, rules forward",
			tableInput{Service: tableNodePort(0), Node: ready, Rules: tableRules{"IPv4": {"http": nil}}}, tableWant{true, false, false}},
		{"a family whose rules were not read falls back to the API",
			tableInput{Service: tableNodePort(0, tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 0, true)), Node: ready,
				Rules: tableRules{"IPv4": {"http": nil}}}, tableWant{true, true, true}},

		// LoadBalancer: in rotation for a family only while that family's health check answers 200.
		{"LB answering 503 is drained", tableInput{Service: tableLB(), Node: ready, Checks: checks(check(503), nil)}, tableWant{false, true, false}},
		{"LB answering 200 while dropping is a blackhole", tableInput{Service: tableLB(), Node: ready, Checks: checks(check(200), nil)},
			tableWant{true, true, true}},
		{"LB health check refused drains (kube-proxy down)", tableInput{Service: tableLB(), Node: ready,
			Checks: checks(failed("refused"), nil)}, tableWant{false, true, false}},
		{"LB health check timing out drains", tableInput{Service: tableLB(), Node: ready,
			Checks: checks(failed("timeout"), nil)}, tableWant{false, true, false}},
		{"LB health check answering 500 drains", tableInput{Service: tableLB(), Node: ready, Checks: checks(check(500), nil)},
			tableWant{false, true, false}},
		{"LB with no address to probe: out of rotation", tableInput{Service: tableLB(), Node: ready,
			Checks: checks(failed("no_address"), nil)}, tableWant{false, true, false}},
		{"LB node being deleted is out of every target set", tableInput{Service: tableLB(), Node: deleting,
			Checks: checks(check(200), nil)}, tableWant{false, true, false}},
		{"LB node with the autoscaler taint is out", tableInput{Service: tableLB(), Node: toBeDeleted,
			Checks: checks(check(200), nil)}, tableWant{false, true, false}},
		{"LB node excluded is out", tableInput{Service: tableLB(), Node: excluded, Checks: checks(check(200), nil)},
			tableWant{false, true, false}},
		{"LB with a missing Node object is out", tableInput{Service: tableLB(), Node: missing, Checks: checks(check(200), nil)},
			tableWant{false, true, false}},
		{"dual-stack LB: IPv6 check 200 while IPv6 drops is a blackhole",
			tableInput{Service: tableLB(tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 0, true)), Node: ready, Checks: checks(check(200), check(200))},
			tableWant{true, true, true}},
		{"dual-stack LB: IPv6 check 503 drains the IPv6 family only",
			tableInput{Service: tableLB(tableFamily(corev1.IPv4Protocol, 1, true), tableFamily(corev1.IPv6Protocol, 0, true)), Node: ready, Checks: checks(check(200), check(503))},
			tableWant{true, true, false}},

		// Load balancer IPs: only the family's programmed ones; Proxy mode ones are left out by kubeview.
		{"allocateLoadBalancerNodePorts false, no programmed IP: nothing to drop",
			tableInput{Service: noNodePort(tableLB()), Node: ready, Checks: checks(check(200), nil)}, tableWant{false, false, false}},
		{"allocateLoadBalancerNodePorts false, VIP ingress IP checked 200 drops: blackhole",
			tableInput{Service: withIPs(noNodePort(tableLB()), []string{"192.0.2.10"}, nil), Node: ready, Checks: checks(check(200), nil)},
			tableWant{true, true, true}},
		{"rules: the LB IP's drop counts, not another address's",
			tableInput{Service: withIPs(noNodePort(tableLB(tableFamily(corev1.IPv4Protocol, 0, true))), []string{"192.0.2.10"}, nil), Node: ready,
				Checks: checks(check(200), nil), Rules: tableRules{"IPv4": {"http": {{Address: "192.0.2.99", Port: 80}}}}},
			tableWant{true, false, false}},

		// externalIPs: in rotation only with evidence.
		{"externalIP without evidence: not in rotation",
			tableInput{Service: withIPs(noNodePort(tableNodePort(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: tableArrivals{}}, tableWant{false, true, false}},
		{"externalIP assigned to this node: blackhole",
			tableInput{Service: withIPs(noNodePort(tableNodePort(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: tableArrivals{assigned: map[string]bool{"198.51.100.7": true}}}, tableWant{true, true, true}},
		{"externalIP whose drop counter grew: blackhole",
			tableInput{Service: withIPs(noNodePort(tableNodePort(0)), nil, []string{"198.51.100.7"}), Node: ready,
				Rules:    tableRules{"IPv4": {"http": {{Address: "198.51.100.7", Port: 80, Counted: true}}}},
				Arrivals: tableArrivals{arriving: map[string]bool{"198.51.100.7": true}}}, tableWant{true, true, true}},
		{"externalIP of the other family is not this family's",
			tableInput{Service: withIPs(noNodePort(tableNodePort(0, tableFamily(corev1.IPv6Protocol, 0, true))), nil, []string{"198.51.100.7"}), Node: ready,
				Arrivals: tableArrivals{assigned: map[string]bool{"198.51.100.7": true}}}, tableWant{false, false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.in.decide()
			if got := (tableWant{v.InRotation, v.Drops, v.Blackhole}); got != c.want {
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
func TestDecideTableMultiPort(t *testing.T) {
	svc := tableNodePort(0, kubeview.FamilyEndpoints{Family: corev1.IPv4Protocol, Ports: []kubeview.PortEndpoints{
		{Name: "dns", Protocol: corev1.ProtocolUDP, NodePort: 30053, Local: 1, ClusterWide: true},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, NodePort: 30054, Local: 0, ClusterWide: true},
	}})
	if v := (tableInput{Service: svc, Node: kubeview.NodeState{Found: true}}).decide(); !v.Blackhole {
		t.Errorf("one port without a local endpoint: %+v", v)
	}
}
