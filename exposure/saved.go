package exposure

import (
	"maps"
	"slices"
	"time"
)

// Saved is what the state file carries of a Recorder over an exporter restart: the totals and the attempts in
// rollout and drain windows, so that the counters continue rather than start again (the success ratio's
// numerator and denominator both), and the open episodes, so that one under way is neither lost nor begun
// twice. Times are wall-clock Unix nanoseconds, as the rest of the state file's.
type Saved struct {
	Totals   map[Cause]Totals `json:"totals"`
	Episodes Histogram        `json:"episodes"`
	Open     []SavedEpisode   `json:"open,omitempty"`
	// Drains is the measured drains' histogram; Services the Services' stats (their load balancer's check is
	// read anew).
	Drains   Histogram      `json:"drains,omitzero"`
	Services []SavedService `json:"services,omitempty"`
	// Windows is what arrived in each Service's rollout and drain windows (window.go). A window open at the
	// restart counts again from the new meter's first count: what arrived between the last decision before and
	// that count is no one's, as at any first count.
	Windows []ServiceWindows `json:"windows,omitempty"`
	// Finished is the ended episodes no reader took yet (FinishedAfter), oldest first: a restart before the
	// Event writer's next poll would otherwise lose their Events. They are served again under the new
	// process's instance and numbers; the writer skips an Event it wrote already (its name is the episode's).
	Finished []Finished `json:"finished,omitempty"`
}

// SavedService is one Service's stats.
type SavedService struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Totals    map[Cause]Totals `json:"totals"`
	Drains    Histogram        `json:"drains,omitzero"`
}

// SavedDrain is what an open episode keeps of its load balancer's reaction (drain.go).
type SavedDrain struct {
	From        int64 `json:"from_unix_nano"`
	Unavailable bool  `json:"unavailable,omitempty"`
	Probed      bool  `json:"probed,omitempty"`
	LastClient  int64 `json:"last_client_unix_nano,omitempty"`
	Blind       bool  `json:"blind,omitempty"`
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
	// Drain: the Service's health check node port was asked when it began.
	Drain *SavedDrain `json:"drain,omitempty"`
}

// Save copies what a restart must carry over.
func (r *Recorder) Save() Saved {
	s := Saved{Totals: maps.Clone(r.totals), Episodes: r.hist, Drains: r.drains}
	s.Episodes.Counts, s.Drains.Counts = slices.Clone(r.hist.Counts), slices.Clone(r.drains.Counts)
	for _, st := range r.serviceSnapshot() {
		s.Services = append(s.Services, SavedService{Namespace: st.Namespace, Name: st.Name, Totals: st.Totals, Drains: st.Drains})
	}
	s.Windows = r.windowSnapshot() // copied anew whenever they move: never changed in place
	s.Finished, _ = r.finishedAfter(r.taken)
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
		if d := ep.drain; !d.From.IsZero() {
			se.Drain = &SavedDrain{From: d.From.UnixNano(), Unavailable: d.Unavailable, Probed: d.Probed, Blind: d.Blind}
			if !d.LastClient.IsZero() {
				se.Drain.LastClient = d.LastClient.UnixNano()
			}
		}
		s.Open = append(s.Open, se)
	}
	return s
}

// Restore takes over what an earlier process saved, before the first decision. Causes it does not know are
// dropped (a file written by another version). An episode restored resumes when fresh (the file is younger
// than the state file's horizon): its destination counts as dropped and in rotation until the first decision says
// otherwise, which ends it then. Otherwise nobody looked for longer than an episode's quiet end: it ends as
// it was counted. The ended episodes no reader took are served again, numbered from 1, when fresh.
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
	if len(s.Drains.Counts) == len(DrainBuckets)+1 {
		r.drains = s.Drains
		r.drains.Counts = slices.Clone(s.Drains.Counts)
	}
	for _, ss := range s.Services {
		st := r.service([2]string{ss.Namespace, ss.Name})
		for c, t := range ss.Totals {
			if _, ok := r.totals[c]; ok {
				st.Totals[c] = t
			}
		}
		if len(ss.Drains.Counts) == len(DrainBuckets)+1 {
			st.Drain = ss.Drains
			st.Drain.Counts = slices.Clone(ss.Drains.Counts)
		}
	}
	for _, sw := range s.Windows {
		for c, n := range sw.Attempts {
			if _, ok := r.totals[c]; !ok || n == 0 {
				continue
			}
			r.windowOf([2]string{sw.Namespace, sw.Name})[c] = n
			r.winDirty = true
		}
	}
	if fresh {
		// Ended episodes of a file older than the quiet period are not served again: their Events are due
		// long since, and one written already may have expired (the API server keeps Events an hour by
		// default), so that a second write would be a duplicate.
		for _, f := range s.Finished[max(len(s.Finished)-FinishedRing, 0):] {
			if _, ok := r.totals[f.Cause]; !ok || f.Start.IsZero() {
				continue
			}
			r.seq++
			f.Seq = r.seq
			r.keep(f)
		}
	}
	for _, se := range s.Open {
		if _, ok := r.totals[se.Cause]; !ok || se.Start == 0 {
			continue
		}
		ep := &Episode{Cause: se.Cause, Start: time.Unix(0, se.Start), Metered: se.Metered, Attempts: se.Attempts,
			Seconds: se.Seconds, rebase: true, svc: serviceOf(se.Key)}
		if se.LastAttempt != 0 {
			ep.LastAttempt = time.Unix(0, se.LastAttempt)
		}
		if d := se.Drain; d != nil && d.From != 0 {
			ep.drain = drain{From: time.Unix(0, d.From), Unavailable: d.Unavailable, Probed: d.Probed, Blind: d.Blind}
			if d.LastClient != 0 {
				ep.drain.LastClient = time.Unix(0, d.LastClient)
			}
		}
		r.service(ep.svc)
		if !fresh {
			r.ended(ep)
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
