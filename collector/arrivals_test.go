package collector

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The exporter tells the meter every destination and health check node port on the node's NodePort
// addresses; a NodePort that keeps receiving attempts for longer than the grace window while the node drops
// them is in rotation (here on a node excluded from load balancers, which kube-proxy ignores), counted from
// the scrape that first found it dropped.
func TestArrivalsPutANodeInRotation(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: t0, Counts: map[arrivals.Dest]arrivals.DestCount{
		np: scrapetest.Repeating(arrivals.DestCount{Attempts: 500, ActiveSince: t0.Add(-time.Hour), LastSeen: t0.Add(-time.Second)})}}
	node := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true, InternalIPs: []string{"10.0.0.1"},
		PodCIDRs: []string{"10.244.1.0/24"}}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1", "10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, Grace: 2 * time.Minute, ProbeTimeout: time.Second, Logger: logger})

	st := g.Gather(context.Background())
	if v := st.Services[0].Verdict; v.Blackhole || v.InRotation {
		t.Fatalf("first scrape: blackhole %v in rotation %v; nothing says since when it drops yet", v.Blackhole, v.InRotation)
	}
	if _, ok := slicesIndex(meter.Watched.Dests, np); !ok || !containsAddr(meter.Watched.NodeAddrs, "10.0.0.1") ||
		!containsPrefix(meter.Watched.Internal, "10.244.1.0/24") {
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
	meter := &scrapetest.Meter{Status: arrivals.StatusPermissionDenied, Now: time.Unix(1_800_000_000, 0)}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
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
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: t0, Counts: map[arrivals.Dest]arrivals.DestCount{}}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// fakeMeter reports 3 packets the ring dropped: missed since the meter started, seen now.
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNotObserved {
		t.Errorf("the meter missing packets, nothing counted: %q, want not_observed", r)
	}
	meter.Now = t0.Add(scrape.DefaultQuiet + time.Second) // no more missed since
	if r := g.Gather(context.Background()).Services[0].Verdict.Reason; r != verdict.ReasonNoTrafficSeen {
		t.Errorf("nothing missed for the quiet period, nothing counted: %q, want no_traffic_seen", r)
	}
}

// Probes of a health check node port are watched on the node's addresses and on the Service's load balancer IPs
// (GCE addresses its checks to the LB IP), and the node says how many of its Services expect them.
func TestHealthCheckProbesWatchedOnLoadBalancerIPs(t *testing.T) {
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: time.Unix(1_800_000_000, 0), Counts: map[arrivals.Dest]arrivals.DestCount{}}
	lb := scrapetest.LBService()
	lb.LoadBalancerIPs = []string{"192.0.2.50"}
	np := scrapetest.NodePortService(0)
	np.Name = "web"
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{lb, np}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, ProbeTimeout: time.Second, Logger: logger})
	st := g.Gather(context.Background())
	want := []arrivals.Dest{arrivals.NodeDest(arrivals.TCP, false, 32000),
		{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.50"), Port: 32000}}
	for _, d := range want {
		if _, ok := slicesIndex(meter.Watched.HealthChecks, d); !ok {
			t.Errorf("health checks watched %v, want %v among them", meter.Watched.HealthChecks, d)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(logger, fixedState{st}, NewArrivals()).Bind(context.Background()))
	expectSeries(t, reg, `localtraffic_health_check_expected_services 1`, "localtraffic_health_check_expected_services")
}

type fixedState struct{ st *scrape.State }

func (f fixedState) Gather(context.Context) *scrape.State { return f.st }

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
