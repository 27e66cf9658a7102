package exposure

import (
	"testing"
	"time"
)

const quiet = 2 * time.Minute

var (
	t0   = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	port = Key{Namespace: "shop", Service: "web", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: 30090}
	lbIP = Key{Namespace: "shop", Service: "web", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: "load_balancer_ip",
		Address: "192.0.2.10", DestPort: 80}
	rolling = Facts{LocalStopped: 1, RemoteReady: 2}
)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// served and dropped are one decision of a metered destination with the meter's count n and latest arrival.
func served(in bool, n uint64, last time.Time) Observation {
	return Observation{InRotation: in, Watched: true, Attempts: n, LastSeen: last}
}

func dropped(in bool, n uint64, last time.Time, f Facts) Observation {
	return Observation{Dropped: true, InRotation: in, Watched: true, Attempts: n, LastSeen: last, Facts: f,
		Losing: !last.IsZero() && n > 0}
}

func metered() *Recorder {
	r := NewRecorder(quiet)
	r.Node(true, true)
	return r
}

func wantTotals(t *testing.T, r *Recorder, c Cause, seconds float64, attempts, episodes uint64) {
	t.Helper()
	got := r.Snapshot().Totals[c]
	if d := got.Seconds - seconds; d > 1e-9 || d < -1e-9 || got.Attempts != attempts || got.Episodes != episodes {
		t.Errorf("%s: got %+v, want %.3f s, %d attempts, %d episodes", c, got, seconds, attempts, episodes)
	}
	for _, other := range Causes {
		if other != c && r.Snapshot().Totals[other] != (Totals{}) {
			t.Errorf("%s counted %+v, want nothing", other, r.Snapshot().Totals[other])
		}
	}
}

// A pod that fails its readiness on SIGTERM stops serving at once: the node drops while its health check
// still answers 200 (in rotation), the load balancer keeps sending until its own checks fail, and the episode
// ends the quiet period after the last attempt, which is where its seconds end.
func TestPodFailingReadinessOnSIGTERM(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 100, at(0)))
	r.Observe(at(1), port, dropped(true, 100, at(0.9), rolling))
	if ep, ok := r.Open(port); !ok || ep.Cause != CauseRollout || !ep.Start.Equal(at(1)) {
		t.Fatalf("open episode = %+v, %v; want a rollout from 1 s", ep, ok)
	}
	r.Observe(at(2), port, dropped(true, 104, at(2), rolling))
	// The health check answers 503 now: out of rotation, but the load balancer has not reacted yet.
	r.Observe(at(5), port, dropped(false, 110, at(4.5), rolling))
	if !r.Next().Equal(at(4.5).Add(quiet)) {
		t.Errorf("Next = %v, want the quiet period after the last attempt", r.Next())
	}
	r.Advance(at(4.5).Add(quiet - time.Millisecond))
	if r.Snapshot().Open != 1 {
		t.Fatal("ended before its quiet period")
	}
	r.Advance(at(4.5).Add(quiet))
	if r.Snapshot().Open != 0 {
		t.Fatal("still open after the quiet period")
	}
	wantTotals(t, r, CauseRollout, 3.5, 10, 1)
	if h := r.Snapshot().Episodes; h.Count != 1 || h.Sum != 3.5 || h.Cumulative()[2.5] != 0 || h.Cumulative()[5] != 1 {
		t.Errorf("episodes histogram = %+v, want the one of 3.5 s in the 5 s bucket", h)
	}
}

// kube-proxy's serving-terminating fallback keeps forwarding to a terminating pod that still serves while its
// health check answers 503. A load balancer that honours the check has left by the time the pod stops: the
// drop comes out of rotation, nothing arrives, and no episode begins. One that has not (its checks slower than
// the fallback lasted) still sends: the episode begins at the drop with the first lost attempt.
func TestServingTerminatingFallback(t *testing.T) {
	t.Run("load balancer gone in time", func(t *testing.T) {
		r := metered()
		r.Observe(at(0), port, served(true, 50, at(0)))
		r.Observe(at(1), port, served(false, 60, at(1))) // fallback: forwarded, health check 503
		r.Observe(at(30), port, dropped(false, 60, at(1), rolling))
		r.Observe(at(30).Add(quiet), port, dropped(false, 60, at(1), rolling))
		r.Advance(at(30).Add(2 * quiet))
		wantTotals(t, r, CauseRollout, 0, 0, 0)
		// An attempt long after is a blackhole's loss (the verdict's traffic_lost), not this drop's episode.
		r.Observe(at(30).Add(3*quiet), port, dropped(false, 61, at(30).Add(3*quiet), rolling))
		wantTotals(t, r, CauseRollout, 0, 0, 0)
	})
	t.Run("load balancer still sending", func(t *testing.T) {
		r := metered()
		r.Observe(at(0), port, served(true, 50, at(0)))
		r.Observe(at(1), port, served(false, 60, at(1)))
		r.Observe(at(30), port, dropped(false, 60, at(1), rolling))
		r.Observe(at(31), port, dropped(false, 63, at(31), rolling))
		if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(30)) || ep.Attempts != 3 {
			t.Fatalf("open episode = %+v, %v; want one from the drop with 3 attempts", ep, ok)
		}
		r.Observe(at(36), port, dropped(false, 70, at(35), rolling))
		r.Advance(at(35).Add(quiet))
		wantTotals(t, r, CauseRollout, 5, 10, 1)
	})
}

// Two destinations of one Service drop in one rollout, and the Service rolls again while the first episode
// of its NodePort is open: every destination has its own episodes, one at a time, and none counts twice.
func TestOverlappingRollouts(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 0, time.Time{}))
	r.Observe(at(0), lbIP, served(true, 0, time.Time{}))
	r.Observe(at(1), port, dropped(true, 0, time.Time{}, rolling))
	r.Observe(at(1), lbIP, dropped(true, 0, time.Time{}, rolling))
	r.Observe(at(3), port, dropped(true, 4, at(3), rolling))
	r.Observe(at(3), lbIP, dropped(true, 2, at(2), rolling))
	// The new pod is ready: the node forwards again. The second rollout drops it again a second later.
	r.Observe(at(5), port, served(true, 6, at(4)))
	r.Observe(at(6), port, dropped(true, 6, at(4), rolling))
	if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(6)) || ep.Attempts != 0 {
		t.Fatalf("second episode = %+v, %v", ep, ok)
	}
	r.Observe(at(8), port, dropped(true, 9, at(8), rolling))
	r.Observe(at(9), port, served(true, 9, at(8)))
	r.Observe(at(9), lbIP, served(true, 2, at(2)))
	if r.Snapshot().Open != 0 {
		t.Fatal("episodes left open")
	}
	// NodePort: 1→4 s (6 attempts, the two after 3 s among them), 6→8 s (3); load balancer IP: 1→2 s (2).
	wantTotals(t, r, CauseRollout, 3+2+1, 6+3+2, 3)
}

// An exporter restarted in the middle of an episode resumes it from the state file: the seconds and attempts
// counted before are neither lost nor counted again, and the new meter's count (which restarted, or holds
// restored runs) is taken as a fresh base.
func TestRestartMidEpisode(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 10, at(0)))
	r.Observe(at(1), port, dropped(true, 10, at(0), Facts{Cordoned: true}))
	r.Observe(at(4), port, dropped(true, 25, at(4), Facts{Cordoned: true}))
	saved := throughFile(t, r)
	n := metered()
	n.Restore(saved, true)
	wantTotals(t, n, CauseDrain, 3, 15, 0)
	n.Observe(at(10), port, dropped(true, 40, at(9), Facts{Cordoned: true})) // the new meter's count, restored run and all
	n.Observe(at(12), port, dropped(true, 44, at(12), Facts{Cordoned: true}))
	n.Advance(at(12).Add(quiet))
	wantTotals(t, n, CauseDrain, 11, 19, 1)
	if n.Snapshot().Open != 0 {
		t.Error("the restored episode did not end")
	}
	// The histogram carries over too: a second restart keeps the ended episode.
	ended := throughFile(t, n)
	again := metered()
	again.Restore(ended, true)
	if h := again.Snapshot().Episodes; h.Count != 1 || h.Sum != 11 || h.Cumulative()[10] != 0 || h.Cumulative()[20] != 1 {
		t.Errorf("restored histogram = %+v", h)
	}
	// A restored episode whose destination forwards again at the first decision ends there.
	m := metered()
	m.Restore(saved, true)
	m.Observe(at(10), port, served(true, 0, time.Time{}))
	wantTotals(t, m, CauseDrain, 3, 15, 1)
	// A file older than the quiet period: nobody looked meanwhile, the episode ends as it was counted.
	stale := metered()
	stale.Restore(saved, false)
	wantTotals(t, stale, CauseDrain, 3, 15, 1)
	if stale.Snapshot().Open != 0 || stale.Snapshot().Episodes.Count != 1 {
		t.Errorf("a stale file's episode resumed: %+v", stale.Snapshot())
	}
}

// Without the meter, episodes come from the rules and the API view alone: an episode lasts while the verdict
// keeps the destination in rotation (to now at each step), attempts are not counted, and the snapshot says so.
func TestMeterOff(t *testing.T) {
	r := NewRecorder(quiet)
	r.Node(true, false)
	off := func(d, in bool, f Facts) Observation { return Observation{Dropped: d, InRotation: in, Facts: f} }
	r.Observe(at(0), port, off(false, true, Facts{}))
	r.Observe(at(1), port, off(true, true, Facts{Deleting: true}))
	if r.Next() != (time.Time{}) {
		t.Error("an unmetered episode has no quiet period to wait for")
	}
	r.Advance(at(11))
	wantTotals(t, r, CauseNodeDeleting, 10, 0, 0)
	r.Observe(at(21), port, off(true, false, Facts{Deleting: true})) // drained: out of rotation
	wantTotals(t, r, CauseNodeDeleting, 20, 0, 1)
	if r.Snapshot().AttemptsCounted {
		t.Error("the snapshot says attempts are counted with the meter off")
	}
	// A NodePort whose node stays eligible: the episode lasts until it forwards again.
	r.Observe(at(30), lbIP, off(false, true, Facts{}))
	r.Observe(at(31), lbIP, off(true, true, Facts{}))
	r.Observe(at(100), lbIP, off(true, true, Facts{}))
	r.Observe(at(101), lbIP, off(false, true, Facts{}))
	if got := r.Snapshot().Totals[CauseOther]; got.Seconds != 70 || got.Episodes != 1 || got.Attempts != 0 {
		t.Errorf("other = %+v", got)
	}
}

// The cause is what the API view shows when the episode begins; a node kube-proxy programs for the first time
// is a join.
func TestCauses(t *testing.T) {
	for _, c := range []struct {
		name       string
		facts      Facts
		programmed bool
		want       Cause
	}{
		{"deleting beats cordoned", Facts{Deleting: true, Cordoned: true, LocalStopped: 1, RemoteReady: 1}, true, CauseNodeDeleting},
		{"cordoned", Facts{Cordoned: true, LocalStopped: 1, RemoteReady: 1}, true, CauseDrain},
		{"rollout", rolling, true, CauseRollout},
		{"the last endpoint anywhere stopped", Facts{LocalStopped: 1}, true, CauseOther},
		{"crashed, not deleted", Facts{RemoteReady: 3}, true, CauseOther},
		{"first rules", Facts{}, false, CauseNodeJoin},
		{"first rules on a cordoned node", Facts{Cordoned: true}, false, CauseDrain},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewRecorder(quiet)
			r.Node(c.programmed, true)
			r.Observe(at(0), port, served(true, 0, time.Time{}))
			r.Node(true, true)
			r.Observe(at(1), port, dropped(true, 0, time.Time{}, c.facts))
			if ep, ok := r.Open(port); !ok || ep.Cause != c.want {
				t.Errorf("episode = %+v, %v; want cause %s", ep, ok, c.want)
			}
		})
	}
}

// A destination first seen dropped is a blackhole, not an episode; one dropped out of rotation with nothing
// arriving is none either; a destination that goes away ends its episode.
func TestNoTransitionNoEpisode(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, dropped(true, 5, at(0), Facts{}))
	r.Observe(at(1), port, dropped(true, 9, at(1), Facts{}))
	if r.Snapshot().Open != 0 {
		t.Error("an episode began without a transition")
	}
	r.Observe(at(0), lbIP, served(false, 0, time.Time{}))
	r.Observe(at(1), lbIP, dropped(false, 0, time.Time{}, Facts{}))
	if r.Snapshot().Open != 0 {
		t.Error("an episode began out of rotation with nothing arriving")
	}
	r.Observe(at(2), lbIP, served(true, 0, time.Time{}))
	r.Observe(at(3), lbIP, dropped(true, 0, time.Time{}, Facts{}))
	r.Observe(at(5), lbIP, dropped(true, 2, at(5), Facts{}))
	// The Service's load balancer IP changes: its decision has the NodePort alone.
	r.Decided(at(6), "shop", "web", []Entry{{port, dropped(true, 9, at(1), Facts{})}})
	wantTotals(t, r, CauseOther, 2, 2, 1)
	if r.Snapshot().Open != 0 {
		t.Error("a removed destination's episode is still open")
	}
	// A Service gone ends its episodes.
	r.Observe(at(7), lbIP, served(true, 0, time.Time{}))
	r.Observe(at(8), lbIP, dropped(true, 0, time.Time{}, Facts{}))
	r.Gone(at(9), "shop", "web")
	if r.Snapshot().Open != 0 || r.Snapshot().Totals[CauseOther].Episodes != 2 {
		t.Errorf("after the Service went: %+v", r.Snapshot())
	}
	if len(r.dests) != 0 {
		t.Errorf("the Service gone is still kept: %v", r.dests)
	}
}

// Where the meter sets a traffic-port checker's probes aside, the clients' latest arrival is what moves an
// episode on: a count grown by probes alone counts nothing, nor keeps the episode open.
func TestCheckerProbesAreNoLoss(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 0, time.Time{}))
	r.Observe(at(1), port, dropped(true, 0, time.Time{}, rolling))
	r.Observe(at(2), port, dropped(true, 2, at(2), rolling))
	r.Observe(at(30), port, dropped(true, 9, at(2), rolling)) // probes every few seconds, no client
	if ep, _ := r.Open(port); ep.Attempts != 2 || !r.Next().Equal(at(2).Add(quiet)) {
		t.Errorf("episode %+v, next %v: the probes counted", ep, r.Next())
	}
	r.Observe(at(31), port, dropped(true, 11, at(31), rolling))
	r.Advance(at(31).Add(quiet))
	wantTotals(t, r, CauseRollout, 30, 4, 1)
}

// The exporter's first read of kube-proxy's rules (or a failed read) changes what decides a drop, not the node:
// a destination the API view counted served and the rules find dropped is no episode; a drop the rules then
// see after serving is one.
func TestSourceChangeIsNoTransition(t *testing.T) {
	r := metered()
	from := func(source string, o Observation) Observation { o.Source = source; return o }
	r.Observe(at(0), port, from("api", served(true, 0, time.Time{})))
	r.Observe(at(1), port, from("rules", dropped(true, 0, time.Time{}, rolling)))
	r.Observe(at(2), port, from("rules", dropped(true, 3, at(2), rolling)))
	if r.Snapshot().Open != 0 {
		t.Fatal("the rules' first read began an episode")
	}
	r.Observe(at(3), port, from("rules", served(true, 3, at(2))))
	r.Observe(at(4), port, from("rules", dropped(true, 3, at(2), rolling)))
	if r.Snapshot().Open != 1 {
		t.Error("a drop the rules saw after serving began no episode")
	}
}

// The rules are read up to a second after the node is told they changed: the drop began at the change, and
// the attempts counted are those since the meter's count then, not since the read. Decisions in between,
// from the rules read before the change, still find the destination forwarded. A count from another watch, no
// count then, or a change after the decision fall back to the decision.
func TestDropBeginsAtTheRulesChange(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 100, at(0)))
	r.Observe(at(1.5), port, served(true, 108, at(1.5)))
	// Told at 1 s (the meter at 104), read at 1.8 s: 9 more attempts arrived meanwhile, 5 after the read.
	o := dropped(true, 113, at(1.7), rolling)
	o.ChangedAt, o.AtChange, o.ChangeWatched = at(1), 104, true
	r.Observe(at(1.8), port, o)
	if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(1)) || ep.Attempts != 9 {
		t.Fatalf("open episode = %+v, %v; want one from the change at 1 s with its 9 attempts", ep, ok)
	}
	r.Observe(at(3), port, dropped(false, 118, at(2.5), rolling))
	r.Advance(at(2.5).Add(quiet))
	wantTotals(t, r, CauseRollout, 1.5, 14, 1)

	for name, change := range map[string]func(*Observation){
		"a change after the decision": func(o *Observation) { o.ChangedAt = at(12) },
		"a count from another watch":  func(o *Observation) { o.AtChange = 200 },
		"no count then":               func(o *Observation) { o.ChangeWatched = false },
	} {
		r := metered()
		r.Observe(at(9.5), port, served(true, 100, at(9.5)))
		o := dropped(true, 113, at(10.7), rolling)
		o.ChangedAt, o.AtChange, o.ChangeWatched = at(10), 104, true
		change(&o)
		r.Observe(at(11), port, o)
		if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(11)) || ep.Attempts != 0 {
			t.Errorf("%s: open episode = %+v, %v; want one from the decision at 11 s, counting from its count", name, ep, ok)
		}
	}

	// Without the meter, the seconds start at the change too.
	u := NewRecorder(quiet)
	u.Node(true, false)
	u.Observe(at(0), port, Observation{InRotation: true})
	u.Observe(at(1.8), port, Observation{Dropped: true, InRotation: true, ChangedAt: at(1)})
	u.Observe(at(4), port, Observation{Dropped: true})
	if got := u.Snapshot().Totals[CauseOther]; got.Seconds != 3 || got.Episodes != 1 {
		t.Errorf("unmetered: %+v, want one episode of 3 s from the change", got)
	}
}

// The health check answered 503 before the rules were read (out of rotation), and the load balancer stopped
// sending before the read, 2 s after the change: the verdict finds no attempt since its own drop (Losing
// false), but the 6 counted since the change were lost. The episode begins at the change, in the decision
// that finds the drop; with nothing counted since the change there is none.
func TestToldDropOutOfRotationLosesBeforeTheRead(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 100, at(0)))
	r.Observe(at(0.5), port, served(false, 102, at(0.5)))
	o := dropped(false, 108, at(1.6), rolling)
	o.Losing, o.ChangedAt, o.AtChange, o.ChangeWatched = false, at(0.6), 102, true
	r.Observe(at(2.6), port, o)
	if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(0.6)) || ep.Attempts != 6 || ep.Cause != CauseRollout {
		t.Fatalf("open episode = %+v, %v; want a rollout from the change at 0.6 s with its 6 attempts", ep, ok)
	}

	n := metered()
	n.Observe(at(0), port, served(false, 100, at(0)))
	o = dropped(false, 100, at(0), rolling)
	o.Losing, o.ChangedAt, o.AtChange, o.ChangeWatched = false, at(0.6), 100, true
	n.Observe(at(2.6), port, o)
	n.Observe(at(3), port, dropped(false, 100, at(0), rolling))
	n.Advance(at(0.6).Add(quiet))
	n.Observe(at(0.6).Add(quiet), port, dropped(false, 100, at(0), rolling))
	if s := n.Snapshot(); s.Open != 0 || s.Episodes.Count != 0 {
		t.Errorf("an episode with nothing lost: %+v", s)
	}
}

// A pod deleted while others serve may stop and leave the slices within one kube-proxy sync: the decision before
// the drop saw its endpoint terminating (still serving, or stopped), the one that finds the drop sees no local
// endpoint at all. That is the rollout the earlier decision told of; without a terminating endpoint before, a
// drop with nothing local left is other (a crash, a readiness failure).
func TestRolloutWhoseEndpointLeftWithTheDrop(t *testing.T) {
	gone := Facts{RemoteReady: 1}
	for _, c := range []struct {
		name   string
		before Facts
		want   Cause
	}{
		{"serving-terminating before", Facts{LocalServingTerminating: true, RemoteReady: 1}, CauseRollout},
		{"stopped before", Facts{LocalStopped: 1, RemoteReady: 1}, CauseRollout},
		{"ready before", Facts{RemoteReady: 1}, CauseOther},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := metered()
			o := served(true, 10, at(0))
			o.Facts = c.before
			r.Observe(at(0), port, o)
			r.Observe(at(1), port, dropped(true, 12, at(1), gone))
			if ep, ok := r.Open(port); !ok || ep.Cause != c.want {
				t.Errorf("episode = %+v, %v; want cause %s", ep, ok, c.want)
			}
		})
	}
	// Found out of rotation, the episode begins at the first loss, with the drop's cause, not the later
	// decision's.
	r := metered()
	o := served(false, 10, at(0))
	o.Facts = Facts{LocalServingTerminating: true, RemoteReady: 1}
	r.Observe(at(0), port, o)
	r.Observe(at(1), port, Observation{Dropped: true, Watched: true, Attempts: 10, LastSeen: at(0), Facts: gone})
	r.Observe(at(2), port, dropped(false, 13, at(2), gone))
	if ep, ok := r.Open(port); !ok || ep.Cause != CauseRollout {
		t.Errorf("late loss: episode = %+v, %v; want cause %s", ep, ok, CauseRollout)
	}
}

// Two decisions read after the same told change, the first finding the destination forwarded, the second
// dropped: the drop came after that change (the rules moved without a change told since), so the episode
// begins at the decision that finds it and counts from its count, not from the change's. Before the change's
// read, decisions on older rules that found it forwarded do not void it (TestDropBeginsAtTheRulesChange).
func TestDropAfterAToldChangeAlreadyReadForwarded(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(true, 40, at(0)))
	change := at(1)
	fwd := served(true, 100, at(2))
	fwd.ChangedAt, fwd.AtChange, fwd.ChangeWatched = change, 50, true
	r.Observe(at(2), port, fwd)
	o := dropped(true, 130, at(3), rolling)
	o.ChangedAt, o.AtChange, o.ChangeWatched = change, 50, true
	r.Observe(at(3), port, o)
	ep, ok := r.Open(port)
	if !ok || !ep.Start.Equal(at(3)) || ep.Attempts != 0 {
		t.Fatalf("episode = %+v, %v; want one from the decision at 3 s with nothing counted yet", ep, ok)
	}
	r.Observe(at(4), port, dropped(true, 135, at(4), rolling))
	if ep, _ := r.Open(port); ep.Attempts != 5 {
		t.Errorf("attempts %d, want the 5 since the decision that found the drop", ep.Attempts)
	}
}

// A drop found out of rotation, not at a told change: the first attempts after it cannot be told lost yet
// (the verdict's Losing needs their source to repeat, a SYN retransmitted a second later). They decide nothing
// until the loss shows; the episode then begins at the drop with every attempt since. Seen on the e2e cluster:
// a rollout lost 80 attempts and the recorder none, having decided at the first 10 that nothing was lost.
func TestLateLossWaitsForTheRetransmission(t *testing.T) {
	r := metered()
	r.Observe(at(0), port, served(false, 800, at(0)))
	r.Observe(at(1), port, Observation{Dropped: true, Watched: true, Attempts: 800, LastSeen: at(0)})
	r.Observe(at(1.1), port, Observation{Dropped: true, Watched: true, Attempts: 810, LastSeen: at(1.05)})
	r.Observe(at(2.1), port, Observation{Dropped: true, Watched: true, Attempts: 860, LastSeen: at(2), Losing: true})
	ep, ok := r.Open(port)
	if !ok || !ep.Start.Equal(at(1)) || ep.Attempts != 60 {
		t.Fatalf("episode = %+v, %v; want one from the drop at 1 s with the 60 attempts since", ep, ok)
	}
	// Attempts that arrive and are never found lost decide, once a loss would have shown, that there is none.
	n := metered()
	n.Observe(at(0), port, served(false, 800, at(0)))
	n.Observe(at(1), port, Observation{Dropped: true, Watched: true, Attempts: 800, LastSeen: at(0)})
	n.Observe(at(1.1), port, Observation{Dropped: true, Watched: true, Attempts: 810, LastSeen: at(1.05)})
	n.Observe(at(4.1), port, Observation{Dropped: true, Watched: true, Attempts: 810, LastSeen: at(1.05)})
	n.Observe(at(5), port, Observation{Dropped: true, Watched: true, Attempts: 812, LastSeen: at(5), Losing: true})
	if ep, ok := n.Open(port); ok {
		t.Errorf("episode %+v after the drop was decided lossless", ep)
	}
}
