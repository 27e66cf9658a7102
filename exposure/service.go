package exposure

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"
)

// What one Service lost. The node's totals do not say which Service an episode was at; an opt-in collector
// (service_exposure) exports it for the Services that had an episode on the node, so the Recorder keeps, per
// such Service, its totals by cause, its measured drains and what configures its load balancer's reaction.
// A Service is kept from its first episode until it is gone (deleted, no longer Local): its series go with it.

// LBCheck is what says how fast a Service's load balancer should take the node out once its health check
// fails (the configured reaction, beside the measured drain).
type LBCheck struct {
	// Interval and Threshold are the check's interval and unhealthy threshold as the Service's cloud
	// annotations configure them (announce.CheckWindowOf); zero when they do not say both.
	Interval  time.Duration
	Threshold int
	// Observed is the cadence of the checker the arrivals meter follows at the health check node port (its
	// proven clock); zero when none is proven or the meter does not count there.
	Observed time.Duration
}

// Window is the configured reaction: interval × unhealthy threshold; zero when the annotations do not say it.
func (c LBCheck) Window() time.Duration {
	if c.Interval <= 0 || c.Threshold <= 0 {
		return 0
	}
	return c.Interval * time.Duration(c.Threshold)
}

// ServiceStats is what one Service's episodes on the node lost.
type ServiceStats struct {
	Namespace, Name string
	// Totals has an entry for each cause the Service had an episode of.
	Totals map[Cause]Totals
	// Drains is its load balancer's measured drains, in DrainBuckets.
	Drains Histogram
	// Check is its load balancer's configured reaction, as of its latest decision.
	Check LBCheck
}

type serviceStats struct {
	Totals map[Cause]Totals
	Drain  Histogram
	Check  LBCheck
}

func (s *serviceStats) add(c Cause, seconds float64, attempts, episodes uint64) {
	t := s.Totals[c]
	t.Seconds += seconds
	t.Attempts += attempts
	t.Episodes += episodes
	s.Totals[c] = t
}

// service is svc's stats, kept from its first episode on.
func (r *Recorder) service(svc [2]string) *serviceStats {
	s := r.services[svc]
	if s == nil {
		s = &serviceStats{Totals: map[Cause]Totals{}}
		r.services[svc] = s
		r.svcDirty = true
	}
	return s
}

func (r *Recorder) forgetService(namespace, name string) {
	if _, ok := r.services[[2]string{namespace, name}]; ok {
		delete(r.services, [2]string{namespace, name})
		r.svcDirty = true
	}
}

// Check takes what configures the load balancer's reaction for a Service, at its decision: kept only for a
// Service that had an episode.
func (r *Recorder) Check(namespace, name string, c LBCheck) {
	if s := r.services[[2]string{namespace, name}]; s != nil && s.Check != c {
		s.Check = c
		r.svcDirty = true
	}
}

// Services lists the Services that had an episode, whose check Check keeps.
func (r *Recorder) Services() [][2]string {
	out := make([][2]string, 0, len(r.services))
	for k := range r.services {
		out = append(out, k)
	}
	return out
}

// serviceSnapshot copies the Services' stats, sorted, anew only when they moved: every State carries them.
func (r *Recorder) serviceSnapshot() []ServiceStats {
	if !r.svcDirty && r.svcSnap != nil {
		return r.svcSnap
	}
	out := make([]ServiceStats, 0, len(r.services))
	for k, s := range r.services {
		d := s.Drain
		d.Counts = slices.Clone(d.Counts)
		out = append(out, ServiceStats{Namespace: k[0], Name: k[1], Totals: maps.Clone(s.Totals), Drains: d, Check: s.Check})
	}
	slices.SortFunc(out, func(a, b ServiceStats) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	r.svcSnap, r.svcDirty = out, false
	return out
}
