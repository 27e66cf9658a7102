package exposure

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// The exposure counters say what a Service lost; the rollout and drain windows say how much it could have
// lost: the distinct new connection attempts that arrived at its destinations on this node, served or
// dropped, while the API view showed a pod of the Service being deleted (rollout) or the node cordoned
// (drain) or being deleted (node_deleting). Their ratio is the Service's success through its rollouts and
// drains (docs/exposure.md, "Success through rollouts and drains").

// WindowOf is the window the facts of a decision show open, and its cause: the node being deleted, then the
// node cordoned, then an endpoint of the family terminating anywhere in the cluster (local or remote, serving
// or not). ok is false while none is open.
func WindowOf(f Facts) (c Cause, ok bool) {
	switch {
	case f.Deleting:
		return CauseNodeDeleting, true
	case f.Cordoned:
		return CauseDrain, true
	case f.Terminating > 0 || f.LocalStopped > 0 || f.LocalServingTerminating:
		return CauseRollout, true
	}
	return "", false
}

// ServiceWindows is what arrived at one Service's destinations on this node in its windows, by cause.
type ServiceWindows struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Attempts has an entry for each cause the Service had a window of in which an attempt arrived.
	Attempts map[Cause]uint64 `json:"attempts"`
}

// window counts the attempts the meter counted at k since its decision before, when a window was open at
// either decision, or an episode at k: the attempts an episode loses are in its Service's window, whether the
// API view still shows the pod or node that opened it (the load balancer keeps sending after the pod is
// gone). Called after Observe, which keeps k. The first decision the meter counts at k only takes its count:
// attempts before it are no one's (and after a restart, never counted twice).
func (r *Recorder) window(k Key, o Observation) {
	d := r.lookup(k)
	if d == nil {
		return
	}
	prevCause, prevSeen, prevWatched := d.winCause, d.winSeen, d.winWatched
	cause, open := WindowOf(o.Facts)
	if ep := r.open[k]; ep != nil {
		cause, open = ep.Cause, true
	}
	d.winCause, d.winSeen, d.winWatched = "", o.Attempts, o.Watched
	if open {
		d.winCause = cause
	}
	if !o.Watched || !prevWatched {
		return
	}
	base := prevSeen
	if o.Attempts < base {
		base = 0 // the meter watched the destination anew (its count restarted)
	}
	n := o.Attempts - base
	if n == 0 {
		return
	}
	if !open {
		if prevCause == "" {
			return
		}
		cause = prevCause // the window closed since the decision before: what arrived in between was in it
	}
	r.windowOf(serviceOf(k))[cause] += n
	r.winDirty = true
}

// windowOf is the Service's window attempts by cause, made when it has none yet.
func (r *Recorder) windowOf(svc [2]string) map[Cause]uint64 {
	w := r.windows[svc]
	if w == nil {
		w = map[Cause]uint64{}
		r.windows[svc] = w
	}
	return w
}

// forgetWindows drops a Service that is gone: its series go with it.
func (r *Recorder) forgetWindows(namespace, name string) {
	if _, ok := r.windows[[2]string{namespace, name}]; ok {
		delete(r.windows, [2]string{namespace, name})
		r.winDirty = true
	}
}

// windowSnapshot copies the Services' windows, sorted, anew only when they moved.
func (r *Recorder) windowSnapshot() []ServiceWindows {
	if !r.winDirty && r.winSnap != nil {
		return r.winSnap
	}
	out := make([]ServiceWindows, 0, len(r.windows))
	for k, w := range r.windows {
		out = append(out, ServiceWindows{Namespace: k[0], Name: k[1], Attempts: maps.Clone(w)})
	}
	slices.SortFunc(out, func(a, b ServiceWindows) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	r.winSnap, r.winDirty = out, false
	return out
}
