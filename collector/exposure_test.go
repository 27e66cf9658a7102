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
