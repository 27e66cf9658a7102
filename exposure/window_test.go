package exposure

import (
	"encoding/json"
	"testing"
)

func decide(r *Recorder, s float64, o Observation) {
	r.Decided(at(s), port.Namespace, port.Service, []Entry{{Key: port, Observation: o}})
}

func windowsOf(r *Recorder) map[Cause]uint64 {
	for _, w := range r.Snapshot().Windows {
		if w.Namespace == port.Namespace && w.Name == port.Service {
			return w.Attempts
		}
	}
	return nil
}

func withFacts(o Observation, f Facts) Observation {
	o.Facts = f
	return o
}

func TestWindowOfOrder(t *testing.T) {
	for _, tc := range []struct {
		f    Facts
		want Cause
		ok   bool
	}{
		{Facts{}, "", false},
		{Facts{RemoteReady: 3, LocalReady: 1}, "", false},
		{Facts{Terminating: 1}, CauseRollout, true},
		{Facts{LocalStopped: 1}, CauseRollout, true},
		{Facts{LocalServingTerminating: true}, CauseRollout, true},
		{Facts{Cordoned: true, Terminating: 2}, CauseDrain, true},
		{Facts{Deleting: true, Cordoned: true, Terminating: 2}, CauseNodeDeleting, true},
	} {
		if c, ok := WindowOf(tc.f); c != tc.want || ok != tc.ok {
			t.Errorf("WindowOf(%+v) = %q, %v; want %q, %v", tc.f, c, ok, tc.want, tc.ok)
		}
	}
}

// A pod of the Service deleted on another node opens its rollout window here, though this node serves
// throughout: what arrives from the decision before the window opens to the decision after it closes counts,
// nothing outside it.
func TestRolloutWindowCountsServedAttempts(t *testing.T) {
	r := metered()
	elsewhere := Facts{Terminating: 1, RemoteReady: 2, LocalReady: 1}
	decide(r, 0, served(true, 100, at(0)))
	decide(r, 1, served(true, 110, at(1)))
	if w := windowsOf(r); w != nil {
		t.Fatalf("no window open, counted %v", w)
	}
	decide(r, 2, withFacts(served(true, 130, at(2)), elsewhere))
	decide(r, 3, withFacts(served(true, 150, at(3)), elsewhere))
	decide(r, 4, served(true, 170, at(4))) // the pod gone: what arrived since the decision before was in its window
	decide(r, 5, served(true, 200, at(5)))
	if w := windowsOf(r); len(w) != 1 || w[CauseRollout] != 60 {
		t.Errorf("windows = %v, want 60 rollout attempts", w)
	}
	if len(r.Snapshot().Services) != 0 {
		t.Error("a window without an episode made an episode's Service")
	}
}

// On a cordoned node the drain window counts every attempt, served and lost, and the episode's lost attempts
// are in it even once the cordon is lifted while the load balancer still sends: the ratio never passes 1.
func TestDrainWindowHoldsTheEpisodesLosses(t *testing.T) {
	r := metered()
	cordoned := Facts{Cordoned: true, RemoteReady: 2}
	decide(r, 0, withFacts(served(true, 100, at(0)), cordoned))
	decide(r, 1, withFacts(served(true, 120, at(1)), cordoned))
	decide(r, 2, dropped(true, 130, at(1.9), cordoned))
	decide(r, 3, dropped(true, 140, at(2.9), Facts{RemoteReady: 2})) // uncordoned, still sent to
	decide(r, 4, dropped(true, 150, at(3.9), Facts{RemoteReady: 2}))
	lost := r.Snapshot().Totals[CauseDrain].Attempts
	if lost == 0 {
		t.Fatal("the drain episode counted no lost attempt")
	}
	w := windowsOf(r)
	if w[CauseDrain] != 50 || len(w) != 1 {
		t.Errorf("windows = %v, want 50 drain attempts (100 to 150)", w)
	}
	if lost > w[CauseDrain] {
		t.Errorf("lost %d > window attempts %d", lost, w[CauseDrain])
	}
	// The episode over (quiet period passed), the node forwards and nothing opens a window: nothing more counts.
	r.Advance(at(4).Add(quiet))
	decide(r, 200, served(true, 300, at(200)))
	decide(r, 201, served(true, 400, at(201)))
	if got := windowsOf(r)[CauseDrain]; got != 50+150 {
		// 150 to 300 arrived between the last decision in the episode and the first after it: in the window.
		t.Errorf("drain window attempts = %d, want 200", got)
	}
}

// The meter's first count at a destination is a base, not attempts; a count that restarts (the meter watched
// the destination anew) counts from zero; a decision the meter does not count at counts nothing and the next
// count is a base again.
func TestWindowBaseAndRestarts(t *testing.T) {
	r := metered()
	open := Facts{Terminating: 1}
	decide(r, 0, withFacts(served(true, 1000, at(0)), open))
	if w := windowsOf(r); w != nil {
		t.Fatalf("the first count made attempts: %v", w)
	}
	decide(r, 1, withFacts(served(true, 1010, at(1)), open))
	decide(r, 2, withFacts(served(true, 5, at(2)), open))
	decide(r, 3, withFacts(Observation{InRotation: true}, open))
	decide(r, 4, withFacts(served(true, 900, at(4)), open))
	decide(r, 5, withFacts(served(true, 901, at(5)), open))
	if got := windowsOf(r)[CauseRollout]; got != 10+5+1 {
		t.Errorf("rollout window attempts = %d, want 16", got)
	}
	r.Gone(at(6), port.Namespace, port.Service)
	if w := r.Snapshot().Windows; len(w) != 0 {
		t.Errorf("a gone Service kept its windows: %v", w)
	}
}

// The windows' attempts go through the state file with the totals: after a restart the success ratio's
// denominator continues with its numerator, and a window still open counts on from the new meter's first count.
func TestWindowsAcrossRestart(t *testing.T) {
	r := metered()
	open := Facts{Cordoned: true, RemoteReady: 2}
	decide(r, 0, withFacts(served(true, 100, at(0)), open))
	decide(r, 1, withFacts(served(true, 140, at(1)), open))
	saved := throughFile(t, r)
	saved.Windows = append(saved.Windows, ServiceWindows{Namespace: "other", Name: "svc", Attempts: map[Cause]uint64{"unknown": 5}})
	n := metered()
	n.Restore(saved, true)
	if got := windowsOf(n); len(got) != 1 || got[CauseDrain] != 40 {
		t.Fatalf("restored windows = %v, want 40 drain attempts", got)
	}
	if len(n.Snapshot().Windows) != 1 {
		t.Errorf("a cause this version does not know was restored: %+v", n.Snapshot().Windows)
	}
	decide(n, 10, withFacts(served(true, 7, at(10)), open)) // the new meter's first count: a base
	decide(n, 11, withFacts(served(true, 17, at(11)), open))
	if got := windowsOf(n)[CauseDrain]; got != 50 {
		t.Errorf("drain window attempts after the restart = %d, want 40 + 10", got)
	}
}

// throughFile is what r saves, as the state file carries it (JSON there and back).
func throughFile(t *testing.T, r *Recorder) Saved {
	t.Helper()
	b, err := json.Marshal(r.Save())
	if err != nil {
		t.Fatal(err)
	}
	var saved Saved
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	return saved
}
