package arrivals

import "time"

// Run is one destination's arrivals as an earlier meter counted them: what Meter.Restore seeds a destination
// with, so that a restarted exporter continues a run of arrivals instead of starting it again at zero (and
// waiting for a whole grace window before it can tell that attempts keep arriving). Times are wall-clock.
type Run struct {
	Attempts                                       uint64
	FirstSeen, LastSeen, ActiveSince, WatchedSince time.Time
}

// Restore seeds destinations with runs an earlier meter counted (the exporter's state file). A run is applied
// when Watch first adds its destination, as if the meter had counted it: the counts go on from it, and an
// attempt arriving within QuietPeriod of its LastSeen continues the run (ActiveSince stays). A destination
// already watched keeps its own counts, which are newer. What the next Watch does not add is forgotten: the
// Services it belonged to are gone. A run without attempts, or without a valid destination, is left out.
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
			t.restored = map[Dest]runCount{}
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
		t.restored[d] = rc
	}
}

// takeRestored returns the restored run of a destination Watch adds, once.
func (t *tally) takeRestored(d Dest) (runCount, bool) {
	rc, ok := t.restored[d]
	if ok {
		delete(t.restored, d)
	}
	return rc, ok
}
