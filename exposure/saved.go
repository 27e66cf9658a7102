package exposure

import (
	"maps"
	"slices"
	"time"
)

// Saved is what the state file carries of a Recorder over an exporter restart: the totals, so that the
// counters continue rather than start again, and the open episodes, so that one under way is neither lost
// nor begun twice. Times are wall-clock Unix nanoseconds, as the rest of the state file's.
type Saved struct {
	Totals   map[Cause]Totals `json:"totals"`
	Episodes Histogram        `json:"episodes"`
	Open     []SavedEpisode   `json:"open,omitempty"`
}

// SavedEpisode is one open episode.
type SavedEpisode struct {
	Key         Key     `json:"key"`
	Source      string  `json:"source,omitempty"`
	Cause       Cause   `json:"cause"`
	Start       int64   `json:"start_unix_nano"`
	Metered     bool    `json:"metered,omitempty"`
	Attempts    uint64  `json:"attempts,omitempty"`
	LastAttempt int64   `json:"last_attempt_unix_nano,omitempty"`
	Seconds     float64 `json:"seconds,omitempty"`
}

// Save copies what a restart must carry over.
func (r *Recorder) Save() Saved {
	s := Saved{Totals: maps.Clone(r.totals), Episodes: r.hist}
	s.Episodes.Counts = slices.Clone(r.hist.Counts)
	for _, k := range r.sortedOpen() {
		ep := r.open[k]
		se := SavedEpisode{Key: k, Cause: ep.Cause, Start: ep.Start.UnixNano(), Metered: ep.Metered, Attempts: ep.Attempts,
			Seconds: ep.Seconds}
		if d := r.lookup(k); d != nil {
			se.Source = d.source
		}
		if !ep.LastAttempt.IsZero() {
			se.LastAttempt = ep.LastAttempt.UnixNano()
		}
		s.Open = append(s.Open, se)
	}
	return s
}

// Restore takes over what an earlier process saved, before the first decision. Causes it does not know are
// dropped (a file written by another version). An episode restored resumes when fresh (the file is younger
// than the state file's horizon): its destination counts as dropped and in rotation until the first decision says
// otherwise, which ends it then. Otherwise nobody looked for longer than an episode's quiet end: it ends as
// it was counted.
func (r *Recorder) Restore(s Saved, fresh bool) {
	for c, t := range s.Totals {
		if _, ok := r.totals[c]; ok {
			r.totals[c] = t
		}
	}
	if len(s.Episodes.Counts) == len(Buckets)+1 {
		r.hist = s.Episodes
		r.hist.Counts = slices.Clone(s.Episodes.Counts)
	}
	for _, se := range s.Open {
		if _, ok := r.totals[se.Cause]; !ok || se.Start == 0 {
			continue
		}
		ep := &Episode{Cause: se.Cause, Start: time.Unix(0, se.Start), Metered: se.Metered, Attempts: se.Attempts,
			Seconds: se.Seconds, rebase: true}
		if se.LastAttempt != 0 {
			ep.LastAttempt = time.Unix(0, se.LastAttempt)
		}
		if !fresh {
			t := r.totals[ep.Cause]
			t.Episodes++
			r.totals[ep.Cause] = t
			r.hist.observe(ep.Seconds)
			continue
		}
		if _, dup := r.open[se.Key]; dup {
			continue
		}
		r.open[se.Key] = ep
		svc := serviceOf(se.Key)
		r.dests[svc] = append(r.dests[svc], destEntry{key: se.Key, dest: dest{dropped: true, in: true, programmed: true,
			source: se.Source, droppedAt: ep.Start, decided: true}})
	}
}
