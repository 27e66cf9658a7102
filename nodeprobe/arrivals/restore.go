package arrivals

import (
	"slices"
	"time"
)

// Run is one destination's arrivals as an earlier meter counted them: what Meter.Restore seeds a destination
// with, so that a restarted exporter continues a run of arrivals instead of starting it again at zero (and
// waiting for a whole grace window before it can tell that attempts keep arriving). Times are wall-clock.
type Run struct {
	Attempts                                       uint64
	FirstSeen, LastSeen, ActiveSince, WatchedSince time.Time
	// Told: the earlier meter told checkers from clients at the destination (a NodePort whose sources it set
	// aside). Then Checkers are the sources it had proven (their clocks), and Clients the clients' repeated
	// arrivals: a restarted meter takes those sources for checkers at once, and reads only Clients of the run
	// as lost attempts. Without it the whole run counts as repeated, a client's.
	Told     bool
	Checkers []CheckerSource
	Clients  RepeatCount
	// Owner is whose traffic the run was (DestCount.Owner): it is applied only to a destination Watch gives
	// the same owner (Watch.Owners), or no owner. A Service that got the destination while no meter counted
	// starts afresh, not with the checkers and clients of the one before. Empty: not known, applied.
	Owner string
}

// Restore seeds destinations with runs an earlier meter counted (the exporter's state file). A run is applied
// when Watch first adds its destination, as if the meter had counted it: the counts go on from it, and an
// attempt arriving within QuietPeriod of its LastSeen continues the run (ActiveSince stays). A destination
// already watched keeps its own counts, which are newer. What the next Watch does not add, or adds for
// another owner (Watch.Owners), is forgotten: the Services it belonged to are gone. A run without attempts, or without a valid destination, is left out.
func (m *Meter) Restore(runs map[Dest]Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tally.restore(runs)
}

// restore keeps runs for setWatch to apply.
func (t *tally) restore(runs map[Dest]Run) {
	for d, r := range runs {
		d.Addr = d.Addr.Unmap().WithZone("")
		if r.Attempts == 0 || r.LastSeen.IsZero() || !d.Addr.IsValid() || d.Port == 0 {
			continue
		}
		if j, ok := t.idx[d]; ok && j >= 0 {
			continue // watched already: its own count is newer
		}
		if t.restored == nil {
			t.restored = map[Dest]restoredRun{}
		}
		rc := runCount{n: r.Attempts, first: t.clk.ns(r.FirstSeen), last: t.clk.ns(r.LastSeen),
			active: t.clk.ns(r.ActiveSince), watchedSince: t.clk.ns(r.WatchedSince)}
		if rc.first == 0 || rc.first > rc.last {
			rc.first = rc.last
		}
		if rc.active == 0 || rc.active > rc.last || rc.active < rc.first {
			rc.active = rc.last // nothing says how long the run lasted before its latest attempt
		}
		if rc.watchedSince == 0 || rc.watchedSince > rc.first {
			rc.watchedSince = rc.first
		}
		kept := restoredRun{run: rc, told: r.Told, owner: r.Owner}
		if r.Told {
			if c := r.Clients; c.Attempts > 0 && !c.LastSeen.IsZero() {
				kept.clients = runCount{n: min(c.Attempts, rc.n), first: t.clk.ns(c.ActiveSince), last: t.clk.ns(c.LastSeen),
					active: t.clk.ns(c.ActiveSince)}
				if kept.clients.active == 0 || kept.clients.active > kept.clients.last {
					kept.clients.first, kept.clients.active = kept.clients.last, kept.clients.last
				}
			}
			for _, ch := range r.Checkers {
				if ch.Addr.IsValid() && ch.Interval >= minCadence && ch.Interval <= maxCadence && !ch.LastSeen.IsZero() &&
					len(kept.checkers) < maxRestoredCheckers {
					kept.checkers = append(kept.checkers, ch)
				}
			}
		}
		t.restored[d] = kept
	}
}

// maxRestoredCheckers bounds the clocks a destination takes over from an earlier meter (its state file): one
// source's two clocks, or two sources'.
const maxRestoredCheckers = maxClocks

// restoredRun is a destination's run an earlier meter counted, with what it told of its sources.
type restoredRun struct {
	run, clients runCount
	told         bool
	checkers     []CheckerSource
	owner        string
}

// takeRestored returns the restored run of a destination Watch adds, once.
func (t *tally) takeRestored(d Dest) (restoredRun, bool) {
	rc, ok := t.restored[d]
	if ok {
		delete(t.restored, d)
	}
	return rc, ok
}

// restoredSources are the checkers an earlier meter proved at a NodePort, kept again as proven: their next
// probes tick their clocks (or, off their phase, begin new ones within the checker's tolerance), so a
// restarted meter does not take them for clients while they prove themselves again. The state file does not say
// whether one proved a clock or a spread, so either keeps it (sourceCadence.spread).
func (t *tally) restoredSources(r restoredRun) *destSources {
	if t.cfg.CheckerSources <= 0 || len(r.checkers) == 0 {
		return nil
	}
	d := &destSources{cadence: true, bands: !t.cfg.noBands}
	for _, ch := range r.checkers {
		tick := ch.LastTick
		if tick.IsZero() {
			tick = ch.LastSeen
		}
		last, ref := t.clk.ns(tick), int64(ch.Interval)
		i := slices.IndexFunc(d.list, func(s sourceCadence) bool { return s.addr == ch.Addr })
		if i < 0 {
			if len(d.list) >= t.cfg.CheckerSources {
				continue
			}
			d.list = append(d.list, sourceCadence{addr: ch.Addr, checker: true, score: maxSteady, first: last, until: last})
			i = len(d.list) - 1
		}
		s := &d.list[i]
		s.spread = d.bands
		k := s.clockPlace()
		if s.clocks[k].ref != 0 {
			continue
		}
		s.clocks[k] = clock{start: last - checkerSteady*ref, prev: last - ref, last: last, ref: ref, steady: maxSteady}
		s.last, s.lastNew = max(s.last, last), max(s.lastNew, last)
	}
	return d
}
