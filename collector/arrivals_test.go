package collector

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/verdict"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
)

// fakeMeter is an arrivals meter whose counts the test sets: every watched destination gets counts[d], the
// receive times relative to the snapshot's time.
type fakeMeter struct {
	mu     sync.Mutex
	status arrivals.Status
	watch  arrivals.Watch
	counts map[arrivals.Dest]arrivals.DestCount
	now    time.Time
}

func (m *fakeMeter) Watch(w arrivals.Watch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watch = w
	return nil
}

func (m *fakeMeter) Snapshot() arrivals.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := arrivals.Snapshot{Status: m.status, Since: m.now.Add(-time.Hour), Taken: m.now,
		Families: []arrivals.FamilyStats{{Family: "IPv4", Dropped: 3}, {Family: "IPv6"}}}
	for _, d := range m.watch.Dests {
		c := m.counts[d]
		c.Dest = d
		s.Dests = append(s.Dests, c)
	}
	return s
}

// The exporter tells the meter every destination and health check node port on the node's NodePort
// addresses; a NodePort that keeps receiving attempts for longer than the grace window while the node drops
// them is in rotation (here on a node excluded from load balancers, which kube-proxy ignores), counted from
// the scrape that first found it dropped.
func TestArrivalsPutANodeInRotation(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	meter := &fakeMeter{status: arrivals.StatusOK, now: t0, counts: map[arrivals.Dest]arrivals.DestCount{
		np: {Attempts: 500, ActiveSince: t0.Add(-time.Hour), LastSeen: t0.Add(-time.Second)}}}
	node := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true, InternalIPs: []string{"10.0.0.1"},
		PodCIDRs: []string{"10.244.1.0/24"}}
	view := &fakeView{snap: kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{nodePortService(0)}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := NewGatherer(GathererConfig{View: view, Addrs: fixedAddrs{"127.0.0.1", "10.0.0.1"}, KubeProxyAddress: noAddress,
		Meter: meter, Grace: 2 * time.Minute, ProbeTimeout: time.Second, Logger: logger})

	st := g.Gather(context.Background())
	if v := st.Services[0].Verdict; v.Blackhole || v.InRotation {
		t.Fatalf("first scrape: blackhole %v in rotation %v; nothing says since when it drops yet", v.Blackhole, v.InRotation)
	}
	if _, ok := slicesIndex(meter.watch.Dests, np); !ok || !containsAddr(meter.watch.NodeAddrs, "10.0.0.1") ||
		!containsPrefix(meter.watch.Internal, "10.244.1.0/24") {
		t.Fatalf("watch %+v: want the NodePort on 10.0.0.1, the node's pod CIDR internal", meter.watch)
	}

	// One minute on, attempts still arriving: within grace.
	meter.now = t0.Add(time.Minute)
	meter.counts[np] = arrivals.DestCount{Attempts: 560, ActiveSince: t0.Add(-time.Hour), LastSeen: meter.now.Add(-time.Second)}
	if v := g.Gather(context.Background()).Services[0].Verdict; v.Blackhole {
		t.Fatalf("within grace: blackhole")
	}
	// Three minutes after the first scrape found it dropped: in rotation by arrivals, traffic lost.
	meter.now = t0.Add(3 * time.Minute)
	meter.counts[np] = arrivals.DestCount{Attempts: 680, ActiveSince: t0.Add(-time.Hour), LastSeen: meter.now.Add(-time.Second)}
	st = g.Gather(context.Background())
	if v := st.Services[0].Verdict; !v.Blackhole || v.Reason != "traffic_lost" {
		t.Fatalf("past grace: blackhole %v reason %q\n%+v", v.Blackhole, v.Reason, v.Families)
	}

	exp := NewExporter(logger, fixedState{st}, NewArrivals(), NewServices())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp.Bind(context.Background()))
	expectSeries(t, reg, `
localtraffic_arrivals_meter_state{state="closed"} 0
localtraffic_arrivals_meter_state{state="disabled"} 0
localtraffic_arrivals_meter_state{state="failed"} 0
localtraffic_arrivals_meter_state{state="ok"} 1
localtraffic_arrivals_meter_state{state="permission_denied"} 0
localtraffic_arrivals_missed_total{cause="rate_limit",ip_family="IPv4"} 0
localtraffic_arrivals_missed_total{cause="rate_limit",ip_family="IPv6"} 0
localtraffic_arrivals_missed_total{cause="ring_full",ip_family="IPv4"} 3
localtraffic_arrivals_missed_total{cause="ring_full",ip_family="IPv6"} 0
localtraffic_arrivals_missed_total{cause="sampled",ip_family="IPv4"} 0
localtraffic_arrivals_missed_total{cause="sampled",ip_family="IPv6"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="external_ip"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="health_check"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="load_balancer_ip"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="node_port"} 680
localtraffic_arrivals_total{ip_family="IPv6",kind="external_ip"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="health_check"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="load_balancer_ip"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="node_port"} 0
localtraffic_blackhole_reason{namespace="kubelings",reason="traffic_lost",service="checkout"} 1
`, "localtraffic_arrivals_meter_state", "localtraffic_arrivals_missed_total", "localtraffic_arrivals_total", "localtraffic_blackhole_reason")
}

// A meter that cannot see says so and exports no arrival count (never "none arrived"), and a blackhole
// declared without it is not_observed (a warning), not no_traffic_seen.
func TestBlindMeterSaysSo(t *testing.T) {
	meter := &fakeMeter{status: arrivals.StatusPermissionDenied, now: time.Unix(1_800_000_000, 0)}
	view := &fakeView{snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{nodePortService(0)}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := NewGatherer(GathererConfig{View: view, Addrs: fixedAddrs{"10.0.0.1"}, KubeProxyAddress: noAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: logger})
	exp := NewExporter(logger, g, NewArrivals(), NewServices())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp.Bind(context.Background()))
	expectSeries(t, reg, `
localtraffic_arrivals_meter_state{state="closed"} 0
localtraffic_arrivals_meter_state{state="disabled"} 0
localtraffic_arrivals_meter_state{state="failed"} 0
localtraffic_arrivals_meter_state{state="ok"} 0
localtraffic_arrivals_meter_state{state="permission_denied"} 1
localtraffic_blackhole_reason{namespace="kubelings",reason="not_observed",service="checkout"} 1
`, "localtraffic_arrivals_meter_state", "localtraffic_arrivals_total", "localtraffic_blackhole_reason")
}

// A meter that misses packets (its ring full, its rate budget spent) is blind for what it did not count:
// a NodePort declared in rotation with no attempt counted is not_observed while it missed packets within the
// quiet period, not no_traffic_seen; once it has missed none for the quiet period, silence means silence again.
func TestOverloadedMeterIsBlindForSilence(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	meter := &fakeMeter{status: arrivals.StatusOK, now: t0, counts: map[arrivals.Dest]arrivals.DestCount{}}
	view := &fakeView{snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{nodePortService(0)}}}
	g := NewGatherer(GathererConfig{View: view, Addrs: fixedAddrs{"10.0.0.1"}, KubeProxyAddress: noAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// fakeMeter reports 3 packets the ring dropped: missed since the meter started, seen now.
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNotObserved {
		t.Errorf("the meter missing packets, nothing counted: %q, want not_observed", r)
	}
	meter.now = t0.Add(DefaultQuiet + time.Second) // no more missed since
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNoTrafficSeen {
		t.Errorf("nothing missed for the quiet period, nothing counted: %q, want no_traffic_seen", r)
	}
}

// Probes of a health check node port are watched on the node's addresses and on the Service's load balancer IPs
// (GCE addresses its checks to the LB IP), and the node says how many of its Services expect them.
func TestHealthCheckProbesWatchedOnLoadBalancerIPs(t *testing.T) {
	meter := &fakeMeter{status: arrivals.StatusOK, now: time.Unix(1_800_000_000, 0), counts: map[arrivals.Dest]arrivals.DestCount{}}
	lb := lbService()
	lb.LoadBalancerIPs = []string{"192.0.2.50"}
	np := nodePortService(0)
	np.Name = "web"
	view := &fakeView{snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{lb, np}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := NewGatherer(GathererConfig{View: view, Addrs: fixedAddrs{"10.0.0.1"}, KubeProxyAddress: noAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: logger})
	st := g.Gather(context.Background())
	want := []arrivals.Dest{arrivals.NodeDest(arrivals.TCP, false, 32000),
		{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.50"), Port: 32000}}
	for _, d := range want {
		if _, ok := slicesIndex(meter.watch.HealthChecks, d); !ok {
			t.Errorf("health checks watched %v, want %v among them", meter.watch.HealthChecks, d)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(logger, fixedState{st}, NewArrivals()).Bind(context.Background()))
	expectSeries(t, reg, `localtraffic_health_check_expected_services 1`, "localtraffic_health_check_expected_services")
}

type fixedState struct{ st *State }

func (f fixedState) Gather(context.Context) *State { return f.st }

func slicesIndex(ds []arrivals.Dest, d arrivals.Dest) (int, bool) {
	for i, x := range ds {
		if x == d {
			return i, true
		}
	}
	return -1, false
}

func containsAddr(as []netip.Addr, a string) bool {
	for _, x := range as {
		if x.String() == a {
			return true
		}
	}
	return false
}

func containsPrefix(ps []netip.Prefix, p string) bool {
	for _, x := range ps {
		if x.String() == p {
			return true
		}
	}
	return false
}

// The node's arrival totals only grow: a destination dropped from the watch (its Service deleted) takes its
// count out of the meter's snapshot, not out of the total, and one watched anew counts from zero again.
func TestArrivalTotalsMonotonic(t *testing.T) {
	a := arrivals.NodeDest(arrivals.TCP, false, 30090)
	b := arrivals.Dest{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.10"), Port: 80}
	kinds := map[arrivals.Dest]verdict.Kind{a: verdict.NodePort, b: verdict.LoadBalancerIP}
	tot := newArrivalTotals()
	t0 := time.Unix(1_800_000_000, 0)
	taken := 0
	snap := func(na, nb uint64, withB bool) *arrivals.Snapshot {
		taken++
		s := &arrivals.Snapshot{Taken: t0.Add(time.Duration(taken) * time.Second), Dests: []arrivals.DestCount{{Dest: a, Attempts: na}}}
		if withB {
			s.Dests = append(s.Dests, arrivals.DestCount{Dest: b, Attempts: nb})
		}
		return s
	}
	np, lb := arrivalKey{"node_port", "IPv4"}, arrivalKey{"load_balancer_ip", "IPv4"}
	steps := []struct {
		s      *arrivals.Snapshot
		np, lb uint64
	}{
		{snap(5, 7, true), 5, 7},
		{snap(9, 10, true), 9, 10},
		{snap(12, 0, false), 12, 10}, // b's Service deleted: its 10 stay counted
		{snap(13, 2, true), 13, 12},  // b watched anew, from zero: 2 more
	}
	for i, st := range steps {
		got := tot.add(st.s, kinds)
		if got[np] != st.np || got[lb] != st.lb {
			t.Errorf("step %d: node_port %d load_balancer_ip %d, want %d %d", i, got[np], got[lb], st.np, st.lb)
		}
	}
	// Two scrapes at once, the older snapshot folded second: it changes nothing (folded, its lower counts
	// would read as restarts and add 15 and 3 again).
	newer, older := snap(20, 5, true), snap(15, 3, true)
	older.Taken, newer.Taken = newer.Taken, older.Taken
	if got := tot.add(newer, kinds); got[np] != 20 || got[lb] != 15 {
		t.Errorf("newer snapshot: %d %d, want 20 15", got[np], got[lb])
	}
	if got := tot.add(older, kinds); got[np] != 20 || got[lb] != 15 {
		t.Errorf("older snapshot folded after a newer one: %d %d, want 20 15", got[np], got[lb])
	}
}

// "Dropped since" is forgotten after a gap without scrapes longer than the quiet period: the gap is unknown,
// and the old time would count it all against the grace window. A concurrent scrape older than the last
// recorded changes nothing.
func TestDroppedSinceForgottenAfterAGap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	d := verdict.Destination{Namespace: "kubelings", Service: "checkout", Protocol: "TCP", Family: "IPv4", Kind: verdict.NodePort, DestPort: 30090}
	dropped := []ServiceResult{{Verdict: verdict.Verdict{Families: []verdict.FamilyVerdict{{Entries: []verdict.Entry{{Destination: d, Dropped: true}}}}}}}
	tot := newArrivalTotals()
	tot.recordDropped(dropped, t0)
	tot.recordDropped(dropped, t0.Add(time.Minute))
	if got := tot.droppedSince(t0.Add(90*time.Second), 2*time.Minute)[d]; !got.Equal(t0) {
		t.Fatalf("scraped every minute: dropped since %v, want %v", got, t0)
	}
	tot.recordDropped(nil, t0.Add(30*time.Second)) // an older concurrent scrape that saw nothing dropped
	if got := tot.droppedSince(t0.Add(90*time.Second), 2*time.Minute)[d]; !got.Equal(t0) {
		t.Fatalf("an older scrape forgot it: dropped since %v", got)
	}
	if got, ok := tot.droppedSince(t0.Add(10*time.Minute), 2*time.Minute)[d]; ok {
		t.Fatalf("after 9 minutes without a scrape: still dropped since %v", got)
	}
	tot.recordDropped(dropped, t0.Add(10*time.Minute))
	if got := tot.droppedSince(t0.Add(11*time.Minute), 2*time.Minute)[d]; !got.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("after the gap: dropped since %v, want the first scrape after it", got)
	}
}

// What the meter leaves out as pod traffic is what kube-proxy's local detector sends to every endpoint: its
// CIDR (the first of each family) or interfaces, and always the node's own addresses; no detector, no pod
// traffic (a pod's dropped attempt is lost like a client's). Unread, this node's pod CIDRs stand in.
func TestInternalSourcesFollowKubeProxysDetector(t *testing.T) {
	pod := []string{"10.244.1.0/24", "fd00:244:1::/64"}
	local := []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")}
	extra := []netip.Prefix{netip.MustParsePrefix("172.30.0.0/16")}
	own := []string{"10.0.0.1/32", "fd00::1/128"}
	for _, c := range []struct {
		name  string
		det   *nodeprobe.LocalDetector
		extra []netip.Prefix
		want  []string
		links []arrivals.LinkMatch
	}{
		{"unread: this node's pod CIDRs", nil, nil, append(own, pod...), nil},
		{"unread, with the flag", nil, extra, append([]string{"172.30.0.0/16"}, append(own, pod...)...), nil},
		{"cluster CIDR, both families", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeClusterCIDR,
			ClusterCIDRs: []string{"10.244.0.0/16", "10.96.0.0/12", "fd00:244::/32"}}, nil,
			append(own, "10.244.0.0/16", "fd00:244::/32"), nil},
		{"cluster CIDR unset: no detector", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeClusterCIDR}, nil, own, nil},
		{"node CIDR", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeNodeCIDR, ClusterCIDRs: []string{"10.0.0.0/8"}}, nil,
			append(own, pod...), nil},
		{"bridge", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeBridgeInterface, BridgeInterface: "cbr0",
			ClusterCIDRs: []string{"10.244.0.0/16"}}, nil, own, []arrivals.LinkMatch{{Name: "cbr0"}}},
		{"prefix", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeInterfaceNamePrefix, InterfaceNamePrefix: "cali"}, nil,
			own, []arrivals.LinkMatch{{Name: "cali", Prefix: true}}},
	} {
		got, links := internalSources(c.det, pod, local, c.extra)
		var gotS []string
		for _, p := range got {
			gotS = append(gotS, p.String())
		}
		if !slices.Equal(gotS, c.want) || !slices.Equal(links, c.links) {
			t.Errorf("%s: %v %v, want %v %v", c.name, gotS, links, c.want, c.links)
		}
	}
}
