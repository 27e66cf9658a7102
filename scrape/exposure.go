package scrape

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The exposure recorder (package exposure) is the node model's: it is fed each Service's decision as the model
// makes it, its quiet-period ends are the model's timers, and its snapshot is published with every State. It
// is kept with the cross-scrape state rather than in the model, because the state file carries it over a
// restart and the file is written from the Gatherer's state; the mutex is for that write (SaveState), the
// model's goroutine alone changes it.
type exposureTracker struct {
	mu  sync.Mutex
	rec *exposure.Recorder
	// log receives, at debug level, each decision of a destination that is dropped or has an episode under
	// way: what the recorder was told, to hold its episodes to a client's count.
	log *slog.Logger
}

// newExposureTracker ends a metered episode after quiet without an attempt: the meter's quiet period, the
// pause that ends a run of arrivals (docs/exposure.md).
func newExposureTracker(quiet time.Duration, log *slog.Logger) *exposureTracker {
	return &exposureTracker{rec: exposure.NewRecorder(quiet), log: log}
}

// node tells the recorder what the node shows as a whole and ends what time ended: before a step's decisions.
func (x *exposureTracker) node(st *State, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	metered := st.Arrivals.Snapshot != nil && st.Arrivals.Snapshot.Status == arrivals.StatusOK
	x.rec.Node(!st.NotProgrammed, metered)
	x.rec.Advance(now)
}

// rulesTold is a change of kube-proxy's rules the reader told of: when, and the meter's counts then (nil: no
// meter).
type rulesTold struct {
	at     time.Time
	counts *arrivals.Snapshot
}

// decided feeds one decision of a Service: each destination of its verdict, with the meter's count there and
// the facts of the API view that tell an episode's cause; for a verdict read from kube-proxy's rules, the
// change told before they were read and the meter's count then; for a Service with a health check node port,
// its answer (the probe sent at checkedAt) and the checkers' probes the meter counted there, which date and
// bound the load balancer's drain.
func (x *exposureTracker) decided(p *pass, node kubeview.NodeState, r *ServiceResult, now time.Time, change rulesTold, checkedAt time.Time) {
	var seen []exposure.Entry
	for _, fv := range r.Verdict.Families {
		fam, _ := r.Service.Family(fv.Family)
		facts := exposure.Facts{Deleting: node.Draining(), Cordoned: node.Unschedulable, LocalStopped: fam.LocalStopped,
			RemoteReady: fam.RemoteReady, LocalReady: fam.LocalReadyEndpoints, Terminating: fam.Terminating}
		health := healthOf(p, r, fv.Family, checkedAt)
		for _, pe := range fam.Ports {
			facts.LocalServingTerminating = facts.LocalServingTerminating || pe.LocalTerminating
		}
		for _, e := range fv.Entries {
			d := e.Destination
			o := exposure.Observation{Dropped: e.Dropped, InRotation: e.Rotation == verdict.In, Losing: e.Losing,
				Source: string(fv.Source), Facts: facts, Health: health}
			if c, ok := meterCount(p, d); ok {
				o.Watched, o.Attempts, o.LastSeen = true, distinct(c), c.LastSeen
				if !c.LastAttempt.IsZero() {
					// A lost attempt's retransmission a second later is no later loss: the episode's last
					// attempt is the latest new one.
					o.LastSeen = c.LastAttempt
				}
				if c.SetAside {
					o.LastSeen = c.Clients.LastSeen
				}
			}
			if fv.Source == verdict.SourceRules && !change.at.IsZero() {
				o.ChangedAt = change.at
				if c, ok := countIn(change.counts, d); ok {
					o.ChangeWatched, o.AtChange = true, distinct(c)
				}
			}
			seen = append(seen, exposure.Entry{Key: exposure.Key{Namespace: d.Namespace, Service: d.Service, Port: d.Port,
				Protocol: string(d.Protocol), Family: string(d.Family), Kind: string(d.Kind), Address: d.Address,
				DestPort: d.DestPort}, Observation: o})
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rec.Decided(now, r.Service.Namespace, r.Service.Name, seen)
	if p.observed != nil {
		x.rec.Check(r.Service.Namespace, r.Service.Name, lbCheckOf(p.observed.snap, r.Service))
	} else {
		x.rec.Check(r.Service.Namespace, r.Service.Name, lbCheckOf(nil, r.Service))
	}
	if !x.log.Enabled(context.Background(), slog.LevelDebug) {
		// The line below is built for every dropped destination of every decision: at info level, not at all.
		return
	}
	for _, e := range seen {
		ep, open := x.rec.Open(e.Key)
		if e.Dropped || open {
			x.log.Debug("exposure: decided", "service", e.Key.Namespace+"/"+e.Key.Service, "kind", e.Key.Kind, "port", e.Key.DestPort,
				"dropped", e.Dropped, "in_rotation", e.InRotation, "losing", e.Losing, "attempts", e.Attempts,
				"last_seen", e.LastSeen, "changed_at", e.ChangedAt, "at_change", e.AtChange, "facts", e.Facts,
				"open", open, "start", ep.Start, "cause", ep.Cause, "counted", ep.Attempts)
		}
	}
}

// healthOf is what the model knows of the Service's health check node port in family f: the answer of the probe
// sent at checkedAt (only a 200 or a 503 says whether kube-proxy counts a ready local endpoint), and the latest
// probe the meter counted arriving there from outside the node (a load balancer's checker), at the node's
// addresses or its load balancer IPs (where some load balancers address their checks).
func healthOf(p *pass, r *ServiceResult, f corev1.IPFamily, checkedAt time.Time) exposure.Health {
	svc := r.Service
	hcDest, ok := healthCheckDest(svc, f)
	if !ok {
		return exposure.Health{}
	}
	h := exposure.Health{Asked: true}
	for _, fc := range r.Checks {
		if fc.Family == f && (fc.StatusCode == http.StatusOK || fc.StatusCode == http.StatusServiceUnavailable) {
			h.Unavailable, h.ProbedAt = fc.StatusCode == http.StatusServiceUnavailable, checkedAt
		}
	}
	if p.observed == nil || p.observed.overloaded || p.observed.snap == nil || p.observed.snap.Status != arrivals.StatusOK {
		return h // the meter off, blind, or missing packets: its silence at the port says nothing
	}
	for _, d := range healthCheckDests(svc, f, hcDest) {
		if c, ok := p.observed.snap.HealthCheck(d); ok {
			h.ProbesWatched = true
			if c.LastSeen.After(h.ProbeLast) {
				h.ProbeLast = c.LastSeen
			}
		}
	}
	return h
}

// healthCheckDests are the meter's destinations of a health check node port in family f: at the node's
// addresses, and at each load balancer IP (arrivalsWatch).
func healthCheckDests(svc kubeview.ServiceState, f corev1.IPFamily, node arrivals.Dest) []arrivals.Dest {
	out := []arrivals.Dest{node}
	lbIPs, _ := svc.AddressesOf(f)
	for _, ip := range lbIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, arrivals.Dest{Protocol: arrivals.TCP, Addr: a.Unmap(), Port: node.Port})
		}
	}
	return out
}

// lbCheckOf is what configures the Service's load balancer's reaction: its cloud annotations' interval and
// threshold, and the cadence of the checkers the meter proved at its health check node port (the shortest,
// where several probe it: the check that takes the node out first).
func lbCheckOf(snap *arrivals.Snapshot, svc kubeview.ServiceState) exposure.LBCheck {
	c := exposure.LBCheck{Interval: svc.LBCheckWindow.Interval, Threshold: svc.LBCheckWindow.Threshold}
	if snap == nil || snap.Status != arrivals.StatusOK {
		return c
	}
	for _, fam := range svc.Families {
		hcDest, ok := healthCheckDest(svc, fam.Family)
		if !ok {
			continue
		}
		for _, d := range healthCheckDests(svc, fam.Family, hcDest) {
			h, _ := snap.HealthCheck(d)
			for _, ch := range h.Checkers {
				if ch.Interval > 0 && (c.Observed == 0 || ch.Interval < c.Observed) {
					c.Observed = ch.Interval
				}
			}
		}
	}
	return c
}

// meterCount is the meter's count at d in the pass's snapshot, when it counts there.
func meterCount(p *pass, d verdict.Destination) (arrivals.DestCount, bool) {
	if p.observed == nil {
		return arrivals.DestCount{}, false
	}
	return countIn(p.observed.snap, d)
}

// countIn is the meter's count at d in snap, when it counts there.
func countIn(snap *arrivals.Snapshot, d verdict.Destination) (arrivals.DestCount, bool) {
	if snap == nil || snap.Status != arrivals.StatusOK {
		return arrivals.DestCount{}, false
	}
	ad, ok := MeterDest(d)
	if !ok {
		return arrivals.DestCount{}, false
	}
	return snap.Dest(ad)
}

// distinct is the count's distinct attempts: its retransmissions not counted again.
func distinct(c arrivals.DestCount) uint64 { return c.Attempts - min(c.Retransmits, c.Attempts) }

// checks refreshes the load balancer's check of each Service that had an episode from the meter's latest counts
// (snap): the checker at its health check node port proves its cadence after the probes' fifth, which need not
// come with a decision of the Service. state finds a Service's state by namespace and name.
func (x *exposureTracker) checks(snap *arrivals.Snapshot, state func(namespace, name string) (kubeview.ServiceState, bool)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range x.rec.Services() {
		if svc, ok := state(k[0], k[1]); ok {
			x.rec.Check(k[0], k[1], lbCheckOf(snap, svc))
		}
	}
}

// gone ends the episodes of a Service that is gone.
func (x *exposureTracker) gone(namespace, name string, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rec.Gone(now, namespace, name)
}

// next is when the earliest episode's quiet period ends (zero: none).
func (x *exposureTracker) next() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rec.Next()
}

func (x *exposureTracker) snapshot() *exposure.Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rec.Snapshot()
}

func (x *exposureTracker) save() *exposure.Saved {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.rec.Save()
	return &s
}

func (x *exposureTracker) restore(s exposure.Saved, fresh bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rec.Restore(s, fresh)
}

// finishedAfter is the recorder's ended episodes after seq, the oldest number kept and the latest.
func (x *exposureTracker) finishedAfter(seq uint64) ([]exposure.Finished, uint64, uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	out, oldest := x.rec.FinishedAfter(seq)
	return out, oldest, x.rec.LastFinished()
}

// FinishedEpisodes is the node's ended exposure episodes numbered after seq, oldest first, with the oldest
// number kept and the latest (exposure.Recorder.FinishedAfter): what /episodes serves. Safe to call from any
// goroutine.
func (g *Gatherer) FinishedEpisodes(seq uint64) (episodes []exposure.Finished, oldest, last uint64) {
	return g.exposure.finishedAfter(seq)
}
