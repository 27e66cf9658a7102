package exposure

import (
	"testing"
	"time"
)

// episode runs one metered rollout episode at k from start: dropped at start, n attempts lost within a second,
// ended by the quiet period.
func episode(r *Recorder, k Key, start time.Time, base, n uint64) {
	r.Observe(start.Add(-time.Second), k, served(true, base, start.Add(-time.Second)))
	r.Observe(start, k, dropped(true, base, start.Add(-time.Second), rolling))
	r.Observe(start.Add(time.Second), k, dropped(true, base+n, start.Add(time.Second), rolling))
	r.Advance(start.Add(time.Second + quiet))
	r.Observe(start.Add(time.Second+quiet), k, served(true, base+n, start.Add(time.Second)))
}

// An ended episode is kept with what an Event says of it: its destination, cause, times, attempts and seconds.
func TestFinishedKeepsTheEpisode(t *testing.T) {
	r := metered()
	if got, oldest := r.FinishedAfter(0); got != nil || oldest != 0 || r.LastFinished() != 0 {
		t.Fatalf("before any episode: %v, oldest %d", got, oldest)
	}
	episode(r, port, at(10), 100, 7)
	got, oldest := r.FinishedAfter(0)
	if len(got) != 1 || oldest != 1 {
		t.Fatalf("FinishedAfter(0) = %+v, oldest %d; want the one episode", got, oldest)
	}
	f := got[0]
	if f.Seq != 1 || f.Key != port || f.Cause != CauseRollout || !f.Start.Equal(at(10)) || !f.End.Equal(at(11).Add(quiet)) ||
		!f.AttemptsCounted || f.Attempts != 7 || f.Seconds != 1 || f.LBDrainSeconds != nil || f.RecommendedPreStopSeconds != 0 {
		t.Errorf("finished = %+v", f)
	}
	if got, _ := r.FinishedAfter(1); len(got) != 0 {
		t.Errorf("FinishedAfter(1) = %+v, want none", got)
	}
}

// The ring keeps the latest FinishedRing episodes: a reader behind them gets what is kept and learns from the
// oldest number what it missed.
func TestFinishedRingIsBounded(t *testing.T) {
	r := metered()
	n := FinishedRing + 10
	for i := range n {
		episode(r, port, at(float64(i)*1000), uint64(i)*10, 1+uint64(i%3))
	}
	if r.LastFinished() != uint64(n) {
		t.Fatalf("LastFinished = %d, want %d", r.LastFinished(), n)
	}
	got, oldest := r.FinishedAfter(0)
	if len(got) != FinishedRing || oldest != 11 || got[0].Seq != 11 || got[len(got)-1].Seq != uint64(n) {
		t.Fatalf("FinishedAfter(0): %d kept, oldest %d, first %d; want %d from 11", len(got), oldest, got[0].Seq, FinishedRing)
	}
	for i, f := range got {
		if f.Seq != uint64(11+i) || !f.Start.Equal(at(float64(f.Seq-1)*1000)) {
			t.Fatalf("entry %d = seq %d from %v: out of order or overwritten wrongly", i, f.Seq, f.Start)
		}
	}
	if got, _ := r.FinishedAfter(uint64(n - 3)); len(got) != 3 || got[0].Seq != uint64(n-2) {
		t.Errorf("FinishedAfter(n-3) = %d entries, want the last 3", len(got))
	}
}

// An episode whose load balancer's drain was measured carries it, and the preStop it recommends: the drain
// rounded up to whole seconds plus prestop.MarginSeconds.
func TestFinishedCarriesTheMeasuredDrain(t *testing.T) {
	r := metered()
	fallbackDrain(r)
	r.Observe(at(4.6), port, lbDropped(false, 135, at(4.5)).probed(true, at(2.9), at(4)))
	r.Advance(at(4.5).Add(quiet))
	got, _ := r.FinishedAfter(0)
	if len(got) != 1 {
		t.Fatalf("%d ended episodes, want 1", len(got))
	}
	f := got[0]
	if f.LBDrainSeconds == nil || *f.LBDrainSeconds != 3.5 || f.RecommendedPreStopSeconds != 9 || f.Attempts != 15 ||
		!f.LastAttempt.Equal(at(4.5)) {
		t.Errorf("finished = %+v (drain %v), want the 3.5 s drain, a preStop of 9 s, 15 attempts", f, f.LBDrainSeconds)
	}
}

// A restart carries over the ended episodes no reader took: those after the last number a reader asked after.
// The new process serves them numbered from 1, in the order they ended, through a JSON round trip of the state
// file; a file older than the quiet period carries none, and neither does one whose reader took them all.
func TestFinishedAcrossRestart(t *testing.T) {
	r := metered()
	for i := range 5 {
		episode(r, port, at(float64(i)*1000), uint64(i)*10, 1+uint64(i))
	}
	r.FinishedAfter(0)
	r.FinishedAfter(3) // the reader is done with 1 to 3
	s := throughFile(t, r)
	if len(s.Finished) != 2 || s.Finished[0].Seq != 4 || s.Finished[1].Seq != 5 {
		t.Fatalf("saved %+v, want episodes 4 and 5", s.Finished)
	}

	back := metered()
	back.Restore(s, true)
	got, oldest := back.FinishedAfter(0)
	if len(got) != 2 || oldest != 1 || back.LastFinished() != 2 {
		t.Fatalf("restored: %+v, oldest %d, last %d; want two episodes numbered 1 and 2", got, oldest, back.LastFinished())
	}
	for i, f := range got {
		want := s.Finished[i]
		want.Seq = uint64(i + 1)
		if f.Seq != want.Seq || f.Key != want.Key || f.Cause != want.Cause || !f.Start.Equal(want.Start) ||
			!f.End.Equal(want.End) || f.Attempts != want.Attempts || f.Attempts != uint64(4+i) {
			t.Errorf("restored %d = %+v, want %+v", i, f, want)
		}
	}
	episode(back, port, at(9000), 500, 1)
	if got, _ := back.FinishedAfter(2); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("the first episode after the restart: %+v, want number 3", got)
	}

	stale := metered()
	stale.Restore(s, false)
	if got, _ := stale.FinishedAfter(0); len(got) != 0 {
		t.Errorf("restored from a file older than the quiet period: %+v, want none", got)
	}
	r.FinishedAfter(5)
	if s := throughFile(t, r); len(s.Finished) != 0 {
		t.Errorf("saved after the reader took every episode: %+v", s.Finished)
	}
}
