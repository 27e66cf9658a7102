package exposure

import "time"

// The load balancer's reaction. A load balancer that health-checks a Local Service's health check node port
// takes the node out some time after the port first answers 503 (kube-proxy has no ready local endpoint for
// the Service there): its checks' interval times its unhealthy threshold, as configured. The drain measures
// what it did: from that first 503 to the last new client attempt that still arrived at the destination. It
// is measured for an episode only, and only where the node model saw everything it is made of (docs/exposure.md,
// "The load balancer's drain"): the health check answering 503, the meter counting the destination throughout
// and a checker's probes arriving at the health check node port after the 503. Anything missing, no
// observation: never a guess.

// DrainBuckets are the upper bounds of the drain histograms, in seconds: from a load balancer that checks every
// second and drains at the first or second failure, to one that checks every 30 s, ten times (AWS's classic
// load balancer's most).
var DrainBuckets = []float64{1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300}

// Health is what the node model knows of the health check node port of a destination's Service, in the
// destination's family, at a decision.
type Health struct {
	// Asked: the Service has a health check node port (a LoadBalancer Service with spec.healthCheckNodePort)
	// and the model has an answer of it in the family.
	Asked bool
	// Unavailable: that answer was 503 (kube-proxy counts no ready local endpoint); ProbedAt is when the probe
	// that gave it was sent.
	Unavailable bool
	ProbedAt    time.Time
	// ProbesWatched: the arrivals meter counts the probes arriving at the health check node port from outside
	// the node (a load balancer's checker); ProbeLast is the latest one's arrival (zero: none yet).
	ProbesWatched bool
	ProbeLast     time.Time
}

// health is what the Recorder keeps of a destination's health check between decisions: enough to date the
// first 503.
type health struct {
	// ready: the latest decision's API view had a ready local endpoint in the family; notReadyAt is the decision
	// that found none after one that did (zero: none seen so).
	ready      bool
	notReadyAt time.Time
	// okAt is when the latest probe answering 200 was sent; badAt when the first one answering 503 since was.
	okAt, badAt time.Time
}

// take reads one decision's facts and health check answer.
func (h *health) take(now time.Time, o Observation) {
	switch ready := o.Facts.LocalReady > 0; {
	case ready:
		h.notReadyAt = time.Time{}
	case h.ready:
		h.notReadyAt = now
	}
	h.ready = o.Facts.LocalReady > 0
	if !o.Health.Asked || o.Health.ProbedAt.IsZero() {
		return
	}
	switch p := o.Health.ProbedAt; {
	case !o.Health.Unavailable:
		if p.After(h.okAt) {
			h.okAt, h.badAt = p, time.Time{}
		}
	case h.badAt.IsZero() || p.Before(h.badAt):
		if p.After(h.okAt) {
			h.badAt = p
		}
	}
}

// unavailableFrom dates the first 503 of a drop that began at drop. The drop is the latest it can be: kube-proxy
// counts its health check's local endpoints in the sync that writes its rules, and rules without a local
// endpoint leave none ready; so is the first probe that answered 503. The API view's change that left no ready
// local endpoint is the earliest (kube-proxy's own informer learns it then, and answers 503 from its next sync,
// at most its minSyncPeriod later), unless a probe sent after it still answered 200. Within those bounds the
// earliest is taken: the load balancer may have seen the 503 from kube-proxy's sync on.
func (h health) unavailableFrom(drop time.Time) time.Time {
	upper := drop
	if !h.badAt.IsZero() && h.badAt.Before(upper) {
		upper = h.badAt
	}
	if h.notReadyAt.IsZero() {
		return upper
	}
	if from := later(h.notReadyAt, h.okAt); from.Before(upper) {
		return from
	}
	return upper
}

// drain is what an episode keeps of the load balancer's reaction.
type drain struct {
	// From is when the health check began answering 503 (unavailableFrom); zero: the Service has no health
	// check node port the model asked.
	From time.Time
	// Unavailable: a probe of the model's answered 503 at or after the episode's start (or before, in the run of
	// 503s it began in).
	Unavailable bool
	// Probed: the meter counted a checker's probe at the health check node port after From: the load balancer
	// kept asking after the 503, so what still arrived is its reaction's.
	Probed bool
	// LastClient is the latest client attempt the meter saw arrive at the destination.
	LastClient time.Time
	// Blind: a decision of the episode had the meter not counting the destination or its health check node port.
	Blind bool
}

// beginDrain sets what an episode beginning at start keeps of the health check.
func (ep *Episode) beginDrain(d *dest, start time.Time, o Observation) {
	if !o.Health.Asked {
		return
	}
	ep.drain.From = d.health.unavailableFrom(start)
	ep.drain.Unavailable = !d.health.badAt.IsZero()
}

// takeDrain reads one decision of the episode's destination.
func (ep *Episode) takeDrain(o Observation, metered bool) {
	if ep.drain.From.IsZero() {
		return
	}
	if !o.Health.Asked {
		ep.drain.Blind = true // no longer health-checked (the Service's type changed): nothing to date against
		return
	}
	if !metered || !o.Watched || !o.Health.ProbesWatched {
		ep.drain.Blind = true
		return
	}
	ep.drain.Unavailable = ep.drain.Unavailable || o.Health.Unavailable && !o.Health.ProbedAt.IsZero()
	ep.drain.Probed = ep.drain.Probed || o.Health.ProbeLast.After(ep.drain.From)
	ep.drain.LastClient = later(ep.drain.LastClient, o.LastSeen)
}

// DrainSeconds is the load balancer's measured drain of an ended episode: from the health check's first 503 to
// the last client attempt; ok is false where it is not measured (no health check node port asked, no 503 seen,
// the meter off or blind at a decision, no checker probing after the 503, no attempt after it).
func (ep *Episode) DrainSeconds() (float64, bool) {
	d := ep.drain
	if !ep.Metered || d.From.IsZero() || d.Blind || !d.Unavailable || !d.Probed || !d.LastClient.After(d.From) {
		return 0, false
	}
	return d.LastClient.Sub(d.From).Seconds(), true
}
