package exposure

import (
	"time"

	"github.com/localtraffic/localtraffic-exporter/internal/prestop"
)

// Finished episodes. The node's counters say how much a cause lost, not which episode: a Kubernetes Event per
// episode (written by one writer per cluster, package eventwriter, from every node's list) needs each ended
// episode on its own. The Recorder keeps the latest ones in a bounded ring, numbered in the order they ended;
// a reader asks for those after the last number it has, and learns from Oldest when the ring overran it.
// Numbers start at 1 with each Recorder: they mean nothing across a restart of the process, which is why the
// list is served with an instance id (package main).

// FinishedRing is how many ended episodes the Recorder keeps: a rollout of a Service with many destinations
// ends a few per destination and family; a reader polling every few seconds never falls that far behind.
const FinishedRing = 256

// Finished is one ended episode, with everything a report of it needs (docs/exposure.md, "Events").
type Finished struct {
	// Seq numbers the Recorder's ended episodes from 1, in the order they ended.
	Seq   uint64 `json:"seq"`
	Key   Key    `json:"key"`
	Cause Cause  `json:"cause"`
	// Start is when the destination was dropped; End when the episode ended (the quiet period's end, a
	// forwarding decision, the destination or Service gone); LastAttempt the latest lost attempt (zero: none).
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	// AttemptsCounted: the arrivals meter counted the destination's attempts; Attempts is how many it lost.
	// Without the meter, Attempts is 0 and says nothing.
	AttemptsCounted bool   `json:"attempts_counted"`
	Attempts        uint64 `json:"attempts"`
	// Seconds is the episode's length as the counters counted it.
	Seconds float64 `json:"seconds"`
	// LBDrainSeconds is the load balancer's measured drain (drain.go), nil where it was not measured;
	// RecommendedPreStopSeconds is then the preStop sleep that would have kept the pods serving: the drain plus
	// the margin the plugin's advice adds, rounded up to whole seconds (prestop.NeedSeconds).
	LBDrainSeconds            *float64 `json:"lb_drain_seconds,omitempty"`
	RecommendedPreStopSeconds int64    `json:"recommended_prestop_seconds,omitempty"`
}

// finished appends an episode ended at now to the ring, overwriting the oldest when it is full.
func (r *Recorder) finished(k Key, ep *Episode, now time.Time) {
	r.seq++
	f := Finished{Seq: r.seq, Key: k, Cause: ep.Cause, Start: ep.Start, End: now, LastAttempt: ep.LastAttempt,
		AttemptsCounted: ep.Metered, Attempts: ep.Attempts, Seconds: ep.Seconds}
	if d, ok := ep.DrainSeconds(); ok {
		f.LBDrainSeconds = &d
		f.RecommendedPreStopSeconds = prestop.NeedSeconds(d)
	}
	r.keep(f)
}

// keep puts f, numbered r.seq, in the ring, overwriting the oldest when it is full.
func (r *Recorder) keep(f Finished) {
	if len(r.ring) < FinishedRing {
		r.ring = append(r.ring, f)
		return
	}
	r.ring[(r.seq-1)%FinishedRing] = f
}

// FinishedAfter returns, oldest first, the kept episodes numbered after seq, and the oldest number kept (0:
// none yet): a reader whose seq+1 is below it missed the episodes between. A reader asks after the last
// episode it is done with (the Event writer moves its cursor past an episode once its Event is written), so
// the episodes up to seq count as taken: a restart carries over only the others (Save).
func (r *Recorder) FinishedAfter(seq uint64) (out []Finished, oldest uint64) {
	r.taken = max(r.taken, min(seq, r.seq))
	return r.finishedAfter(seq)
}

func (r *Recorder) finishedAfter(seq uint64) (out []Finished, oldest uint64) {
	if len(r.ring) == 0 {
		return nil, 0
	}
	oldest = r.seq - uint64(len(r.ring)) + 1
	for s := max(seq+1, oldest); s <= r.seq; s++ {
		out = append(out, r.ring[(s-1)%FinishedRing])
	}
	return out, oldest
}

// LastFinished is the number of the latest ended episode (0: none yet).
func (r *Recorder) LastFinished() uint64 { return r.seq }

// Page is what an exporter serves at /episodes: its node, its process's instance id (random at each start:
// a new one tells a reader the numbers began again), the oldest and latest numbers kept, and the episodes
// after the number asked.
type Page struct {
	Instance string     `json:"instance"`
	Node     string     `json:"node"`
	Oldest   uint64     `json:"oldest"`
	Last     uint64     `json:"last"`
	Episodes []Finished `json:"episodes"`
}
