package scrape

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// addSources adds to obs what the meter told apart at a NodePort: the clients' count and the steady sources
// (verdict.Observation.Clients, Checkers).
func (o *observations) addSources(obs *verdict.Observation, c arrivals.DestCount) {
	if !c.SetAside {
		return
	}
	obs.SetAside = true
	obs.Clients = verdict.ClientAttempts{Attempts: c.Clients.Attempts, ActiveSince: c.Clients.ActiveSince,
		LastSeen: c.Clients.LastSeen, Ongoing: c.Clients.Attempts > 0 && o.now.Sub(c.Clients.LastSeen) < o.quiet,
		Repeated: o.repeated(c.Clients.Repeated)}
	obs.Clients.Silent = !obs.Clients.Repeated.Ongoing && o.now.Sub(c.WatchedSince) >= o.quiet
	for _, ch := range c.Checkers {
		obs.Checkers = append(obs.Checkers, verdict.Checker{Addr: ch.Addr.String(), Interval: ch.Interval})
	}
}

// checkerWarnings says once per destination that the arrivals at a dropped NodePort come from steady sources
// alone, taken as a load balancer's health checks: a person can then check the guess and settle it with the
// Service's annotation. A warning, not a page: nothing is lost if the guess is right, and the annotation
// (none) turns those sources back into clients if it is wrong.
type checkerWarnings struct {
	mu     sync.Mutex
	warned map[verdict.Destination]bool
}

func newCheckerWarnings() *checkerWarnings {
	return &checkerWarnings{warned: map[verdict.Destination]bool{}}
}

// warn logs each destination of results newly found with steady sources set aside and no client, once for as
// long as the destination exists, and forgets the destinations that are gone (so the map stays as small as
// the node's Services).
func (w *checkerWarnings) warn(results []*ServiceResult, log *slog.Logger) {
	seen := map[verdict.Destination]bool{}
	for _, r := range results {
		for _, fv := range r.Verdict.Families {
			for _, e := range fv.Entries {
				seen[e.Destination] = true
			}
		}
		w.warnEntries(r, log)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for d := range w.warned {
		if !seen[d] {
			delete(w.warned, d)
		}
	}
}

// warnEntries logs the warning for each destination of r newly found with steady sources set aside and no
// client.
func (w *checkerWarnings) warnEntries(r *ServiceResult, log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fv := range r.Verdict.Families {
		for _, e := range fv.Entries {
			if len(e.Checkers) == 0 || !e.Dropped || e.Losing || w.warned[e.Destination] {
				continue
			}
			w.warned[e.Destination] = true
			log.Warn("only steady sources arrive at a NodePort this node drops: taken as a load balancer's health checks, not as clients, so they page nothing",
				"namespace", e.Namespace, "service", e.Service, "destination", e.Destination.String(),
				"sources", verdict.CheckersString(e.Checkers),
				"settle", fmt.Sprintf("kubectl -n %s annotate service %s %s=%s (they are health checks) or =%s (they are clients)",
					e.Namespace, e.Service, announce.AnnotationHealthCheck, announce.CheckTrafficPort, announce.CheckNone))
		}
	}
}

// warnService is warn for one Service's result, as the node model decides them one at a time.
func (w *checkerWarnings) warnService(r *ServiceResult, log *slog.Logger) {
	w.forgetService(r.Service.Namespace, r.Service.Name, r)
	w.warnEntries(r, log)
}

// forgetService forgets the warnings of a Service's destinations that keep (nil: none: the Service is gone).
func (w *checkerWarnings) forgetService(namespace, name string, keep *ServiceResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	still := map[verdict.Destination]bool{}
	if keep != nil {
		for _, fv := range keep.Verdict.Families {
			for _, e := range fv.Entries {
				still[e.Destination] = true
			}
		}
	}
	for d := range w.warned {
		if d.Namespace == namespace && d.Service == name && !still[d] {
			delete(w.warned, d)
		}
	}
}
