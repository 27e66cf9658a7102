// Package exposure records the windows in which this node dropped a Local Service's new connections while
// something still sent them: one episode per destination (a NodePort of one family, a load balancer IP and
// port, an externalIP and port) from the moment the node stopped forwarding there while in rotation, to the
// moment it forwarded again or nothing arrived for the quiet period. It sums, per cause, the seconds and the
// distinct connection attempts the episodes lost (docs/exposure.md).
//
// It is pure bookkeeping: the node model (package scrape) owns time and every input, feeds a Recorder each
// destination's decision as it makes it, asks it when its next quiet-period end is due (a model timer) and
// publishes its Snapshot with each State. It starts no goroutine and reads no clock.
package exposure

import (
	"maps"
	"slices"
	"time"
)

// Cause is what the API view says made the node stop forwarding (localtraffic_exposure_*_total's cause).
type Cause string

// Causes, in the order CauseOf tests them.
const (
	// CauseNodeDeleting: the Node has a deletionTimestamp (or the cluster autoscaler's deletion taint).
	CauseNodeDeleting Cause = "node_deleting"
	// CauseDrain: the Node is cordoned (spec.unschedulable), as kubectl drain leaves it.
	CauseDrain Cause = "drain"
	// CauseNodeJoin: the destination was last seen while kube-proxy had programmed nothing on the node; its
	// first rules dropped the destination (unless the node is being deleted or cordoned).
	CauseNodeJoin Cause = "node_join"
	// CauseRollout: a local endpoint is still listed as terminating but serves no more, and the family has
	// ready endpoints on other nodes: a pod deleted while others serve (a rolling update, a scale-down).
	CauseRollout Cause = "rollout"
	// CauseOther: anything else (a pod that crashed or failed readiness without being deleted, the last
	// endpoint anywhere gone).
	CauseOther Cause = "other"
)

// Causes lists every cause: the counters are exported for each from the start.
var Causes = []Cause{CauseDrain, CauseNodeDeleting, CauseRollout, CauseNodeJoin, CauseOther}

// Facts is what the API view shows of the node and the destination's Service family when it is decided.
type Facts struct {
	// Deleting: the Node has a deletionTimestamp or the autoscaler's ToBeDeletedByClusterAutoscaler taint.
	Deleting bool
	// Cordoned: the Node's spec.unschedulable.
	Cordoned bool
	// LocalStopped counts local endpoints listed as terminating that serve no more; RemoteReady the family's
	// ready endpoints on other nodes.
	LocalStopped, RemoteReady int
	// LocalServingTerminating: kube-proxy forwards to local endpoints that terminate but still serve (its
	// fallback when none is ready): a pod being deleted, not yet stopped.
	LocalServingTerminating bool
	// LocalReady counts the family's ready local endpoints: what kube-proxy's health check node port counts,
	// which dates its first 503 (drain.go).
	LocalReady int
	// Terminating counts the family's endpoints listed terminating anywhere in the cluster, serving or not:
	// it opens the Service's rollout window (window.go), not an episode's cause.
	Terminating int
}

// CauseOf is the cause the facts give an episode beginning now (node_join is told by the Recorder).
func CauseOf(f Facts) Cause {
	switch {
	case f.Deleting:
		return CauseNodeDeleting
	case f.Cordoned:
		return CauseDrain
	case f.LocalStopped > 0 && f.RemoteReady > 0:
		return CauseRollout
	}
	return CauseOther
}

// Key is one destination: the Service's namespace and name, its port's name and protocol, the IP family,
// the kind of way in, the address ("" for a NodePort) and the port it arrives at.
type Key struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	Port      string `json:"port"`
	Protocol  string `json:"protocol"`
	Family    string `json:"family"`
	Kind      string `json:"kind"`
	Address   string `json:"address,omitempty"`
	DestPort  int32  `json:"dest_port"`
}

// Observation is one decision of a destination.
type Observation struct {
	// Dropped: kube-proxy drops the destination for lack of a local endpoint (the verdict's entry).
	Dropped bool
	// InRotation: the verdict has the destination in rotation.
	InRotation bool
	// Losing: the verdict found an attempt arriving at the destination since it was dropped.
	Losing bool
	// Watched: the arrivals meter counts the destination; Attempts is its count of distinct attempts there
	// (retransmissions not counted again; it only grows while the meter watches the destination) and LastSeen
	// its latest client's arrival (a health checker's set aside). Nothing else of the meter is read.
	Watched  bool
	Attempts uint64
	LastSeen time.Time
	// Source is what decided Dropped (the verdict's: kube-proxy's rules, or the API view where they cannot be
	// read). A decision from another source than the one before tells no transition: the exporter's first read
	// of the rules, or a failed read, is no change on the node.
	Source string
	// Facts tell the cause of an episode beginning with this decision.
	Facts Facts
	// ChangedAt is when the node was told of the change in kube-proxy's rules that this decision's reading
	// shows (zero: the reading was not told of, or the decision is the API view's). A drop found in that
	// reading was in place by then, however much later the rules were read; AtChange is the meter's count of
	// distinct attempts at the destination then (ChangeWatched: it counted there), so that the attempts counted
	// are those that arrived after the drop, not the ones served before it nor only those after the read.
	ChangedAt     time.Time
	AtChange      uint64
	ChangeWatched bool
	// Health is the Service's health check node port in the destination's family: it dates the load
	// balancer's drain (drain.go).
	Health Health
}

// Episode is an open episode.
type Episode struct {
	Cause Cause
	// Start is the decision that found the destination dropped.
	Start time.Time
	// Metered: the meter watched the destination when the episode began; its attempts are counted and its
	// quiet period ends it. Unmetered episodes end when the verdict takes the destination out of rotation.
	Metered bool
	// Seen is the meter's latest count; Attempts the attempts counted since Start.
	Seen, Attempts uint64
	// LastAttempt is the latest attempt after Start (zero: none yet).
	LastAttempt time.Time
	// Seconds is how much of the episode is counted in the totals so far.
	Seconds float64
	// drain is what it keeps of the load balancer's reaction (drain.go); svc its Service.
	drain drain
	svc   [2]string
	// rebase: carried over a restart; the new meter's count is no continuation of Seen, so its next count is
	// taken as the base (the attempts while the exporter was down are not counted: never twice).
	rebase bool
}

// quietEnd is when nothing arriving ends a metered episode.
func (e *Episode) quietEnd(quiet time.Duration) time.Time {
	return later(e.Start, e.LastAttempt).Add(quiet)
}

// seconds is the episode's length so far: to its latest lost attempt where attempts are counted (the quiet
// period after it is no loss), to now where they are not.
func (e *Episode) seconds(now time.Time) float64 {
	if e.Metered {
		if e.LastAttempt.IsZero() {
			return 0
		}
		return e.LastAttempt.Sub(e.Start).Seconds()
	}
	return max(now.Sub(e.Start).Seconds(), 0)
}

// Totals is what one cause's episodes lost.
type Totals struct {
	Seconds  float64 `json:"seconds"`
	Attempts uint64  `json:"attempts"`
	// Episodes counts the episodes that ended.
	Episodes uint64 `json:"episodes"`
}

// Buckets are the upper bounds of the episodes' histogram, in seconds: from a second (a load balancer that
// checks every second and drains at the first failure) to ten minutes (a drain that waits for its pods'
// grace periods, or no health check at all). An episode longer lands in +Inf.
var Buckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// Histogram is the ended episodes' lengths: Counts[i] those of at most Buckets[i] seconds (not cumulative),
// Counts[len(Buckets)] the longer ones.
type Histogram struct {
	Counts []uint64 `json:"counts"`
	Sum    float64  `json:"sum"`
	Count  uint64   `json:"count"`
}

func (h *Histogram) observe(buckets []float64, seconds float64) {
	if len(h.Counts) != len(buckets)+1 {
		h.Counts = make([]uint64, len(buckets)+1)
	}
	i, _ := slices.BinarySearch(buckets, seconds)
	h.Counts[i]++
	h.Sum += seconds
	h.Count++
}

// Cumulative is the histogram as Prometheus exposes it: by upper bound, the episodes of at most that many
// seconds (+Inf is Count).
func (h Histogram) Cumulative() map[float64]uint64 { return h.CumulativeOf(Buckets) }

// CumulativeOf is Cumulative for a histogram of other buckets (DrainBuckets).
func (h Histogram) CumulativeOf(buckets []float64) map[float64]uint64 {
	out := make(map[float64]uint64, len(buckets))
	n := uint64(0)
	for i, b := range buckets {
		if i < len(h.Counts) {
			n += h.Counts[i]
		}
		out[b] = n
	}
	return out
}

// Snapshot is the Recorder's published state: read-only, shared by the States that carry it.
type Snapshot struct {
	// Totals has an entry for every cause.
	Totals map[Cause]Totals
	// Episodes is the ended episodes' lengths (what the totals counted of each).
	Episodes Histogram
	// Open counts the episodes under way.
	Open int
	// AttemptsCounted: the arrivals meter counts attempts; without it only seconds are counted, and the
	// attempts counters hold still.
	AttemptsCounted bool
	// Drains is the load balancers' measured drains (drain.go), in DrainBuckets.
	Drains Histogram
	// Services are the Services that had an episode on the node, by namespace and name (service.go).
	Services []ServiceStats
	// Windows are the Services whose rollout or drain windows saw attempts arrive on the node (window.go).
	Windows []ServiceWindows
}

// destEntry is a destination and what the Recorder keeps of it.
type destEntry struct {
	key Key
	dest
}

// dest is what the Recorder keeps of a destination between decisions.
type dest struct {
	dropped, in, programmed bool
	source                  string
	// droppedAt is the decision that found it dropped (or the rules change told before it), dropCount the
	// meter's count then; decided: an episode
	// began for this drop, or the drop was found outside rotation and no attempt reached it within the quiet
	// period.
	droppedAt time.Time
	dropCount uint64
	decided   bool
	// toldStart: droppedAt is the told rules change, before the decision that found the drop.
	toldStart bool
	// terminating: the latest decision listed a local endpoint terminating (serving or stopped); cause is the
	// cause of the drop found at droppedAt.
	terminating bool
	cause       Cause
	// fwdChange is the told change the latest decision that found the destination forwarded was read after: a
	// drop read after the same change (or an older one) came later than that change.
	fwdChange time.Time
	// health dates the Service's health check's first 503 (drain.go).
	health health
	// winSeen is the meter's count at the latest decision (winWatched: it counted there), winCause the
	// window open then ("" none): what arrives until the next decision is counted in that window (window.go).
	winSeen    uint64
	winWatched bool
	winCause   Cause
}

// Recorder keeps the episodes of one node. Not safe for concurrent use: the node model's goroutine owns it.
type Recorder struct {
	quiet time.Duration
	// dests are the destinations by Service (namespace and name), so that a Service's decision or removal
	// touches its own alone: a few each, a slice (a map per Service cost three times the memory).
	dests  map[[2]string][]destEntry
	open   map[Key]*Episode
	totals map[Cause]Totals
	hist   Histogram
	// drains is the measured drains' histogram (drain.go); services what each Service that had an episode lost
	// (service.go).
	drains   Histogram
	services map[[2]string]*serviceStats
	svcSnap  []ServiceStats
	svcDirty bool
	// windows is what arrived in each Service's rollout and drain windows (window.go).
	windows    map[[2]string]map[Cause]uint64
	winSnap    []ServiceWindows
	winDirty   bool
	programmed bool
	metered    bool
	// ring keeps the latest ended episodes, seq numbers them; taken is the highest number a reader asked
	// after (finished.go).
	ring  []Finished
	seq   uint64
	taken uint64
}

// NewRecorder returns a Recorder whose metered episodes end after quiet without an attempt.
func NewRecorder(quiet time.Duration) *Recorder {
	r := &Recorder{quiet: quiet, dests: map[[2]string][]destEntry{}, open: map[Key]*Episode{}, totals: map[Cause]Totals{},
		services: map[[2]string]*serviceStats{}, windows: map[[2]string]map[Cause]uint64{}, programmed: true}
	for _, c := range Causes {
		r.totals[c] = Totals{}
	}
	return r
}

// Node takes what the node shows as a whole before the step's decisions: whether kube-proxy programmed any
// rule here (false while it has none: before its first sync on a joining node), and whether the arrivals
// meter counts attempts.
func (r *Recorder) Node(programmed, metered bool) {
	r.programmed, r.metered = programmed, metered
}

func serviceOf(k Key) [2]string { return [2]string{k.Namespace, k.Service} }

// Entry is one destination of a Service's decision.
type Entry struct {
	Key Key
	Observation
}

// Decided takes one decision of a Service at now: seen has every destination it has. Its destinations
// missing from seen are gone (an address removed, a port renamed): their episodes end now.
func (r *Recorder) Decided(now time.Time, namespace, name string, seen []Entry) {
	for _, x := range seen {
		r.Observe(now, x.Key, x.Observation)
		r.window(x.Key, x.Observation)
	}
	svc := [2]string{namespace, name}
	for i := 0; i < len(r.dests[svc]); i++ {
		if k := r.dests[svc][i].key; !decidedAt(seen, k) {
			r.forget(now, k)
			i--
		}
	}
}

// decidedAt: the decision has destination k.
func decidedAt(seen []Entry, k Key) bool {
	for _, x := range seen {
		if x.Key == k {
			return true
		}
	}
	return false
}

// Gone ends the episodes of a Service that is gone (deleted, no longer Local) at now, and forgets it.
func (r *Recorder) Gone(now time.Time, namespace, name string) {
	for _, e := range r.dests[[2]string{namespace, name}] {
		if ep := r.open[e.key]; ep != nil {
			r.end(e.key, ep, now)
		}
	}
	delete(r.dests, [2]string{namespace, name})
	r.forgetService(namespace, name)
	r.forgetWindows(namespace, name)
}

func (r *Recorder) forget(now time.Time, k Key) {
	if ep := r.open[k]; ep != nil {
		r.end(k, ep, now)
	}
	svc := serviceOf(k)
	r.dests[svc] = slices.DeleteFunc(r.dests[svc], func(e destEntry) bool { return e.key == k })
	if len(r.dests[svc]) == 0 {
		delete(r.dests, svc)
	}
}

// lookup is what the Recorder keeps of k; nil when it has not seen it.
func (r *Recorder) lookup(k Key) *dest {
	entries := r.dests[serviceOf(k)]
	for i := range entries {
		if entries[i].key == k {
			return &entries[i].dest
		}
	}
	return nil
}

// Observe takes one decision of destination k at now (Decided takes a whole Service's).
func (r *Recorder) Observe(now time.Time, k Key, o Observation) {
	d := r.lookup(k)
	if d == nil {
		// A destination first seen has no transition to record: dropped from the start is a blackhole (the
		// verdict's), not an episode.
		svc := serviceOf(k)
		r.dests[svc] = append(r.dests[svc], destEntry{key: k, dest: dest{dropped: o.Dropped, in: o.InRotation,
			programmed: r.programmed, source: o.Source, droppedAt: ifTime(o.Dropped, now), dropCount: o.Attempts,
			decided: o.Dropped, terminating: o.Facts.LocalServingTerminating || o.Facts.LocalStopped > 0,
			fwdChange: ifTime(!o.Dropped, o.ChangedAt)}})
		entries := r.dests[svc]
		h := &entries[len(entries)-1].health
		h.take(now, o)
		h.notReadyAt = time.Time{} // first seen: when it lost its last ready endpoint is not known
		return
	}
	d.health.take(now, o)
	if d.source != o.Source && o.Dropped && !d.dropped {
		// Dropped by another source's reading, not by a change on the node: taken as it is, as a first sight.
		d.droppedAt, d.dropCount, d.decided, d.toldStart = now, o.Attempts, true, false
		d.dropped, d.in, d.programmed, d.source = o.Dropped, o.InRotation, r.programmed, o.Source
		d.terminating = o.Facts.LocalServingTerminating || o.Facts.LocalStopped > 0
		return
	}
	if ep := r.open[k]; ep != nil {
		r.count(ep, o)
		ep.takeDrain(o, r.metered)
	}
	switch {
	case !o.Dropped:
		if ep := r.open[k]; ep != nil {
			r.end(k, ep, now)
		}
		d.droppedAt, d.decided, d.fwdChange = time.Time{}, false, o.ChangedAt
	case !d.dropped:
		// It stopped forwarding: an episode when it was in rotation, now or at the decision before. A told change
		// that a decision finding it forwarded had already read is not what dropped it: the rules moved since
		// without a change told before this reading (one the reader saw without telling), so the drop is dated
		// by this decision.
		if !o.ChangedAt.IsZero() && !o.ChangedAt.After(d.fwdChange) {
			o.ChangedAt = time.Time{}
		}
		start, base := dropStart(now, o)
		d.droppedAt, d.dropCount, d.decided, d.toldStart = start, base, false, start.Before(now)
		d.cause = dropCause(d, o.Facts)
		if o.InRotation || d.in {
			r.begin(k, d, start, d.cause, Observation{Watched: o.Watched, Attempts: base, Health: o.Health})
			r.count(r.open[k], o)
			r.open[k].takeDrain(o, r.metered)
		} else {
			r.lateLoss(now, k, d, o)
		}
	case !d.decided && r.open[k] == nil:
		r.lateLoss(now, k, d, o)
	}
	if ep := r.open[k]; ep != nil && o.Dropped {
		if !ep.Metered && !o.InRotation {
			r.end(k, ep, now) // the node left rotation (its health check failed): as far as it can tell, nothing comes
		} else {
			r.accrue(ep, now)
		}
	}
	d.dropped, d.in, d.programmed, d.source = o.Dropped, o.InRotation, r.programmed, o.Source
	d.terminating = o.Facts.LocalServingTerminating || o.Facts.LocalStopped > 0
}

// dropCause is the cause of a drop the facts show after the destination's decision d. A pod that was
// terminating at the decision before may be gone from the slices by the one that finds the drop: kube-proxy
// syncs at most once a second, and the kubelet deletes a pod moments after its containers exit, so its stop
// and its removal can reach the rules in one sync. It is the same pod deleted: a rollout where others serve.
func dropCause(d *dest, f Facts) Cause {
	if d.terminating && f.LocalStopped == 0 {
		f.LocalStopped = 1
	}
	cause := CauseOf(f)
	if !d.programmed && cause != CauseNodeDeleting && cause != CauseDrain {
		cause = CauseNodeJoin
	}
	return cause
}

// dropStart is when a drop decided at now began, and the meter's count then: the rules change the node was
// told of, when the decision reads it; the decision itself otherwise. Decisions between the change and the
// read that shows it (the meter's counts moved) still read the rules from before it, and found the
// destination forwarded: the change is no older than that reading, which no change told before could be.
func dropStart(now time.Time, o Observation) (time.Time, uint64) {
	if o.ChangedAt.IsZero() || o.ChangedAt.After(now) {
		return now, o.Attempts
	}
	if !o.Watched {
		return o.ChangedAt, o.Attempts
	}
	if !o.ChangeWatched || o.AtChange > o.Attempts {
		// The meter did not count there then, or counts anew since (watched again): no count to start from.
		return now, o.Attempts
	}
	return o.ChangedAt, o.AtChange
}

// lossShows is how long after a drop the verdict may take to find an attempt lost there (Losing: its source
// repeated, a SYN retransmitted 1 s and 3 s after the first): attempts counted before then may be lost ones
// not yet told apart, so they decide nothing.
const lossShows = 3 * time.Second

// lateLoss begins the episode of a drop found out of rotation once an attempt is found lost there within the
// quiet period after it (the load balancer had not taken the node out when its health check failed), and
// decides there is none once attempts arrived without a loss or the quiet period passed. A loss is the
// verdict's (Losing: an attempt that repeated its source since the verdict found the drop) or, for a drop
// that began at a told rules change before the decision that found it, a client's attempt counted since the
// change: the load balancer may have stopped sending before the rules were read.
func (r *Recorder) lateLoss(now time.Time, k Key, d *dest, o Observation) {
	switch {
	case o.Watched && o.Attempts > d.dropCount:
		lost := o.Losing || d.toldStart && o.LastSeen.After(d.droppedAt)
		switch {
		case lost && !o.LastSeen.After(d.droppedAt.Add(r.quiet)):
			r.begin(k, d, d.droppedAt, d.cause, Observation{Watched: true, Attempts: d.dropCount, Health: o.Health})
			r.count(r.open[k], o)
			r.open[k].takeDrain(o, r.metered)
		case lost || now.Sub(d.droppedAt) >= lossShows:
			d.decided = true
		}
	case now.Sub(d.droppedAt) >= r.quiet:
		d.decided = true
	}
}

func ifTime(b bool, t time.Time) time.Time {
	if b {
		return t
	}
	return time.Time{}
}

func (r *Recorder) begin(k Key, d *dest, start time.Time, cause Cause, o Observation) {
	d.decided = true
	ep := &Episode{Cause: cause, Start: start, Metered: o.Watched && r.metered, Seen: o.Attempts, svc: serviceOf(k)}
	ep.beginDrain(d, start, o)
	r.open[k] = ep
	r.service(ep.svc)
}

// count takes the meter's latest count into an open metered episode.
func (r *Recorder) count(ep *Episode, o Observation) {
	if !ep.Metered || !o.Watched {
		return
	}
	n := o.Attempts
	if ep.rebase {
		ep.Seen, ep.rebase = n, false
		return
	}
	if n < ep.Seen {
		ep.Seen = 0 // the meter watched the destination anew (its count restarted)
	}
	// Growth counts only with a newer arrival: where the meter sets a checker's probes aside, LastSeen is the
	// clients' latest, and a count that grew by probes alone is no loss.
	if n > ep.Seen && o.LastSeen.After(later(ep.Start, ep.LastAttempt)) {
		ep.Attempts += n - ep.Seen
		r.add(ep, 0, n-ep.Seen)
		ep.LastAttempt = later(ep.LastAttempt, o.LastSeen)
	}
	ep.Seen = n
}

// accrue adds what the episode lasted since it was last counted.
func (r *Recorder) accrue(ep *Episode, now time.Time) {
	if s := ep.seconds(now); s > ep.Seconds {
		r.add(ep, s-ep.Seconds, 0)
		ep.Seconds = s
	}
}

// add counts what an episode lost, in the node's totals and its Service's.
func (r *Recorder) add(ep *Episode, seconds float64, attempts uint64) {
	t := r.totals[ep.Cause]
	t.Seconds += seconds
	t.Attempts += attempts
	r.totals[ep.Cause] = t
	if s := r.services[ep.svc]; s != nil {
		s.add(ep.Cause, seconds, attempts, 0)
		r.svcDirty = true
	}
}

func (r *Recorder) end(k Key, ep *Episode, now time.Time) {
	r.accrue(ep, now)
	r.ended(ep)
	r.finished(k, ep, now)
	delete(r.open, k)
}

// ended counts an ended episode: its length, and the load balancer's drain where it was measured.
func (r *Recorder) ended(ep *Episode) {
	t := r.totals[ep.Cause]
	t.Episodes++
	r.totals[ep.Cause] = t
	r.hist.observe(Buckets, ep.Seconds)
	s := r.services[ep.svc]
	if s != nil {
		s.add(ep.Cause, 0, 0, 1)
		r.svcDirty = true
	}
	if secs, ok := ep.DrainSeconds(); ok {
		r.drains.observe(DrainBuckets, secs)
		if s != nil {
			s.Drain.observe(DrainBuckets, secs)
		}
	}
}

// Advance ends the metered episodes whose quiet period passed without an attempt, and counts the unmetered
// ones' seconds to now. The model calls it at every step, before its decisions.
func (r *Recorder) Advance(now time.Time) {
	for _, k := range r.sortedOpen() {
		ep := r.open[k]
		if ep.Metered && !now.Before(ep.quietEnd(r.quiet)) {
			r.end(k, ep, now)
			continue
		}
		r.accrue(ep, now)
	}
}

// Next is when the earliest metered episode's quiet period ends (zero: none open): the model's timer.
func (r *Recorder) Next() time.Time {
	var next time.Time
	for _, ep := range r.open {
		if !ep.Metered {
			continue
		}
		if t := ep.quietEnd(r.quiet); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Open returns the episode under way at k.
func (r *Recorder) Open(k Key) (Episode, bool) {
	ep, ok := r.open[k]
	if !ok {
		return Episode{}, false
	}
	return *ep, true
}

// Snapshot copies what the Recorder published.
func (r *Recorder) Snapshot() *Snapshot {
	h, dr := r.hist, r.drains
	h.Counts, dr.Counts = slices.Clone(h.Counts), slices.Clone(dr.Counts)
	return &Snapshot{Totals: maps.Clone(r.totals), Episodes: h, Open: len(r.open), AttemptsCounted: r.metered, Drains: dr,
		Services: r.serviceSnapshot(), Windows: r.windowSnapshot()}
}

// sortedOpen orders the open episodes' keys, so that what is counted never depends on a map's order.
func (r *Recorder) sortedOpen() []Key {
	keys := slices.Collect(maps.Keys(r.open))
	slices.SortFunc(keys, compareKeys)
	return keys
}

func compareKeys(a, b Key) int {
	for _, c := range [][2]string{{a.Namespace, b.Namespace}, {a.Service, b.Service}, {a.Port, b.Port}, {a.Protocol, b.Protocol},
		{a.Family, b.Family}, {a.Kind, b.Kind}, {a.Address, b.Address}} {
		if c[0] != c[1] {
			if c[0] < c[1] {
				return -1
			}
			return 1
		}
	}
	return int(a.DestPort) - int(b.DestPort)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
