package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The exposure collector renders the recorder's snapshot: both counters for every cause (0 until an episode
// counts), the histogram with its buckets, and whether attempts are counted at all. The direct exposition
// writes the histogram as the registry does.
func TestExposureSeries(t *testing.T) {
	rec := exposure.NewRecorder(scrape.DefaultQuiet)
	rec.Node(true, false)
	k := exposure.Key{Namespace: "shop", Service: "web", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: 30090}
	start := time.Unix(1_800_000_000, 0)
	rec.Observe(start, k, exposure.Observation{InRotation: true})
	rec.Observe(start.Add(time.Second), k, exposure.Observation{Dropped: true, InRotation: true, Facts: exposure.Facts{Cordoned: true}})
	rec.Observe(start.Add(8*time.Second), k, exposure.Observation{InRotation: true})
	st := &scrape.State{Exposure: rec.Snapshot()}
	noDurations, err := NewMetricFilter("", ".*_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	exp := NewExporter(discard(), fixedState{st}, NewExposure()).WithNode("node-1").WithFilter(noDurations)
	got := sameViaRegistry(t, exp)
	for _, line := range []string{
		`localtraffic_exposure_seconds_total{cause="drain",node="node-1"} 7`,
		`localtraffic_exposure_seconds_total{cause="rollout",node="node-1"} 0`,
		`localtraffic_exposure_attempts_total{cause="node_join",node="node-1"} 0`,
		`localtraffic_exposure_attempts_counted{node="node-1"} 0`,
		`localtraffic_exposure_episodes_open{node="node-1"} 0`,
		`localtraffic_exposure_episode_seconds_bucket{node="node-1",le="5"} 0`,
		`localtraffic_exposure_episode_seconds_bucket{node="node-1",le="10"} 1`,
		`localtraffic_exposure_episode_seconds_bucket{node="node-1",le="+Inf"} 1`,
		`localtraffic_exposure_episode_seconds_sum{node="node-1"} 7`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %s in\n%s", line, got)
		}
	}
	if n := strings.Count(got, "localtraffic_exposure_seconds_total{"); n != len(exposure.Causes) {
		t.Errorf("%d seconds series, want one per cause (%d)", n, len(exposure.Causes))
	}
	// Outside the node model there is no recorder: nothing is made up.
	if none := encode(t, gatherText(t, NewExporter(discard(), fixedState{&scrape.State{}}, NewExposure()))); strings.Contains(none, "localtraffic_exposure") {
		t.Errorf("series without a recorder:\n%s", none)
	}
}

// A measured drain, per node by default and per Service with service_exposure: an episode at a LoadBalancer
// Service whose health check node port answered 503 at 1 s (the API's change), a checker probing it throughout,
// the last client attempt at 4.5 s. The per-Service series exist only for the Service that had an episode; its
// check window comes from the annotations, another Service's observed interval is exported where none does.
func TestExposureDrainSeries(t *testing.T) {
	rec := exposure.NewRecorder(scrape.DefaultQuiet)
	rec.Node(true, true)
	k := exposure.Key{Namespace: "shop", Service: "web", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: 30090}
	start := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	obs := func(dropped bool, ready int, n uint64, last time.Time, unavailable bool, probe time.Time) exposure.Observation {
		return exposure.Observation{Dropped: dropped, InRotation: true, Watched: true, Attempts: n, LastSeen: last,
			Losing: dropped, Facts: exposure.Facts{LocalReady: ready, LocalStopped: 1, RemoteReady: 1},
			Health: exposure.Health{Asked: true, Unavailable: unavailable, ProbedAt: probe, ProbesWatched: true, ProbeLast: last}}
	}
	rec.Observe(at(0), k, obs(false, 1, 10, at(0), false, at(0)))
	rec.Observe(at(1), k, obs(false, 0, 20, at(1), false, at(0)))
	rec.Observe(at(2), k, obs(true, 0, 30, at(2), true, at(1.5)))
	rec.Observe(at(4.5), k, obs(true, 0, 40, at(4.5), true, at(1.5)))
	rec.Check("shop", "web", exposure.LBCheck{Interval: time.Second, Threshold: 3, Observed: time.Second})
	rec.Advance(at(4.5).Add(scrape.DefaultQuiet))
	st := &scrape.State{Exposure: rec.Snapshot()}
	noDurations, err := NewMetricFilter("", ".*_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	exp := NewExporter(discard(), fixedState{st}, NewExposure(), NewServiceExposure()).WithNode("node-1").WithFilter(noDurations)
	got := sameViaRegistry(t, exp)
	for _, line := range []string{
		`localtraffic_lb_drain_seconds_bucket{node="node-1",le="3"} 0`,
		`localtraffic_lb_drain_seconds_bucket{node="node-1",le="5"} 1`,
		`localtraffic_lb_drain_seconds_sum{node="node-1"} 3.5`,
		`localtraffic_lb_drain_seconds_count{node="node-1"} 1`,
		`localtraffic_service_lb_drain_seconds_bucket{namespace="shop",node="node-1",service="web",le="5"} 1`,
		`localtraffic_service_lb_drain_seconds_sum{namespace="shop",node="node-1",service="web"} 3.5`,
		`localtraffic_service_exposure_attempts_total{cause="rollout",namespace="shop",node="node-1",service="web"} 10`,
		`localtraffic_service_exposure_seconds_total{cause="rollout",namespace="shop",node="node-1",service="web"} 2.5`,
		`localtraffic_service_lb_check_window_seconds{namespace="shop",node="node-1",service="web",source="annotations"} 3`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %s in\n%s", line, got)
		}
	}
	for _, absent := range []string{`localtraffic_service_exposure_seconds_total{cause="drain"`, "localtraffic_service_lb_check_interval_seconds{"} {
		if strings.Contains(got, absent) {
			t.Errorf("%s exported:\n%s", absent, got)
		}
	}
	// Without annotations, the interval the meter observed, and no window.
	rec.Check("shop", "web", exposure.LBCheck{Observed: 2 * time.Second})
	st.Exposure = rec.Snapshot()
	got = sameViaRegistry(t, exp)
	if !strings.Contains(got, `localtraffic_service_lb_check_interval_seconds{namespace="shop",node="node-1",service="web"} 2`+"\n") ||
		strings.Contains(got, "localtraffic_service_lb_check_window_seconds{") {
		t.Errorf("without annotations, want the observed interval alone:\n%s", got)
	}
}

// The window attempts are exported per Service and cause, for a Service that served throughout (no episode)
// as for one that lost: the success ratio needs both.
func TestServiceWindowAttemptsSeries(t *testing.T) {
	rec := exposure.NewRecorder(scrape.DefaultQuiet)
	rec.Node(true, true)
	start := time.Unix(1_800_000_000, 0)
	k := exposure.Key{Namespace: "shop", Service: "api", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: 30091}
	for i, n := range []uint64{100, 130, 170} {
		rec.Decided(start.Add(time.Duration(i)*time.Second), "shop", "api", []exposure.Entry{{Key: k, Observation: exposure.Observation{
			InRotation: true, Watched: true, Attempts: n, LastSeen: start, Facts: exposure.Facts{Terminating: 1, LocalReady: 1}}}})
	}
	st := &scrape.State{Exposure: rec.Snapshot()}
	noDurations, err := NewMetricFilter("", ".*_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	got := sameViaRegistry(t, NewExporter(discard(), fixedState{st}, NewServiceExposure()).WithNode("node-1").WithFilter(noDurations))
	want := `localtraffic_service_window_attempts_total{cause="rollout",namespace="shop",node="node-1",service="api"} 70`
	if !strings.Contains(got, want+"\n") {
		t.Errorf("missing %s in\n%s", want, got)
	}
	for _, absent := range []string{`localtraffic_service_window_attempts_total{cause="drain"`, "localtraffic_service_exposure_attempts_total{"} {
		if strings.Contains(got, absent) {
			t.Errorf("%s exported:\n%s", absent, got)
		}
	}
}
