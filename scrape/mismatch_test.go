package scrape

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

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
	np := scrapetest.NodePortService(1)
	np.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.9:8080")
	lb := scrapetest.LBService(scrapetest.Family(v4, 1, true))
	lb.Name = "shop"
	lb.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.9:8080")
	snap := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{
			checkoutPort: ruleState("10.244.1.5:8080"),
			{Namespace: "kubelings", Name: "shop", Port: "http", Protocol: "TCP"}: ruleState("10.244.1.5:8080"),
		})
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true}, Services: []kubeview.ServiceState{np, lb}}}
	g := NewGatherer(GathererConfig{View: view, RuleReader: &scrapetest.Reader{Snap: snap}, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second})
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
	view.Snap.Services = []kubeview.ServiceState{np}
	st = g.Gather(context.Background())
	if r := st.Services[0]; r.Mismatch || r.Verdict.Blackhole || r.Verdict.Drops || r.Ports[0].GoneEndpoints != 0 {
		t.Errorf("agreeing rules: %+v", r)
	}
}

// informersAt is an informer source whose EndpointSlice informer last heard from the API server at at.
type informersAt struct{ at *time.Time }

func (i informersAt) Informers() []kubeview.InformerStatus {
	return []kubeview.InformerStatus{{Resource: kubeview.ResourceEndpointSlices, Synced: true, LastSuccess: *i.at}}
}

// kube-proxy's informer can be ahead of the exporter's: its rules then send traffic to a new pod the API view
// has not heard of yet. That is no deleted pod: only once the API view has heard from the API server since the
// rules were first read that way is the endpoint gone (and the node, with no other local endpoint, drops in
// fact). A lagging informer must not turn a new pod into a blackhole.
func TestGoneOnlyOnceTheAPIViewIsNewer(t *testing.T) {
	np := scrapetest.NodePortService(1)
	np.Families[0].Ports[0].LocalAddrs = addrs("10.244.1.9:8080")
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true}, Services: []kubeview.ServiceState{np}}}
	read := time.Unix(2000, 0)
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, read,
		map[kernelrules.ServicePort]kernelrules.PortState{checkoutPort: ruleState("10.244.1.5:8080")})}
	apiSeen := read.Add(-30 * time.Second) // the informer last heard from the API server before the rules were read
	g := NewGatherer(GathererConfig{View: view, RuleReader: reader, Informers: informersAt{&apiSeen}, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second})
	for i := range 3 {
		r := g.Gather(context.Background()).Services[0]
		if r.Verdict.Blackhole || r.Ports[0].GoneEndpoints != 0 {
			t.Fatalf("scrape %d, the API view older than the rules: blackhole %v, gone %d", i, r.Verdict.Blackhole, r.Ports[0].GoneEndpoints)
		}
		read = read.Add(15 * time.Second)
		reader.Snap = kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, read,
			map[kernelrules.ServicePort]kernelrules.PortState{checkoutPort: ruleState("10.244.1.5:8080")})
	}
	apiSeen = time.Unix(2001, 0) // heard from the API server after the first read: the pod is really gone
	if r := g.Gather(context.Background()).Services[0]; !r.Verdict.Blackhole || r.Ports[0].GoneEndpoints != 1 {
		t.Errorf("the API view newer than the rules: blackhole %v, gone %d; want a blackhole, 1 gone", r.Verdict.Blackhole, r.Ports[0].GoneEndpoints)
	}
}
