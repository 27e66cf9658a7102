package collector

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

// kube-proxy rewrites the filter table on every sync, which resets the DROP rule's counters. The exported
// counter must still only go up, and count the packets after each reset.
func TestDropCounterSurvivesResets(t *testing.T) {
	r := newDropTotals()
	sp := counterKey{namespace: "kubelings", name: "checkout", port: "http", protocol: "TCP"}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		raw  uint64
		at   time.Duration
		want uint64
	}{
		{raw: 5, at: 0, want: 0},                       // first sight: a baseline (counted before the exporter started)
		{raw: 9, at: time.Second, want: 4},             // +4
		{raw: 9, at: 2 * time.Second, want: 4},         // nothing new
		{raw: 2, at: 3 * time.Second, want: 6},         // kube-proxy rewrote the rule: 2 new packets
		{raw: 7, at: 2500 * time.Millisecond, want: 6}, // an older snapshot (a racing scrape) changes nothing
		{raw: 7, at: 4 * time.Second, want: 11},        // +5
		{raw: 0, at: 5 * time.Second, want: 11},        // reset to zero
	}
	var last uint64
	for i, s := range steps {
		got := r.count(sp, s.raw, t0.Add(s.at))
		if got != s.want {
			t.Fatalf("step %d: total %d, want %d", i, got, s.want)
		}
		if got < last {
			t.Fatalf("step %d: counter went down from %d to %d", i, last, got)
		}
		last = got
	}
	r.forget(map[counterKey]bool{})
	if len(r.counters) != 0 {
		t.Errorf("forget kept %d counters", len(r.counters))
	}
}

// After an exporter restart kube-proxy's rules still hold what they counted before: the first value seen is
// a baseline, for the monotonic total and for the externalIP evidence alike. Growth after it counts.
func TestCountersSeenFirstAreBaselines(t *testing.T) {
	growth, drops := newRuleGrowth(), newDropTotals()
	t0 := time.Unix(1000, 0)
	k := ruleKey{counterKey: counterKey{namespace: "kubelings", name: "reports", port: "http", protocol: "TCP"},
		family: "IPv4", address: "192.0.2.70", port: 80}
	if grew := growth.observe(k, 500, t0); !grew.IsZero() {
		t.Errorf("a counter of 500 seen first grew at %v, want never", grew)
	}
	if grew := growth.observe(k, 500, t0.Add(time.Second)); !grew.IsZero() {
		t.Errorf("an unchanged counter grew at %v", grew)
	}
	if grew := growth.observe(k, 501, t0.Add(2*time.Second)); !grew.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("one more packet: grew at %v", grew)
	}
	// kube-proxy rewrote the rule (reset) and a packet came: growth.
	if grew := growth.observe(k, 1, t0.Add(3*time.Second)); !grew.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("packet after a reset: grew at %v", grew)
	}
	c := counterKey{namespace: "kubelings", name: "reports", port: "http", protocol: "TCP", family: "IPv4"}
	if got := drops.count(c, 500, t0); got != 0 {
		t.Errorf("total at first sight of 500: %d, want 0", got)
	}
	if got := drops.count(c, 503, t0.Add(time.Second)); got != 3 {
		t.Errorf("total after 3 more: %d, want 3", got)
	}
}

func TestPortMismatch(t *testing.T) {
	cases := []struct {
		name string
		api  kubeview.PortEndpoints
		st   kernelrules.PortState
		want bool
	}{
		{"agree: local endpoints", kubeview.PortEndpoints{Local: 2, ClusterWide: true}, kernelrules.PortState{Programmed: true, LocalEndpoints: 2}, false},
		{"agree: drop", kubeview.PortEndpoints{Local: 0, ClusterWide: true}, kernelrules.PortState{Programmed: true, Drop: true}, false},
		{"wrong hostname-override: API local, rules drop", kubeview.PortEndpoints{Local: 1, ClusterWide: true}, kernelrules.PortState{Programmed: true, Drop: true}, true},
		{"stale rules: API none, rules forward", kubeview.PortEndpoints{Local: 0, ClusterWide: true}, kernelrules.PortState{Programmed: true, LocalEndpoints: 1}, true},
		{"count differs", kubeview.PortEndpoints{Local: 3, ClusterWide: true}, kernelrules.PortState{Programmed: true, LocalEndpoints: 1}, true},
		{"no endpoints anywhere is not judged", kubeview.PortEndpoints{Local: 0, ClusterWide: false}, kernelrules.PortState{Programmed: true, Reject: true}, false},
	}
	// No NodePort and no external address yet (allocateLoadBalancerNodePorts false, LB pending): nothing to drop.
	if portMismatch(kubeview.PortEndpoints{Local: 1, ClusterWide: true}, kernelrules.PortState{Programmed: true}, endpointMatch{}, false) {
		t.Error("an unreachable port is never a mismatch")
	}
	for _, c := range cases {
		if got := portMismatch(c.api, c.st, matchEndpoints(checkoutPort, c.api, c.st), true); got != c.want {
			t.Errorf("%s: mismatch %v, want %v", c.name, got, c.want)
		}
	}
}

var checkoutPort = kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}

func addrs(s ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range s {
		out = append(out, netip.MustParseAddrPort(a))
	}
	return out
}

// ruleState is a port whose rules send external traffic to the given endpoints.
func ruleState(eps ...string) kernelrules.PortState {
	st := kernelrules.PortState{Programmed: true, LocalEndpoints: len(eps)}
	for _, a := range addrs(eps...) {
		st.Endpoints = append(st.Endpoints, kernelrules.Endpoint{Addr: a})
	}
	return st
}

// Local endpoints compared by identity (IP and target port), not by count.
func TestEndpointIdentity(t *testing.T) {
	api := func(used, unused []netip.AddrPort) kubeview.PortEndpoints {
		return kubeview.PortEndpoints{Local: len(used), ClusterWide: true, LocalAddrs: used, LocalUnused: unused}
	}
	cases := []struct {
		name              string
		api               kubeview.PortEndpoints
		st                kernelrules.PortState
		stale, gone       int
		mismatch, allGone bool
	}{
		{"same endpoints", api(addrs("10.244.1.5:8080", "10.244.1.6:8080"), nil), ruleState("10.244.1.5:8080", "10.244.1.6:8080"), 0, 0, false, false},
		// kube-proxy stopped, the pod replaced on this node: the count agrees, the address does not.
		{"pod replaced", api(addrs("10.244.1.9:8080"), nil), ruleState("10.244.1.5:8080"), 1, 1, true, true},
		{"one of two replaced", api(addrs("10.244.1.5:8080", "10.244.1.9:8080"), nil), ruleState("10.244.1.5:8080", "10.244.1.6:8080"), 1, 1, true, false},
		// The pod is still there, not ready: stale rules, but the traffic reaches a pod.
		{"pod not ready", api(nil, addrs("10.244.1.5:8080")), ruleState("10.244.1.5:8080"), 1, 0, true, false},
		// Its target port changed: the pod refuses, it does not vanish.
		{"target port changed", api(addrs("10.244.1.5:9090"), nil), ruleState("10.244.1.5:8080"), 1, 0, true, false},
		// The last pod deleted, none anywhere: still rules to a gone pod, whatever the API says of the port.
		{"last pod deleted", kubeview.PortEndpoints{}, ruleState("10.244.1.5:8080"), 1, 1, true, true},
		{"IPv6", api(addrs("[fd00:244:1::9]:8080"), nil), ruleState("[fd00:244:1::5]:8080"), 1, 1, true, true},
	}
	for _, c := range cases {
		m := matchEndpoints(checkoutPort, c.api, c.st)
		if !m.named || m.stale != c.stale || m.gone != c.gone || m.allGone(c.st) != c.allGone {
			t.Errorf("%s: %+v (all gone %v), want stale %d gone %d all gone %v", c.name, m, m.allGone(c.st), c.stale, c.gone, c.allGone)
		}
		if got := portMismatch(c.api, c.st, m, true); got != c.mismatch {
			t.Errorf("%s: mismatch %v, want %v", c.name, got, c.mismatch)
		}
	}
	// Rules that only count their endpoints are compared by count.
	if m := matchEndpoints(checkoutPort, api(addrs("10.244.1.9:8080"), nil), kernelrules.PortState{Programmed: true, LocalEndpoints: 1}); m.named || m.gone != 0 {
		t.Errorf("counted only: %+v", m)
	}
}

// The verdict through the gatherer: kube-proxy's rules send a NodePort Service's traffic only to a pod the
// API no longer has (replaced while kube-proxy was stopped). No drop rule exists, the count agrees, and the
// node drops in fact: mismatch, and (a NodePort is in rotation) blackhole. A LoadBalancer Service whose health
// check is refused (kube-proxy down) is drained: mismatch, no blackhole.
func TestStaleDNATIsABlackhole(t *testing.T) {
	np := nodePortService(1)
	np.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.9:8080")
	lb := lbService(family(v4, 1, true))
	lb.Name = "shop"
	lb.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.9:8080")
	snap := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{
			checkoutPort: ruleState("10.244.1.5:8080"),
			{Namespace: "kubelings", Name: "shop", Port: "http", Protocol: "TCP"}: ruleState("10.244.1.5:8080"),
		})
	view := &fakeView{snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true}, Services: []kubeview.ServiceState{np, lb}}}
	g := NewGatherer(GathererConfig{View: view, Rules: &countingReader{snap: snap}, KubeProxyAddress: noAddress, ProbeTimeout: time.Second})
	st := g.Gather(context.Background())
	if len(st.Services) != 2 {
		t.Fatalf("%d services", len(st.Services))
	}
	for _, r := range st.Services {
		wantBlackhole := r.Service.Name == "checkout"
		if !r.MismatchKnown || !r.Mismatch || r.Verdict.Blackhole != wantBlackhole || !r.Verdict.Drops || r.Ports[0].GoneEndpoints != 1 {
			t.Errorf("%s: mismatch %v/%v, verdict %+v, gone %d; want mismatch, drops, blackhole %v, 1 gone",
				r.Service.Name, r.MismatchKnown, r.Mismatch, r.Verdict, r.Ports[0].GoneEndpoints, wantBlackhole)
		}
		// The rules as read: no drop rule.
		if r.Ports[0].Rules.Drop {
			t.Errorf("%s: the port's rules state says drop: %+v", r.Service.Name, r.Ports[0].Rules)
		}
	}
	// The same pod in the API: nothing to say.
	np.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.5:8080")
	view.snap.Services = []kubeview.ServiceState{np}
	st = g.Gather(context.Background())
	if r := st.Services[0]; r.Mismatch || r.Verdict.Blackhole || r.Verdict.Drops || r.Ports[0].GoneEndpoints != 0 {
		t.Errorf("agreeing rules: %+v", r)
	}
}
