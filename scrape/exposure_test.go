package scrape

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// exposureBed is a node model over one NodePort Service, its rules and a meter the test sets, with a state file.
type exposureBed struct {
	t     *testing.T
	tr    *fixedTracker
	rules *scrapetest.Reader
	meter *scrapetest.Meter
	m     *Model
	now   time.Time
}

var nodePort30090 = arrivals.NodeDest(arrivals.TCP, false, 30090)

func newExposureBed(t *testing.T, path string, now time.Time, local int) *exposureBed {
	return newExposureBedWith(t, path, now, local, true)
}

// newExposureBedWith is newExposureBed, without an arrivals meter unless metered.
func newExposureBedWith(t *testing.T, path string, now time.Time, local int, metered bool) *exposureBed {
	b := &exposureBed{t: t, tr: &fixedTracker{local: local}, rules: &scrapetest.Reader{Snap: rulesWith(local, local == 0)},
		meter: &scrapetest.Meter{Status: arrivals.StatusOK, Now: now, Counts: map[arrivals.Dest]arrivals.DestCount{}}, now: now}
	clock := func() time.Time { return b.now }
	var meter ArrivalsMeter = b.meter
	if !metered {
		meter = nil
	}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: b.rules, Addrs: scrapetest.Addrs{"10.250.0.12"},
		Meter: meter, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler),
		State: OpenStateFile(StateFileConfig{Path: path, Node: "node-1", Now: clock})})
	b.m = NewModel(g, ModelConfig{Tracker: b.tr, Synchronous: true, Now: clock, RulesEvery: time.Second})
	return b
}

// step lets d pass, with attempts distinct attempts (each retransmitted twice) arrived meanwhile, the latest
// just now, and steps the model.
func (b *exposureBed) step(d time.Duration, attempts uint64) *exposure.Snapshot {
	b.t.Helper()
	b.now = b.now.Add(d)
	b.meter.Mu.Lock()
	b.meter.Now = b.now
	if attempts > 0 {
		c := b.meter.Counts[nodePort30090]
		c.Attempts += 3 * attempts
		c.Retransmits += 2 * attempts
		c.LastSeen = b.now
		b.meter.Counts[nodePort30090] = c
	}
	b.meter.Mu.Unlock()
	b.m.Step(context.Background(), b.now)
	st := b.m.Latest()
	if st == nil || st.Exposure == nil {
		b.t.Fatal("no State with the exposure recorder's snapshot")
	}
	return st.Exposure
}

func (b *exposureBed) serve(local int) {
	b.tr.set(local)
	b.rules.Snap = rulesWith(local, local == 0)
}

// The node model drives the recorder: the rules' drop begins an episode while the NodePort is in rotation,
// the meter's distinct attempts are counted (retransmissions not), and the quiet period after the last attempt
// ends it at a timer of the model's own, with no input moving.
func TestModelRecordsAnEpisode(t *testing.T) {
	b := newExposureBed(t, filepath.Join(t.TempDir(), "state.json"), time.Unix(1_800_000_000, 0), 1)
	for _, c := range exposure.Causes {
		if got := b.step(0, 0).Totals[c]; got != (exposure.Totals{}) {
			t.Errorf("%s starts at %+v", c, got)
		}
	}
	b.step(3*time.Second, 5)
	b.serve(0)
	b.step(2*time.Second, 0)
	if r := b.m.Latest().Services[0]; !r.Verdict.Blackhole {
		t.Fatalf("the NodePort is not in rotation and dropped: %+v", r.Verdict)
	}
	if snap := b.step(time.Second, 0); snap.Open != 1 || !snap.AttemptsCounted {
		t.Fatalf("no episode open after the drop: %+v", snap)
	}
	b.step(time.Second, 4)
	last := b.step(3*time.Second, 3)
	// From the drop (5 s) to the last attempt (10 s).
	if got := last.Totals[exposure.CauseOther]; got.Attempts != 7 || got.Seconds != 5 {
		t.Errorf("while open: %+v, want 7 attempts over 5 s", got)
	}
	due := b.now.Add(DefaultQuiet)
	if next := b.m.g.exposure.next(); !next.Equal(due) {
		t.Errorf("the recorder's next end is %v, want the quiet period after the last attempt, %v", next, due)
	}
	if next := b.m.work(b.now); next.After(due) {
		t.Errorf("the model's next wake-up %v is after the episode's quiet end %v", next, due)
	}
	if snap := b.step(DefaultQuiet-time.Millisecond, 0); snap.Open != 1 {
		t.Error("the episode ended before its quiet period")
	}
	snap := b.step(time.Millisecond, 0)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 0 || got.Episodes != 1 || got.Attempts != 7 || got.Seconds != 5 {
		t.Errorf("after the quiet period: %+v, open %d", got, snap.Open)
	}
	if snap.Episodes.Count != 1 || snap.Episodes.Sum != 5 {
		t.Errorf("histogram %+v", snap.Episodes)
	}
}

// An exporter restarted in the middle of an episode takes it over from the state file: the new process goes
// on counting where the old one stopped, and the episode ends once.
func TestModelExposureAcrossARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	start := time.Unix(1_800_000_000, 0)
	b := newExposureBed(t, path, start, 1)
	b.step(0, 0)
	b.serve(0)
	b.step(2*time.Second, 0)
	b.step(2*time.Second, 6)
	b.m.g.SaveState()

	// The new process: the same node dropping, a new meter that counts from zero.
	n := newExposureBed(t, path, b.now.Add(10*time.Second), 0)
	if st := n.m.g.cfg.State.State(); st != stateRestored {
		t.Fatalf("state file %s", st)
	}
	snap := n.step(0, 0)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 1 || got.Attempts != 6 || got.Seconds != 2 {
		t.Fatalf("restored: %+v, open %d", got, snap.Open)
	}
	n.step(time.Second, 2)
	n.serve(1)
	snap = n.step(time.Second, 0)
	got := snap.Totals[exposure.CauseOther]
	if snap.Open != 0 || got.Episodes != 1 || got.Attempts != 8 {
		t.Errorf("after the restart: %+v, open %d; want one episode of 8 attempts", got, snap.Open)
	}
	// Its seconds run to its last attempt, counted by the new process on the old one's clock.
	if want := n.now.Add(-time.Second).Sub(start.Add(2 * time.Second)).Seconds(); got.Seconds != want {
		t.Errorf("seconds %v, want %v", got.Seconds, want)
	}
}

// A state file older than its horizon: nobody looked for longer than an episode's quiet end, so the open
// episode ends as it was counted (its totals and one episode kept), and none is under way in the new process.
func TestModelExposureAfterALongStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	b := newExposureBed(t, path, time.Unix(1_800_000_000, 0), 1)
	b.step(0, 0)
	b.serve(0)
	b.step(2*time.Second, 0)
	b.step(2*time.Second, 6)
	b.m.g.SaveState()

	n := newExposureBed(t, path, b.now.Add(DefaultQuiet+time.Minute), 0)
	snap := n.step(0, 0)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 0 || got.Episodes != 1 || got.Attempts != 6 || got.Seconds != 2 {
		t.Errorf("after a long stop: %+v, open %d; want the episode ended as counted", got, snap.Open)
	}
}

// The model hands the recorder what the API view shows: a local endpoint still listed as terminating that
// stopped serving (a pod failing readiness on SIGTERM) while others are ready elsewhere is a rollout.
func TestModelTellsARollout(t *testing.T) {
	b := newExposureBed(t, filepath.Join(t.TempDir(), "state.json"), time.Unix(1_800_000_000, 0), 1)
	b.step(0, 0)
	b.tr.mu.Lock()
	b.tr.mod = func(s *kubeview.ServiceState) { s.Families[0].LocalStopped, s.Families[0].RemoteReady = 1, 2 }
	b.tr.mu.Unlock()
	b.serve(0)
	b.step(time.Second, 0)
	b.step(time.Second, 3)
	if got := b.step(time.Second, 0).Totals[exposure.CauseRollout]; got.Attempts != 3 || got.Seconds != 1 {
		t.Errorf("rollout: %+v, want 3 attempts over 1 s", got)
	}
}

// Without the meter, the model records episodes from the rules and the API view alone: seconds while the
// verdict keeps the NodePort in rotation, to the decision that finds it forwarded again; no attempt counted,
// and the snapshot says they are not.
func TestModelExposureWithoutTheMeter(t *testing.T) {
	b := newExposureBedWith(t, filepath.Join(t.TempDir(), "state.json"), time.Unix(1_800_000_000, 0), 1, false)
	b.step(0, 0)
	b.serve(0)
	b.step(time.Second, 0)
	if snap := b.step(5*time.Second, 0); snap.Open != 1 || snap.AttemptsCounted || snap.Totals[exposure.CauseOther].Seconds != 5 {
		t.Fatalf("while dropping: %+v", snap)
	}
	if b.m.g.exposure.next() != (time.Time{}) {
		t.Error("an unmetered episode waits for a quiet period")
	}
	b.serve(1)
	snap := b.step(4*time.Second, 0)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 0 || got.Episodes != 1 || got.Seconds != 9 || got.Attempts != 0 {
		t.Errorf("after forwarding again: %+v, open %d", got, snap.Open)
	}
}

// toldDropBed is a bed whose rules are read at most every 2.5 s: read at 0, seven attempts served by 1.3 s,
// when the node loses its endpoint and the reader tells of the change, marked at the step at 1.4 s.
func toldDropBed(t *testing.T) *exposureBed {
	b := newExposureBed(t, filepath.Join(t.TempDir(), "state.json"), time.Unix(1_800_000_000, 0), 1)
	b.m.cfg.RulesMinInterval = 2500 * time.Millisecond
	b.step(0, 0)
	b.step(time.Second, 5)
	b.step(300*time.Millisecond, 2)
	b.serve(0)
	b.m.RulesChanged(true)
	b.step(100*time.Millisecond, 0)
	return b
}

// The reader tells of kube-proxy's change at 1.4 s, and the rules are read at 2.6 s (the exporter's
// --rules.cache-ttl after the read before); the meter's counts moved at 2.4 s, and the Service was decided on
// the rules from before the change. The episode begins at the change, and counts the attempts that arrived
// since it, not the seven served before it, nor only those after the read.
func TestModelEpisodeBeginsAtTheToldChange(t *testing.T) {
	b := toldDropBed(t)
	if snap := b.step(time.Second, 4); snap.Open != 0 {
		t.Fatalf("an episode before the rules were read: %+v", snap)
	}
	snap := b.step(200*time.Millisecond, 3)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 1 || got.Attempts != 7 || math.Abs(got.Seconds-1.2) > 1e-9 {
		t.Fatalf("%+v (open %d), want an episode from the change at 1.4 s with the 7 attempts since, the latest at 2.6 s", got, snap.Open)
	}
	b.step(time.Second, 2)
	if got := b.step(0, 0).Totals[exposure.CauseOther]; got.Attempts != 9 || math.Abs(got.Seconds-2.2) > 1e-9 {
		t.Errorf("%+v, want 9 attempts over 2.2 s (from the change to the last attempt)", got)
	}
}

// The reader tells of a content change at 1.4 s, then of a rewrite of the counters' chains alone at 1.9 s
// (kube-proxy's next sync, when the stopped endpoint leaves the slices); the rules are read at 2.6 s. The
// rewrite changed nothing a read shows: the episode begins at 1.4 s and counts the 7 attempts since.
func TestModelEpisodeIgnoresACountersRewrite(t *testing.T) {
	b := toldDropBed(t)
	b.m.RulesChanged(false)
	if snap := b.step(500*time.Millisecond, 2); snap.Open != 0 {
		t.Fatalf("an episode before the rules were read: %+v", snap)
	}
	b.step(500*time.Millisecond, 2)
	snap := b.step(200*time.Millisecond, 3)
	if got := snap.Totals[exposure.CauseOther]; snap.Open != 1 || got.Attempts != 7 || math.Abs(got.Seconds-1.2) > 1e-9 {
		t.Fatalf("%+v (open %d), want an episode from the change at 1.4 s with the 7 attempts since", got, snap.Open)
	}
}

// Rules polled (nobody tells of their change) are read at 1.5 s, after the meter's counts were last taken at
// 1 s: two attempts served at 1.3 s are no loss. The meter is read again after the rules, and only the
// attempts from there on count.
func TestModelEpisodeCountsFromAfterThePolledRules(t *testing.T) {
	b := newExposureBed(t, filepath.Join(t.TempDir(), "state.json"), time.Unix(1_800_000_000, 0), 1)
	b.m.cfg.RulesEvery = 1500 * time.Millisecond
	b.step(0, 0)
	b.step(time.Second, 5)
	b.step(300*time.Millisecond, 2)
	b.serve(0)
	if snap := b.step(200*time.Millisecond, 1); snap.Open != 1 {
		t.Fatalf("no episode at the rules' read: %+v", snap)
	}
	b.step(time.Second, 4)
	if got := b.step(0, 0).Totals[exposure.CauseOther]; got.Attempts != 4 || got.Seconds != 1 {
		t.Errorf("%+v, want the 4 attempts after the read, over 1 s", got)
	}
}
