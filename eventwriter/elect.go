package eventwriter

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// elector is client-go's leader election over a Lease (tools/leaderelection, ReleaseOnCancel), written again
// here because that package imports every API group's client and informers (Clients says what that costs
// every node). The rules are client-go's: a candidate takes the Lease when it has no holder, or when its record
// stopped changing for its LeaseDuration by the candidate's own clock (never by the holder's renewTime, which
// another node's clock wrote); the leader renews every RetryPeriod and gives up when it could not renew within
// RenewDeadline; a leader that stops hands the Lease back (no holder, held 1 s), so that another takes over at
// its next try. Each write is conditional on the resourceVersion read, so two candidates never both win.
type elector struct {
	lock     *cursorLock
	identity string
	timing   Timing
	now      func() time.Time

	observed   record    // the Lease's record as last read or written
	observedAt time.Time // when observed last changed, by this candidate's clock
	holding    bool      // observed names this candidate
}

// run stands until ctx ends: it acquires the Lease, calls lead with a context that ends with the term, renews
// until ctx ends or a renewal fails, then (having handed the Lease back where ctx ended) calls stopped.
func (e *elector) run(ctx context.Context, lead func(context.Context), stopped func()) {
	defer stopped()
	if !e.acquire(ctx) {
		return
	}
	term, end := context.WithCancel(ctx)
	defer end()
	go lead(term)
	e.renew(ctx)
	end()
	if ctx.Err() != nil {
		e.release()
	}
}

// acquire tries every RetryPeriod (with client-go's jitter of up to 1.2×) until it holds the Lease or ctx ends.
func (e *elector) acquire(ctx context.Context) bool {
	for {
		if e.try(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(float64(e.timing.RetryPeriod) * (1 + 1.2*rand.Float64()))):
		}
	}
}

// renew renews every RetryPeriod until ctx ends (true) or a renewal did not succeed within RenewDeadline.
func (e *elector) renew(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.timing.RetryPeriod):
		}
		if !e.renewOnce(ctx) {
			return
		}
	}
}

// renewOnce retries a renewal every RetryPeriod within RenewDeadline.
func (e *elector) renewOnce(ctx context.Context) bool {
	deadline, cancel := context.WithTimeout(ctx, e.timing.RenewDeadline)
	defer cancel()
	for {
		if e.try(deadline) {
			return true
		}
		select {
		case <-deadline.Done():
			return false
		case <-time.After(e.timing.RetryPeriod):
		}
	}
}

// try acquires or renews the Lease once: true if this candidate holds it now.
func (e *elector) try(ctx context.Context) bool {
	now := e.now()
	want := record{Holder: e.identity, LeaseDuration: e.timing.LeaseDuration, Acquire: now, Renew: now}
	cur, err := e.lock.get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		if e.lock.create(ctx, want) != nil {
			return false
		}
		e.observe(want, now)
		return true
	case err != nil:
		return false
	}
	if !cur.same(e.observed) || e.observedAt.IsZero() {
		e.observe(cur, now)
	}
	if cur.Holder != "" && cur.Holder != e.identity && now.Before(e.observedAt.Add(cur.LeaseDuration)) {
		return false // held by another, and changed within its duration
	}
	want.Transitions = cur.Transitions
	if cur.Holder == e.identity {
		want.Acquire = cur.Acquire
	} else {
		want.Transitions++
	}
	if e.lock.update(ctx, want) != nil {
		return false
	}
	e.observe(want, now)
	return true
}

func (e *elector) observe(r record, at time.Time) {
	e.observed, e.observedAt, e.holding = r, at, r.Holder == e.identity
}

// release hands the Lease back if this candidate still holds it: no holder and a duration of 1 s, as client-go
// writes it, and (through the lock) the leader's last cursors.
func (e *elector) release() {
	if !e.holding {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timing.RenewDeadline)
	defer cancel()
	now := e.now()
	rel := record{LeaseDuration: time.Second, Acquire: now, Renew: now, Transitions: e.observed.Transitions}
	if e.lock.update(ctx, rel) == nil {
		e.observe(rel, now)
	}
}
