package verdict

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// TestAnnouncerRotation: a node an announcer names for a load balancer IP is in rotation for it at once,
// whatever its health check answers, and pages announced_here when it drops the traffic; a live layer 2
// holder elsewhere takes the node out unless arrivals outlast the grace window; BGP statuses with peers put
// every node that has one in rotation; records of no live holder change nothing.
func TestAnnouncerRotation(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	grace := 2 * time.Minute
	node := kubeview.NodeState{Name: "node-2", Found: true}
	excluded := kubeview.NodeState{Name: "node-2", Found: true, Excluded: true}
	svc := func(local int, anns ...announce.Announcement) kubeview.ServiceState {
		s := lbService(local, local)
		s.Announcements = anns
		return s
	}
	hc := func(code int) map[corev1.IPFamily]HealthCheck {
		return map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: code, Result: "x"}}
	}
	ev := func(code int, o Observed) *Evidence {
		return &Evidence{HealthChecks: hc(code), Addresses: withNodePorts(), Observed: o, Grace: grace, Now: now}
	}
	metallbL2 := func(n string) announce.Announcement {
		return announce.Announcement{Source: announce.SourceMetalLBL2, Node: n, Exclusive: true}
	}
	cilium := func(n string, expired bool) announce.Announcement {
		return announce.Announcement{Source: announce.SourceCiliumL2, Node: n, Exclusive: true, Expired: expired}
	}
	bgpOn := func(n string) announce.Announcement {
		return announce.Announcement{Source: announce.SourceMetalLBBGP, Node: n, Peers: []string{"peer-a"}}
	}
	bgp := bgpOn("node-2")
	// Stale ARP caches still sending to the old holder: attempts for 5 minutes, dropped for 10.
	arriving := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute)}
	// A failover seconds ago: the first attempts after it.
	justNow := Observation{Watched: true, Attempts: 3, ActiveSince: now.Add(-5 * time.Second), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute)}

	cases := []struct {
		name      string
		in        Input
		lbIP      Rotation
		basis     Basis
		blackhole bool
		reason    Reason
	}{
		{"MetalLB L2 holder here, no replica, health check 503: critical at once, no arrivals needed",
			Input{Service: svc(0, metallbL2("node-2")), Node: node, Evidence: ev(503, seen{})},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"Cilium L2 lease held here, clients arriving: still the announcer's reason",
			Input{Service: svc(0, cilium("node-2", false)), Node: node, Evidence: ev(503, seen{LoadBalancerIP: arriving})},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"holder here and a replica: in rotation, served",
			Input{Service: svc(1, metallbL2("node-2")), Node: node, Evidence: ev(200, seen{})},
			In, BasisAnnouncer, false, ""},
		{"the announcer ignores the exclude label's verdict: it says where traffic goes",
			Input{Service: svc(0, metallbL2("node-2")), Node: excluded, Evidence: ev(503, seen{})},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"holder elsewhere, this node answers 200: out for the VIP (the health check does not steer layer 2)",
			Input{Service: svc(1, metallbL2("node-1")), Node: node, Evidence: ev(200, seen{})},
			Out, "", false, ""},
		{"holder elsewhere, arrivals past grace (stale ARP caches): the meter keeps its say",
			Input{Service: svc(0, cilium("node-1", false)), Node: node, Evidence: ev(503, seen{LoadBalancerIP: arriving})},
			In, BasisArrivals, true, ReasonHealthCheckIgnored},
		{"holder elsewhere, arrivals within grace: out",
			Input{Service: svc(0, cilium("node-1", false)), Node: node, Evidence: ev(503, seen{LoadBalancerIP: justNow})},
			Out, "", false, ""},
		{"expired lease here: names nobody, today's rules decide (503: out)",
			Input{Service: svc(0, cilium("node-2", true)), Node: node, Evidence: ev(503, seen{})},
			Out, "", false, ""},
		{"expired lease elsewhere does not take this node out: its 200 keeps it",
			Input{Service: svc(1, cilium("node-1", true)), Node: node, Evidence: ev(200, seen{})},
			In, BasisHealthCheck, false, ""},
		{"MetalLB BGP status with peers here: in rotation, dropped: critical",
			Input{Service: svc(0, bgp), Node: node, Evidence: ev(503, seen{})},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"kube-vip names another node: not exclusive, today's rules decide",
			Input{Service: svc(1, announce.Announcement{Source: announce.SourceKubeVIP, Node: "node-1"}), Node: node, Evidence: ev(200, seen{})},
			In, BasisHealthCheck, false, ""},
		{"PureLB names this node for another address only: today's rules",
			Input{Service: svc(0, announce.Announcement{Source: announce.SourcePureLB, Node: "node-2", Address: "192.0.2.99", Exclusive: true}),
				Node: node, Evidence: ev(503, seen{})},
			Out, "", false, ""},
		{"plugin (no node evidence): a holder without a replica is a blackhole, not drained",
			Input{Service: svc(0, metallbL2("node-2")), Node: node},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"plugin: holder elsewhere, this node with a replica: out for the VIP",
			Input{Service: svc(1, metallbL2("node-1")), Node: node},
			Out, "", false, ""},
		{"plugin (every node's BGP records): MetalLB advertises from node-1 only, this node without a replica: out, not unknown",
			Input{Service: svc(0, bgpOn("node-1")), Node: node},
			Out, "", false, ""},
		{"MetalLB advertises from node-1 and this node: in rotation",
			Input{Service: svc(0, bgpOn("node-1"), bgp), Node: node, Evidence: ev(503, seen{})},
			In, BasisAnnouncer, true, ReasonAnnouncedHere},
		{"a BGP record of node-1 naming no peer advertises nothing: today's rules (200: in)",
			Input{Service: svc(1, announce.Announcement{Source: announce.SourceMetalLBBGP, Node: "node-1"}), Node: node, Evidence: ev(200, seen{})},
			In, BasisHealthCheck, false, ""},
		{"MetalLB allocates only (no speaker, no record; Calico advertises from the nodes with a replica): the exporter's rules, 503 and nothing arriving: out, no page",
			Input{Service: svc(0), Node: node, Evidence: ev(503, seen{})},
			Out, "", false, ""},
		{"BGP from node-1 only, clients arriving here past grace anyway: the meter keeps its say",
			Input{Service: svc(0, bgpOn("node-1")), Node: node, Evidence: ev(503, seen{LoadBalancerIP: arriving})},
			In, BasisArrivals, true, ReasonHealthCheckIgnored},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			var lb *Entry
			for i, e := range v.Families[0].Entries {
				if e.Kind == LoadBalancerIP {
					lb = &v.Families[0].Entries[i]
				}
			}
			if lb == nil {
				t.Fatal("no load balancer IP entry")
			}
			if lb.Rotation != c.lbIP || lb.Basis != c.basis {
				t.Errorf("LB IP rotation %s basis %q (%s), want %s %q", lb.Rotation, lb.Basis, lb.Why, c.lbIP, c.basis)
			}
			if lb.Rotation == In && lb.Dropped != c.blackhole || lb.Reason != c.reason {
				t.Errorf("LB IP dropped %v reason %q, want blackhole %v reason %q", lb.Dropped, lb.Reason, c.blackhole, c.reason)
			}
		})
	}
	if !ReasonAnnouncedHere.Critical() {
		t.Error("announced_here must page as critical")
	}
}

// TestCiliumAnnouncesExternalIP: Cilium's lease holder answers ARP for a Service's externalIP when a policy
// selects its externalIPs (a record naming the address): the holder without a replica pages announced_here at
// once, with no arrivals; another node is out for the address, unless arrivals outlast the grace window there
// (stale ARP caches); the plugin, without node evidence, can tell both. A record of every load balancer IP (a
// lease selected for load balancer IPs) says nothing of an externalIP: the exporter's rules for externalIPs
// decide, and the plugin cannot tell.
func TestCiliumAnnouncesExternalIP(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const ext = "198.51.100.7"
	node := kubeview.NodeState{Name: "node-2", Found: true}
	svc := func(anns ...announce.Announcement) kubeview.ServiceState {
		s := lbService(0, 0, ext)
		s.Announcements = anns
		return s
	}
	ev := func(o Observed) *Evidence {
		return &Evidence{HealthChecks: map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: 503, Result: "x"}},
			Addresses: withNodePorts(), Observed: o, Grace: 2 * time.Minute, Now: now}
	}
	holder := func(n string) announce.Announcement {
		return announce.Announcement{Source: announce.SourceCiliumL2, Node: n, Address: ext, Exclusive: true}
	}
	lbOnly := announce.Announcement{Source: announce.SourceCiliumL2, Node: "node-2", Exclusive: true}
	arriving := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute)}
	for _, c := range []struct {
		name      string
		in        Input
		rot       Rotation
		blackhole bool
		reason    Reason
	}{
		{"holder here, no replica: critical at once", Input{Service: svc(holder("node-2")), Node: node, Evidence: ev(seen{})}, In, true, ReasonAnnouncedHere},
		{"holder elsewhere, nothing arriving: out", Input{Service: svc(holder("node-1")), Node: node, Evidence: ev(seen{})}, Out, false, ""},
		{"holder elsewhere, arrivals past grace: the meter keeps its say, as with no record", Input{Service: svc(holder("node-1")), Node: node,
			Evidence: ev(seen{ExternalIP: arriving})}, In, true, ReasonHealthCheckIgnored},
		{"no record, arrivals past grace", Input{Service: svc(), Node: node, Evidence: ev(seen{ExternalIP: arriving})}, In, true, ReasonHealthCheckIgnored},
		{"an expired lease here names nobody", Input{Service: svc(announce.Announcement{Source: announce.SourceCiliumL2, Node: "node-2",
			Address: ext, Exclusive: true, Expired: true}), Node: node, Evidence: ev(seen{})}, Out, false, ""},
		{"a lease for load balancer IPs only says nothing of the externalIP", Input{Service: svc(lbOnly), Node: node, Evidence: ev(seen{})}, Out, false, ""},
		{"plugin: holder here", Input{Service: svc(holder("node-2")), Node: node}, In, true, ReasonAnnouncedHere},
		{"plugin: holder elsewhere", Input{Service: svc(holder("node-1")), Node: node}, Out, false, ""},
		{"plugin: a lease for load balancer IPs only, cannot tell", Input{Service: svc(lbOnly), Node: node}, Unknown, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			var e *Entry
			for i := range v.Families[0].Entries {
				if v.Families[0].Entries[i].Kind == ExternalIP {
					e = &v.Families[0].Entries[i]
				}
			}
			if e == nil {
				t.Fatal("no externalIP entry")
			}
			if e.Rotation != c.rot || e.Rotation == In && e.Dropped != c.blackhole || e.Reason != c.reason {
				t.Errorf("externalIP rotation %s (%s) dropped %v reason %q, want %s %v %q", e.Rotation, e.Why, e.Dropped, e.Reason,
					c.rot, c.blackhole, c.reason)
			}
			want := false // a live record naming another node
			for _, a := range c.in.Service.Announcements {
				want = want || !a.Expired && a.Address == ext && a.Node != c.in.Node.Name
			}
			if AnnouncedElsewhere(c.in.Node, c.in.Service, e.Destination) != want {
				t.Errorf("AnnouncedElsewhere %v, want %v", !want, want)
			}
		})
	}
}

// TestKubeVIPAnnotationContradictedByArrivals: kube-vip in BGP mode leaves kube-vip.io/vipHost behind when it
// withdraws its route. The annotation names this node, which has no replica: announced_here at once, but not
// for ever: once the meter, watching the address, has seen nothing arrive for its quiet period (the address on
// no interface of the node), the annotation is contradicted and today's rules decide (the health check's 503:
// out, no page). A client's repeated attempt ends the silence and the page is back. A blind meter, an address
// on the node's interface (ARP mode), or another announcer's record keeps the announcer's word.
func TestKubeVIPAnnotationContradictedByArrivals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	node := kubeview.NodeState{Name: "node-2", Found: true}
	kubeVIP := announce.Announcement{Source: announce.SourceKubeVIP, Node: "node-2"}
	bgp := announce.Announcement{Source: announce.SourceMetalLBBGP, Node: "node-2", Peers: []string{"peer-a"}}
	svc := func(a announce.Announcement) kubeview.ServiceState {
		s := lbService(0, 0)
		s.Announcements = []announce.Announcement{a}
		return s
	}
	ev := func(o Observed, assigned ...string) *Evidence {
		return &Evidence{HealthChecks: map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: 503, Result: "x"}},
			Addresses: withNodePorts(assigned...), Observed: o, Grace: 2 * time.Minute, Now: now}
	}
	silent := seen{LoadBalancerIP: {Watched: true, Silent: true, DroppedSince: now.Add(-10 * time.Minute)}}
	// A client whose dropped SYNs the kernel retransmits: repeated attempts, the last a second ago.
	client := seen{LoadBalancerIP: {Watched: true, Attempts: 4, ActiveSince: now.Add(-3 * time.Second), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute), Repeats: true,
		Repeated: Repeated{Attempts: 4, ActiveSince: now.Add(-3 * time.Second), LastSeen: now.Add(-time.Second), Ongoing: true}}}
	cases := []struct {
		name   string
		in     Input
		rot    Rotation
		reason Reason
	}{
		{"BGP mode, the meter watching for less than its quiet period: the announcer's word", Input{Service: svc(kubeVIP), Node: node, Evidence: ev(seen{})},
			In, ReasonAnnouncedHere},
		{"BGP mode, silent for the quiet period: the route is withdrawn, the health check's 503 decides", Input{Service: svc(kubeVIP), Node: node, Evidence: ev(silent)},
			Out, ""},
		{"BGP mode, a client's attempts arriving again: paged", Input{Service: svc(kubeVIP), Node: node, Evidence: ev(client)},
			In, ReasonAnnouncedHere},
		{"the meter blind: silence says nothing", Input{Service: svc(kubeVIP), Node: node, Evidence: ev(blind{})},
			In, ReasonAnnouncedHere},
		{"ARP mode, the address on this node's interface: the annotation confirms it", Input{Service: svc(kubeVIP), Node: node, Evidence: ev(silent, "192.0.2.10")},
			In, ReasonAnnouncedHere},
		{"MetalLB's BGP status goes when it stops advertising: silence does not outweigh it", Input{Service: svc(bgp), Node: node, Evidence: ev(silent)},
			In, ReasonAnnouncedHere},
		{"the plugin, without node evidence: the announcer's word", Input{Service: svc(kubeVIP), Node: node},
			In, ReasonAnnouncedHere},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			for _, e := range v.Families[0].Entries {
				if e.Kind != LoadBalancerIP {
					continue
				}
				if e.Rotation != c.rot || e.Reason != c.reason {
					t.Errorf("LB IP rotation %s reason %q (%s), want %s %q", e.Rotation, e.Reason, e.Why, c.rot, c.reason)
				}
				return
			}
			t.Fatal("no load balancer IP entry")
		})
	}
}

func TestUnannounced(t *testing.T) {
	svc := func(local int, clusterWide bool, anns ...announce.Announcement) kubeview.ServiceState {
		s := lbService(local, local)
		s.Families[0].Ports[0].ClusterWide = clusterWide
		s.Announcements = anns
		return s
	}
	expired := announce.Announcement{Source: announce.SourceCiliumL2, Node: "node-1", Exclusive: true, Expired: true}
	unrecorded := func(s kubeview.ServiceState) kubeview.ServiceState { s.UnrecordedIPs = s.LoadBalancerIPs; return s }
	live := announce.Announcement{Source: announce.SourceMetalLBL2, Node: "node-3", Exclusive: true}
	cases := []struct {
		name string
		svc  kubeview.ServiceState
		want bool
	}{
		{"expired lease, endpoints elsewhere: nobody answers", svc(0, true, expired), true},
		{"expired lease, no endpoint anywhere: an outage of its own, not this one", svc(0, false, expired), false},
		{"expired lease and a live record: announced", svc(0, true, expired, live), false},
		{"no record at all: unknown, not unannounced", svc(0, true), false},
		{"live holder", svc(1, true, live), false},
		{"MetalLB's address with no record read cluster-wide: nobody answers", unrecorded(svc(0, true)), true},
		{"MetalLB's unrecorded address, no endpoint anywhere: an outage of its own", unrecorded(svc(0, false)), false},
		{"MetalLB's unrecorded address and a live record of another announcer", unrecorded(svc(0, true, live)), false},
	}
	for _, c := range cases {
		if got := Unannounced(c.svc); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// UnannouncedIPs names the addresses Unannounced holds for; AnnouncedElsewhere is the announcer's "out" for a
// load balancer IP (a live layer 2 record naming another node), which the plugin needs to tell apart from a
// health check's.
func TestUnannouncedIPsAndAnnouncedElsewhere(t *testing.T) {
	s := lbService(0, 0)
	s.LoadBalancerIPs = []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}
	s.Announcements = []announce.Announcement{
		{Source: announce.SourcePureLB, Node: "node-1", Address: "192.0.2.10", Exclusive: true, Expired: true},
		{Source: announce.SourcePureLB, Node: "node-3", Address: "192.0.2.11", Exclusive: true},
		{Source: announce.SourceMetalLBBGP, Node: "node-3", Address: "192.0.2.12", Peers: []string{"peer-a"}},
	}
	if got := UnannouncedIPs(s); len(got) != 1 || got[0] != "192.0.2.10" {
		t.Errorf("unannounced %v, want [192.0.2.10]", got)
	}
	// externalIPs follow the load balancer IPs: a Cilium policy's with no live lease (unrecorded) or with an
	// expired holder, each only by a record of its own address; one that is a load balancer IP too is judged
	// as one, once.
	ext := s
	ext.ExternalIPs = []string{"192.0.2.20", "192.0.2.21", "192.0.2.22", "192.0.2.10"}
	ext.UnrecordedIPs = []string{"192.0.2.20", "192.0.2.22"}
	ext.Announcements = append(slices.Clone(s.Announcements),
		announce.Announcement{Source: announce.SourceCiliumL2, Node: "node-1", Address: "192.0.2.21", Exclusive: true, Expired: true},
		announce.Announcement{Source: announce.SourceCiliumL2, Node: "node-3", Address: "192.0.2.22", Exclusive: true},
		announce.Announcement{Source: announce.SourceMetalLBL2, Node: "node-3", Exclusive: true}) // every load balancer IP
	if got, want := UnannouncedIPs(ext), []string{"192.0.2.20", "192.0.2.21"}; !slices.Equal(got, want) {
		t.Errorf("with externalIPs: unannounced %v, want %v (the load balancer IPs all announced)", got, want)
	}
	node := kubeview.NodeState{Name: "node-2", Found: true}
	dest := func(kind Kind, addr string) Destination {
		return Destination{Namespace: "shop", Service: "web", Port: "http", Protocol: corev1.ProtocolTCP, Family: corev1.IPv4Protocol,
			Kind: kind, Address: addr, DestPort: 80}
	}
	for _, c := range []struct {
		name string
		node kubeview.NodeState
		d    Destination
		want bool
	}{
		{"held by node-3", node, dest(LoadBalancerIP, "192.0.2.11"), true},
		{"the holder itself", kubeview.NodeState{Name: "node-3", Found: true}, dest(LoadBalancerIP, "192.0.2.11"), false},
		{"an expired record names nobody", node, dest(LoadBalancerIP, "192.0.2.10"), false},
		{"a NodePort is no announcer's", node, dest(NodePort, ""), false},
		{"advertised over BGP from node-3 only", node, dest(LoadBalancerIP, "192.0.2.12"), true},
		{"advertising it over BGP itself", kubeview.NodeState{Name: "node-3", Found: true}, dest(LoadBalancerIP, "192.0.2.12"), false},
	} {
		if got := AnnouncedElsewhere(c.node, s, c.d); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
