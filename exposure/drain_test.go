package exposure

import (
	"math"
	"testing"
	"time"
)

// lbDecision is one decision of the NodePort of a LoadBalancer Service whose health check node port the model
// probes: ready local endpoints in the API view, the latest probe's answer (503 or 200) and when it was sent,
// the latest checker probe the meter counted at the port.
type lbDecision struct {
	o Observation
}

func lbServed(in bool, n uint64, last time.Time, ready int) lbDecision {
	o := served(in, n, last)
	o.Facts.LocalReady = ready
	return lbDecision{o}
}

func lbDropped(in bool, n uint64, last time.Time) lbDecision {
	return lbDecision{dropped(in, n, last, rolling)}
}

func (d lbDecision) probed(unavailable bool, at, checkerLast time.Time) Observation {
	d.o.Health = Health{Asked: true, Unavailable: unavailable, ProbedAt: at, ProbesWatched: true, ProbeLast: checkerLast}
	return d.o
}

func wantDrains(t *testing.T, r *Recorder, want ...float64) {
	t.Helper()
	s := r.Snapshot()
	sum := 0.0
	for _, w := range want {
		sum += w
	}
	if s.Drains.Count != uint64(len(want)) || math.Abs(s.Drains.Sum-sum) > 1e-6 {
		t.Errorf("drains = %d, sum %.3f s; want %v", s.Drains.Count, s.Drains.Sum, want)
	}
	var svc Histogram
	for _, st := range s.Services {
		if st.Namespace == "shop" && st.Name == "web" {
			svc = st.Drains
		}
	}
	if svc.Count != s.Drains.Count || svc.Sum != s.Drains.Sum {
		t.Errorf("shop/web's drains = %+v, the node's %+v: want the same", svc, s.Drains)
	}
}

// fallbackDrain is a rollout under kube-proxy's serving-terminating fallback with a load balancer slower than
// it: the pod terminates at 1 s (no ready local endpoint in the API view, kube-proxy forwards to it still),
// the model's probe sent at 1.2 s answers 503, the pod stops and the rules drop at 2 s, attempts keep arriving
// until 4.5 s while the checker probes every second. The first 503 is dated by the API's change at 1 s (the
// probe at 0.5 s answered 200, before it): a drain of 3.5 s.
func fallbackDrain(r *Recorder) {
	r.Observe(at(0), port, lbServed(true, 100, at(0), 1).probed(false, at(0), at(0)))
	r.Observe(at(0.6), port, lbServed(true, 105, at(0.6), 1).probed(false, at(0.5), at(0.5)))
	r.Observe(at(1), port, lbServed(true, 110, at(1), 0).probed(false, at(0.5), at(0.5)))
	r.Observe(at(1.3), port, lbServed(false, 112, at(1.3), 0).probed(true, at(1.2), at(1)))
	r.Observe(at(2), port, lbDropped(false, 120, at(2)).probed(true, at(1.2), at(2)))
	r.Observe(at(3), port, lbDropped(false, 130, at(3)).probed(true, at(2.9), at(3)))
}

func TestDrainFromTheFirst503(t *testing.T) {
	r := metered()
	fallbackDrain(r)
	if ep, ok := r.Open(port); !ok || !ep.Start.Equal(at(2)) || !ep.drain.From.Equal(at(1)) {
		t.Fatalf("open episode = %+v, %v; want one from the drop at 2 s, its drain from the 503 at 1 s", ep, ok)
	}
	r.Observe(at(4.6), port, lbDropped(false, 135, at(4.5)).probed(true, at(2.9), at(4)))
	r.Advance(at(4.5).Add(quiet))
	wantTotals(t, r, CauseRollout, 2.5, 15, 1)
	wantDrains(t, r, 3.5)
	if h := r.Snapshot().Drains.CumulativeOf(DrainBuckets); h[3] != 0 || h[5] != 1 {
		t.Errorf("drain buckets = %v, want the 3.5 s drain in the 5 s bucket", h)
	}
	s := r.Snapshot().Services
	if len(s) != 1 || s[0].Totals[CauseRollout].Attempts != 15 || s[0].Totals[CauseRollout].Episodes != 1 || len(s[0].Totals) != 1 {
		t.Errorf("services = %+v, want shop/web's one rollout of 15 attempts", s)
	}
}

// The bounds of the first 503: a probe that answered 200 after the API's change (kube-proxy had not synced yet)
// moves it later; the first probe that answered 503, or the drop, is the latest it can be.
func TestDrainFirst503Bounds(t *testing.T) {
	t.Run("a probe answered 200 after the API's change", func(t *testing.T) {
		r := metered()
		r.Observe(at(0), port, lbServed(true, 100, at(0), 1).probed(false, at(0), at(0)))
		r.Observe(at(1), port, lbServed(true, 110, at(1), 0).probed(false, at(0), at(0)))
		r.Observe(at(1.5), port, lbServed(true, 112, at(1.5), 0).probed(false, at(1.4), at(1)))
		r.Observe(at(2), port, lbDropped(true, 120, at(2)).probed(false, at(1.4), at(2)))
		r.Observe(at(3), port, lbDropped(false, 130, at(3)).probed(true, at(2.1), at(3)))
		r.Advance(at(3).Add(quiet))
		wantDrains(t, r, 1.6)
	})
	t.Run("no change seen in the API: the first 503", func(t *testing.T) {
		r := metered()
		r.Observe(at(0), port, lbServed(true, 100, at(0), 0).probed(false, at(0), at(0))) // first seen not ready
		r.Observe(at(1.5), port, lbServed(false, 112, at(1.5), 0).probed(true, at(1.2), at(1)))
		r.Observe(at(2), port, lbDropped(false, 120, at(2)).probed(true, at(1.2), at(2)))
		r.Observe(at(3), port, lbDropped(false, 130, at(3)).probed(true, at(1.2), at(3)))
		r.Advance(at(3).Add(quiet))
		wantDrains(t, r, 1.8)
	})
	t.Run("the drop before any 503 was read", func(t *testing.T) {
		r := metered()
		r.Observe(at(0), port, lbServed(true, 100, at(0), 1).probed(false, at(0), at(0)))
		r.Observe(at(2), port, lbDropped(true, 120, at(2)).probed(false, at(0), at(2)))
		r.Observe(at(2.5), port, lbDropped(false, 125, at(2.5)).probed(true, at(2.2), at(2.4)))
		r.Observe(at(5), port, lbDropped(false, 130, at(4.5)).probed(true, at(2.2), at(5)))
		r.Advance(at(4.5).Add(quiet))
		wantDrains(t, r, 2.5)
	})
}

// Where the node model did not see what the drain is made of, nothing is observed: no checker probing the
// health check node port after the 503, the meter off, or blind at a decision, no health check node port, no
// 503 read at all, no attempt after the 503.
func TestDrainNotMeasured(t *testing.T) {
	cases := map[string]func(r *Recorder){
		"no checker probes the health check node port": func(r *Recorder) {
			for _, d := range []struct {
				at float64
				o  Observation
			}{
				{0, lbServed(true, 100, at(0), 1).probed(false, at(0), time.Time{})},
				{1, lbServed(true, 110, at(1), 0).probed(false, at(0), time.Time{})},
				{2, lbDropped(true, 120, at(2)).probed(true, at(1.5), time.Time{})},
				{3, lbDropped(false, 130, at(3)).probed(true, at(1.5), time.Time{})},
			} {
				r.Observe(at(d.at), port, d.o)
			}
		},
		"checkers seen only before the 503": func(r *Recorder) {
			r.Observe(at(0), port, lbServed(true, 100, at(0), 1).probed(false, at(0), at(0)))
			r.Observe(at(1), port, lbServed(true, 110, at(1), 0).probed(false, at(0), at(0.5)))
			r.Observe(at(2), port, lbDropped(true, 120, at(2)).probed(true, at(1.5), at(0.5)))
			r.Observe(at(3), port, lbDropped(false, 130, at(3)).probed(true, at(1.5), at(0.5)))
		},
		"the meter blind at a decision": func(r *Recorder) {
			fallbackDrain(r)
			o := lbDropped(false, 0, time.Time{}).probed(true, at(2.9), at(3.5))
			o.Watched = false
			r.Observe(at(3.5), port, o)
			r.Observe(at(4.2), port, lbDropped(false, 135, at(4.1)).probed(true, at(2.9), at(4)))
		},
		"the health check port unwatched": func(r *Recorder) {
			fallbackDrain(r)
			o := lbDropped(false, 135, at(4.1)).probed(true, at(2.9), time.Time{})
			o.Health.ProbesWatched = false
			r.Observe(at(4.2), port, o)
		},
		"no health check node port": func(r *Recorder) {
			r.Observe(at(0), port, lbServed(true, 100, at(0), 1).o)
			r.Observe(at(1), port, lbServed(true, 110, at(1), 0).o)
			r.Observe(at(2), port, lbDropped(true, 120, at(2)).o)
			r.Observe(at(3), port, lbDropped(true, 130, at(3)).o)
		},
		"never a 503 (the probe refused, kube-proxy down)": func(r *Recorder) {
			refused := func(d lbDecision, checker float64) Observation {
				o := d.probed(false, time.Time{}, at(checker))
				return o
			}
			r.Observe(at(0), port, lbServed(true, 100, at(0), 1).probed(false, at(0), at(0)))
			r.Observe(at(2), port, refused(lbDropped(true, 120, at(2)), 2))
			r.Observe(at(3), port, refused(lbDropped(true, 130, at(3)), 3))
		},
		"nothing arrived after the 503": func(r *Recorder) {
			r.Observe(at(0), port, lbServed(true, 100, at(0.5), 1).probed(false, at(0), at(0)))
			r.Observe(at(1), port, lbServed(true, 100, at(0.5), 0).probed(false, at(0), at(1)))
			r.Observe(at(2), port, lbDropped(true, 100, at(0.5)).probed(true, at(1.5), at(2)))
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			r := metered()
			run(r)
			r.Advance(at(10).Add(quiet))
			if s := r.Snapshot(); s.Open != 0 || s.Totals[CauseRollout].Episodes+s.Totals[CauseOther].Episodes != 1 {
				t.Fatalf("want one episode ended, got %+v", s)
			}
			wantDrains(t, r)
		})
	}
	t.Run("the meter off", func(t *testing.T) {
		r := NewRecorder(quiet)
		r.Node(true, false)
		off := func(d lbDecision) Observation {
			d.o.Watched, d.o.Attempts, d.o.LastSeen, d.o.Losing = false, 0, time.Time{}, false
			o := d.probed(d.o.Dropped, at(1.5), time.Time{})
			o.Health.ProbesWatched = false
			return o
		}
		r.Observe(at(0), port, off(lbServed(true, 0, time.Time{}, 1)))
		r.Observe(at(1), port, off(lbServed(true, 0, time.Time{}, 0)))
		r.Observe(at(2), port, off(lbDropped(true, 0, time.Time{})))
		r.Observe(at(5), port, off(lbDropped(false, 0, time.Time{})))
		if s := r.Snapshot(); s.Totals[CauseRollout].Episodes != 1 {
			t.Fatalf("want one unmetered episode ended, got %+v", s)
		}
		wantDrains(t, r)
	})
}

// An exporter restarted in the middle of an episode carries its drain over in the state file: the first 503
// and the checker's probes seen before the restart, the last attempt after it.
func TestDrainAcrossARestart(t *testing.T) {
	r := metered()
	fallbackDrain(r)
	saved := throughFile(t, r)
	n := metered()
	n.Restore(saved, true)
	// The new meter's count starts again; its latest arrival is its own.
	n.Observe(at(5), port, lbDropped(false, 3, at(4.6)).probed(true, at(4.8), at(4.9)))
	n.Observe(at(6), port, lbDropped(false, 4, at(5.2)).probed(true, at(4.8), at(5.9)))
	n.Advance(at(5.2).Add(quiet))
	wantDrains(t, n, 4.2)
	// A second restart keeps the histograms, the node's and the Service's.
	ended := throughFile(t, n)
	again := metered()
	again.Restore(ended, true)
	wantDrains(t, again, 4.2)
	if s := again.Snapshot().Services; len(s) != 1 || s[0].Totals[CauseRollout].Episodes != 1 {
		t.Errorf("restored services = %+v", s)
	}
	// A stale file ends the episode as it was counted: its drain to the last attempt before the restart.
	stale := metered()
	stale.Restore(saved, false)
	wantDrains(t, stale, 2)
}

// A Service's stats are kept from its first episode until it is gone, and the load balancer's configured check
// only for such a Service.
func TestServiceStatsLifetime(t *testing.T) {
	r := metered()
	r.Check("shop", "web", LBCheck{Interval: time.Second, Threshold: 3})
	if s := r.Snapshot().Services; len(s) != 0 {
		t.Fatalf("services before any episode: %+v", s)
	}
	fallbackDrain(r)
	r.Check("shop", "web", LBCheck{Interval: time.Second, Threshold: 3, Observed: time.Second})
	s := r.Snapshot().Services
	if len(s) != 1 || s[0].Check.Window() != 3*time.Second || s[0].Check.Observed != time.Second {
		t.Fatalf("services = %+v, want shop/web's check of 3 s", s)
	}
	r.Gone(at(5), "shop", "web")
	if s := r.Snapshot(); len(s.Services) != 0 || s.Totals[CauseRollout].Episodes != 1 {
		t.Errorf("after the Service is gone: %+v", s)
	}
}
