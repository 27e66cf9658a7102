package scrape

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// What the recorder is told of a Service's health check node port: the model's probe answer (200 or 503, with
// when it was sent) and the latest probe the meter counted there from outside, at the node's addresses or the
// load balancer IP; what configures the load balancer's reaction: the annotations' window, and the shortest
// cadence of the checkers the meter proved at the port.
func TestExposureHealthOfAService(t *testing.T) {
	sent := time.Unix(1_800_000_000, 0)
	svc := scrapetest.LBService(scrapetest.Family(corev1.IPv4Protocol, 0, true))
	svc.LoadBalancerIPs = []string{"192.0.2.80"}
	r := &ServiceResult{Service: svc, Checks: []FamilyCheck{{Family: corev1.IPv4Protocol,
		HealthCheck: nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503}}}}
	atNode, atLB := sent.Add(time.Second), sent.Add(2*time.Second)
	snap := &arrivals.Snapshot{Status: arrivals.StatusOK, HealthChecks: []arrivals.HealthCheckCount{
		{Dest: arrivals.NodeDest(arrivals.TCP, false, 32000), Probes: 9, LastSeen: atNode,
			Checkers: []arrivals.CheckerSource{{Interval: 5 * time.Second}, {Interval: 2 * time.Second}}},
		{Dest: arrivals.Dest{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.80"), Port: 32000}, Probes: 3, LastSeen: atLB},
	}}
	p := &pass{observed: &observations{snap: snap}}

	h := healthOf(p, r, corev1.IPv4Protocol, sent)
	if !h.Asked || !h.Unavailable || !h.ProbedAt.Equal(sent) || !h.ProbesWatched || !h.ProbeLast.Equal(atLB) {
		t.Errorf("health = %+v; want asked, 503 sent at %v, probes watched, the latest at the load balancer IP", h, sent)
	}
	if c := lbCheckOf(snap, svc); c.Observed != 2*time.Second || c.Window() != 0 {
		t.Errorf("check = %+v, want the shortest checker (2s) and no configured window", c)
	}

	// A refused probe dates nothing; a meter missing packets watches nothing; no meter, nothing observed.
	r.Checks[0].HealthCheck = nodeprobe.HealthCheck{Result: nodeprobe.ResultRefused}
	if h := healthOf(&pass{observed: &observations{snap: snap, overloaded: true}}, r, corev1.IPv4Protocol, sent); !h.Asked ||
		!h.ProbedAt.IsZero() || h.ProbesWatched {
		t.Errorf("refused, meter overloaded: %+v; want asked, no answer, probes not watched", h)
	}
	if h := healthOf(&pass{}, r, corev1.IPv4Protocol, sent); h.ProbesWatched {
		t.Errorf("no meter: %+v", h)
	}
	// A NodePort Service has no health check node port.
	if h := healthOf(p, &ServiceResult{Service: scrapetest.NodePortService(0)}, corev1.IPv4Protocol, sent); h.Asked {
		t.Errorf("NodePort Service: %+v, want not asked", h)
	}
	// The annotations' window.
	svc.LBCheckWindow = announce.CheckWindow{Interval: 10 * time.Second, Threshold: 3}
	if c := lbCheckOf(nil, svc); c.Window() != 30*time.Second || c.Observed != 0 {
		t.Errorf("check = %+v, want 30 s from the annotations", c)
	}
}

// The checker's cadence is refreshed at every step for the Services that had an episode, not only at their
// decisions: the checker proves its cadence at its fifth probe, whenever that comes.
func TestExposureChecksRefreshedFromTheMeter(t *testing.T) {
	x := newExposureTracker(DefaultQuiet, slog.New(slog.DiscardHandler))
	x.rec.Node(true, true)
	k := exposure.Key{Namespace: "kubelings", Service: "checkout", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: 30090}
	start := time.Unix(1_800_000_000, 0)
	x.rec.Observe(start, k, exposure.Observation{InRotation: true, Watched: true})
	x.rec.Observe(start.Add(time.Second), k, exposure.Observation{Dropped: true, InRotation: true, Watched: true})
	svc := scrapetest.LBService(scrapetest.Family(corev1.IPv4Protocol, 0, true))
	state := func(ns, name string) (kubeview.ServiceState, bool) {
		return svc, ns == svc.Namespace && name == svc.Name
	}
	snap := &arrivals.Snapshot{Status: arrivals.StatusOK, HealthChecks: []arrivals.HealthCheckCount{
		{Dest: arrivals.NodeDest(arrivals.TCP, false, 32000), Checkers: []arrivals.CheckerSource{{Interval: time.Second}}}}}
	x.checks(snap, state)
	if s := x.snapshot().Services; len(s) != 1 || s[0].Check.Observed != time.Second {
		t.Errorf("services = %+v, want kubelings/checkout's checker every second", s)
	}
	x.checks(&arrivals.Snapshot{Status: arrivals.StatusFailed}, state)
	if s := x.snapshot().Services; len(s) != 1 || s[0].Check.Observed != 0 {
		t.Errorf("with the meter failed: %+v, want no interval", s)
	}
}
