package scrape

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The exporter tells the meter every destination and health check node port on the node's NodePort
// addresses; a NodePort that keeps receiving attempts for longer than the grace window while the node drops
// them is in rotation (here on a node excluded from load balancers, which kube-proxy ignores), counted from
// the scrape that first found it dropped. (collector's TestArrivalSeries renders the last State.)
func TestArrivalsPutANodeInRotation(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: t0, Counts: map[arrivals.Dest]arrivals.DestCount{
		np: scrapetest.Repeating(arrivals.DestCount{Attempts: 500, ActiveSince: t0.Add(-time.Hour), LastSeen: t0.Add(-time.Second)})}}
	node := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true, InternalIPs: []string{"10.0.0.1"},
		PodCIDRs: []string{"10.244.1.0/24"}}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1", "10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, Grace: 2 * time.Minute, ProbeTimeout: time.Second, Logger: logger})

	st := g.Gather(context.Background())
	if v := st.Services[0].Verdict; v.Blackhole || v.InRotation {
		t.Fatalf("first scrape: blackhole %v in rotation %v; nothing says since when it drops yet", v.Blackhole, v.InRotation)
	}
	if !slices.Contains(meter.Watched.Dests, np) || !slices.Contains(meter.Watched.NodeAddrs, netip.MustParseAddr("10.0.0.1")) ||
		!slices.Contains(meter.Watched.Internal, netip.MustParsePrefix("10.244.1.0/24")) {
		t.Fatalf("watch %+v: want the NodePort on 10.0.0.1, the node's pod CIDR internal", meter.Watched)
	}

	// One minute on, attempts still arriving: within grace.
	meter.Now = t0.Add(time.Minute)
	meter.Counts[np] = scrapetest.Repeating(arrivals.DestCount{Attempts: 560, ActiveSince: t0.Add(-time.Hour), LastSeen: meter.Now.Add(-time.Second)})
	if v := g.Gather(context.Background()).Services[0].Verdict; v.Blackhole {
		t.Fatalf("within grace: blackhole")
	}
	// Three minutes after the first scrape found it dropped: in rotation by arrivals, traffic lost.
	meter.Now = t0.Add(3 * time.Minute)
	meter.Counts[np] = scrapetest.Repeating(arrivals.DestCount{Attempts: 680, ActiveSince: t0.Add(-time.Hour), LastSeen: meter.Now.Add(-time.Second)})
	st = g.Gather(context.Background())
	if v := st.Services[0].Verdict; !v.Blackhole || v.Reason != verdict.ReasonTrafficLost {
		t.Fatalf("past grace: blackhole %v reason %q\n%+v", v.Blackhole, v.Reason, v.Families)
	}
	if got := st.Arrivals.Totals[ArrivalKey{Kind: verdict.NodePort, Family: "IPv4"}]; !st.Arrivals.Enabled || got != 680 {
		t.Errorf("meter enabled %v, NodePort arrivals %d; want 680 counted", st.Arrivals.Enabled, got)
	}
}

// A meter that cannot see says so, and a blackhole declared without it is not_observed (a warning), not
// no_traffic_seen. (collector's TestArrivalSeries renders such a State: no arrival count, never "none
// arrived".)
func TestBlindMeterSaysSo(t *testing.T) {
	meter := &scrapetest.Meter{Status: arrivals.StatusPermissionDenied, Now: time.Unix(1_800_000_000, 0)}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	st := g.Gather(context.Background())
	if st.Arrivals.Snapshot == nil || st.Arrivals.Snapshot.Status != arrivals.StatusPermissionDenied {
		t.Errorf("meter snapshot %+v, want its permission_denied", st.Arrivals.Snapshot)
	}
	if v := st.Services[0].Verdict; !v.Blackhole || v.Reason != verdict.ReasonNotObserved {
		t.Errorf("blackhole %v reason %q, want not_observed", v.Blackhole, v.Reason)
	}
}

// A meter that misses packets (its ring full, its rate budget spent) is blind for what it did not count:
// a NodePort declared in rotation with no attempt counted is not_observed while it missed packets within the
// quiet period, not no_traffic_seen; once it has missed none for the quiet period, silence means silence again.
func TestOverloadedMeterIsBlindForSilence(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: t0, Counts: map[arrivals.Dest]arrivals.DestCount{}}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// fakeMeter reports 3 packets the ring dropped: missed since the meter started, seen now.
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNotObserved {
		t.Errorf("the meter missing packets, nothing counted: %q, want not_observed", r)
	}
	meter.Now = t0.Add(DefaultQuiet + time.Second) // no more missed since
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNoTrafficSeen {
		t.Errorf("nothing missed for the quiet period, nothing counted: %q, want no_traffic_seen", r)
	}
}

// Probes of a health check node port are watched on the node's addresses and on the Service's load balancer IPs
// (GCE addresses its checks to the LB IP). (collector's TestArrivalSeries renders how many Services expect
// them.)
func TestHealthCheckProbesWatchedOnLoadBalancerIPs(t *testing.T) {
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: time.Unix(1_800_000_000, 0), Counts: map[arrivals.Dest]arrivals.DestCount{}}
	lb := scrapetest.LBService()
	lb.LoadBalancerIPs = []string{"192.0.2.50"}
	np := scrapetest.NodePortService(0)
	np.Name = "web"
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{lb, np}}}
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	g.Gather(context.Background())
	want := []arrivals.Dest{arrivals.NodeDest(arrivals.TCP, false, 32000),
		{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.50"), Port: 32000}}
	for _, d := range want {
		if !slices.Contains(meter.Watched.HealthChecks, d) {
			t.Errorf("health checks watched %v, want %v among them", meter.Watched.HealthChecks, d)
		}
	}
}
