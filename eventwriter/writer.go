// Package eventwriter writes one Kubernetes Event per ended exposure episode, from one writer per cluster.
// Every exporter serves its node's ended episodes at /episodes (package exposure keeps them); the exporters
// started with --events.write elect a leader over a Lease, and the leader alone polls every exporter listed in
// the EndpointSlices of their own Service and writes an events.k8s.io/v1 Event regarding each episode's
// Service. How far it got with each peer (its process's instance id, the last episode's number) rides on the
// Lease, so that a new leader goes on where the old one stopped; each Event's name is derived from its episode,
// so that one found again is AlreadyExists, never a duplicate. Writes pass a token bucket; repeats at one
// destination that waited for it together become one Event's series. Off, nothing here runs.
package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// Timing is the leader election's: client-go's usual values (a Lease held 15 s, renewed every 2 s).
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultTiming is what Run elects with.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// peerFetches is how many peers the leader asks at once: a thousand nodes polled within a few timeouts.
const peerFetches = 16

// Writer is one exporter's candidacy, and its writing while it leads.
type Writer struct {
	cfg     Config
	c       Clients
	peers   *peerClient
	lock    *cursorLock
	limiter *rate.Limiter
	timing  Timing
	now     func() time.Time
	log     *slog.Logger
	m       *metrics
	// leading is held by the leader's loop: a loop of a newer term waits for the one before to have ended.
	leading sync.Mutex
	// failing is each failing peer's kind of failure, held by the leader's loop: a failure is logged when it
	// begins or changes, and a peer's recovery once, not every poll (a thousand peers refusing the leader's
	// token would otherwise log a thousand lines per poll). The gauge counts them at every poll.
	failing map[string]string
	// lookups is, per Service whose pods could not be read for its notes, the kind of failure, held by the
	// leader's loop: logged when it begins or changes, counted at every Event.
	lookups map[string]string
}

// New builds the writer of cfg (Validate has checked it).
func New(cfg Config, c Clients, log *slog.Logger) (*Writer, error) {
	pc, err := newPeerClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Writer{cfg: cfg, c: c, peers: pc, timing: DefaultTiming, now: time.Now, log: log, m: newMetrics(),
		lock:    &cursorLock{client: c.Leases, namespace: cfg.LeaseNamespace, name: cfg.LeaseName, identity: cfg.Identity},
		limiter: rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst)}, nil
}

// Run stands for election until ctx ends, and writes while it leads; on the way out a leader hands the Lease
// back (with its cursors), so that another takes over at its next try rather than after the Lease expires.
// With the writer off it returns at once, having touched nothing.
func (w *Writer) Run(ctx context.Context) {
	if !w.cfg.Enabled {
		return
	}
	e := &elector{lock: w.lock, identity: w.cfg.Identity, timing: w.timing, now: w.now}
	for ctx.Err() == nil {
		// Returns when ctx ends or the Lease is lost: then stand again.
		e.run(ctx, w.lead, func() {
			w.lock.stop()
			w.m.leader.Set(0)
		})
	}
}

// lead is the leader's loop: poll every peer, write what ended, until the term ends.
func (w *Writer) lead(ctx context.Context) {
	w.leading.Lock()
	defer w.leading.Unlock()
	if ctx.Err() != nil {
		return
	}
	cursors := w.lock.start()
	w.failing = map[string]string{} // a new term says again what fails
	w.lookups = map[string]string{}
	w.m.leader.Set(1)
	w.log.Info("event writer: leading", "lease", w.lock.Describe(), "identity", w.cfg.Identity, "peers_known", len(cursors))
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	for {
		w.poll(ctx, cursors)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fetched is one peer's answer at a poll.
type fetched struct {
	page exposure.Page
	err  error
}

// poll asks every peer for what ended since its cursor and writes it.
func (w *Writer) poll(ctx context.Context, cursors map[string]Cursor) {
	peers, err := listPeers(ctx, w.c.Slices, w.cfg.PeersNamespace, w.cfg.PeersService, w.cfg.PeersScheme)
	if err != nil {
		w.log.Warn("event writer: cannot list peers", "err", err)
		return
	}
	present := map[string]bool{}
	for _, p := range peers {
		present[p.key] = true
	}
	// A peer gone from the Service (its node removed) needs no cursor; one back later is a new process anyway.
	// No peer at all is more likely a moment of the exporters' own rollout: the cursors are kept then.
	if len(peers) > 0 {
		maps.DeleteFunc(cursors, func(k string, _ Cursor) bool { return !present[k] })
	}
	results := make([]fetched, len(peers))
	sem := make(chan struct{}, peerFetches)
	var wg sync.WaitGroup
	for i, p := range peers {
		cur := cursors[p.key]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i].page, results[i].err = w.fetch(ctx, p, cur)
		}()
	}
	wg.Wait()
	if w.failing == nil {
		w.failing = map[string]string{}
	}
	maps.DeleteFunc(w.failing, func(k string, _ string) bool { return !present[k] })
	unreachable := 0
	for i, p := range peers {
		if ctx.Err() != nil {
			return
		}
		if err := results[i].err; err != nil {
			unreachable++
			kind := "unreachable"
			if ep, ok := errors.AsType[*errPeer](err); ok {
				kind = ep.kind
			}
			if w.failing[p.key] != kind {
				w.log.Warn("event writer: peer did not answer usably", "peer", p.key, "url", p.url, "err", err)
			}
			w.failing[p.key] = kind
			continue
		}
		if _, ok := w.failing[p.key]; ok {
			w.log.Info("event writer: peer answers again", "peer", p.key, "url", p.url)
			delete(w.failing, p.key)
		}
		w.handle(ctx, p, results[i].page, cursors)
		w.lock.setCursors(cursors)
	}
	w.m.unreachable.Set(float64(unreachable))
	w.lock.setCursors(cursors)
}

// fetch asks p for its episodes after cur, within the per-peer timeout; a peer whose process is not cur's
// (restarted) is asked again from its start.
func (w *Writer) fetch(ctx context.Context, p peer, cur Cursor) (exposure.Page, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.PeerTimeout)
	defer cancel()
	pg, err := w.peers.page(ctx, p, cur.Seq)
	if err != nil || pg.Instance == cur.Instance || cur.Seq == 0 {
		return pg, err
	}
	return w.peers.page(ctx, p, 0)
}

// handle writes the Events of one peer's page, in order, and moves its cursor past each: it stops at the first
// episode the rate limit holds back, or whose write failed in a way a retry may mend.
func (w *Writer) handle(ctx context.Context, p peer, pg exposure.Page, cursors map[string]Cursor) {
	cur := cursors[p.key]
	if cur.Instance != pg.Instance {
		if cur.Instance != "" {
			w.log.Info("event writer: peer restarted, reading its episodes from the start", "peer", p.key, "instance", pg.Instance)
		}
		cur = Cursor{Instance: pg.Instance}
	}
	if pg.Oldest > cur.Seq+1 && pg.Last > cur.Seq {
		missed := pg.Oldest - cur.Seq - 1
		w.m.missed.Add(float64(missed))
		w.log.Warn("event writer: peer no longer keeps episodes it was not asked for in time", "peer", p.key, "missed", missed)
		cur.Seq = pg.Oldest - 1
	}
	cursors[p.key] = cur
	eps := pg.Episodes
	for i := 0; i < len(eps); {
		r := run{node: pg.Node, eps: eps[i : i+1]}
		for j := i + 1; j < len(eps) && r.sameRun(eps[j]); j++ {
			r.eps = eps[i : j+1]
		}
		if !w.limiter.AllowN(w.now(), 1) {
			return // the rest waits for the next poll, from this cursor
		}
		result, retry := w.write(ctx, r)
		w.m.events.WithLabelValues(result).Inc()
		if retry {
			return
		}
		i += len(r.eps)
		cur.Seq = r.eps[len(r.eps)-1].Seq
		cursors[p.key] = cur
	}
}

// errServiceGone: the episode's Service no longer exists; an Event regarding it would regard nothing.
var errServiceGone = errors.New("the Service is gone")

// write creates run r's Event: its result label, and whether to try it again at the next poll (a failure a
// retry may mend: refused, throttled, the API unreachable).
func (w *Writer) write(ctx context.Context, r run) (result string, retry bool) {
	first := r.eps[0]
	svc, err := w.service(ctx, first.Key.Namespace, first.Key.Service)
	if err == nil {
		ev := newEvent(r, svc.UID, w.cfg.Identity, w.backing(ctx, svc))
		if _, err = w.c.Events.Create(ctx, ev); err == nil {
			w.log.Info("event writer: wrote", "event", ev.Namespace+"/"+ev.Name, "type", ev.Type, "note", ev.Note)
			return ResultWritten, false
		}
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return ResultSkipped, false // a writer before this one wrote it
	case errors.Is(err, errServiceGone):
		return ResultSkipped, false
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		w.log.Error("event writer: the API refused the Event as invalid; not retried", "service", first.Key.Namespace+"/"+first.Key.Service, "err", err)
		return ResultFailed, false
	}
	w.log.Warn("event writer: cannot write, retrying at the next poll", "service", first.Key.Namespace+"/"+first.Key.Service, "err", err)
	return ResultFailed, true
}

// service is Service namespace/name, listed by name.
func (w *Writer) service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	list, err := w.c.Services.List(ctx, namespace, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return nil, fmt.Errorf("looking up Service %s/%s: %w", namespace, name, err)
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], nil
		}
	}
	return nil, errServiceGone
}

// backing reads svc's pods for a note; where it cannot (forbidden, the pods gone, the API slow) it counts that,
// logs it once per Service and kind of failure, and returns nil: the Event is written without them.
func (w *Writer) backing(ctx context.Context, svc *corev1.Service) *backing {
	b, err := w.lookupBacking(ctx, svc)
	key := svc.Namespace + "/" + svc.Name
	if w.lookups == nil {
		w.lookups = map[string]string{}
	}
	if err == nil {
		delete(w.lookups, key)
		return b
	}
	w.m.lookupsFailed.Inc()
	kind := lookupFailure(err)
	if w.lookups[key] != kind {
		w.log.Warn("event writer: cannot read the Service's pods; its notes name no workload nor preStop", "service", key, "err", err)
	}
	w.lookups[key] = kind
	return nil
}

// lookupFailure is the kind of a failed pods lookup, which its log line is said again at a change of.
func lookupFailure(err error) string {
	switch {
	case errors.Is(err, errNoPods):
		return "no pods"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsNotFound(err):
		return "not found"
	}
	return "other"
}
