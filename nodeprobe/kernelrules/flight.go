package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// sharedRead runs at most one call of a function at a time for all its callers
// (single flight) and hands a kept result to callers for ttl. It knows nothing
// of what the function reads.
type sharedRead[T any] struct {
	ttl  time.Duration             // <= 0: results are shared only while in flight
	now  func() time.Time          // clock for ttl
	keep func(v T, err error) bool // whether a finished result may be reused

	mu       sync.Mutex
	inflight *flightCall[T]
	last     *flightCall[T] // last kept result
	lastAt   time.Time
	// epoch counts forget calls: a call started before the last one is
	// neither kept nor joined.
	epoch uint64
}

type flightCall[T any] struct {
	done  chan struct{}
	v     T
	err   error
	epoch uint64
}

// forget drops the kept result and marks the call in flight, if any, as
// started too early: the next Do runs the function again (after the one in
// flight). The watcher calls it when what the function reads changed.
func (s *sharedRead[T]) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = nil
	s.epoch++
}

// Do returns a kept result younger than ttl, or joins the call in flight, or
// starts one with the caller's context. A waiter whose own context is alive
// starts a new call when the one it waited for was ended by its leader's context.
func (s *sharedRead[T]) Do(ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	for {
		s.mu.Lock()
		if s.last != nil && s.ttl > 0 && s.now().Sub(s.lastAt) < s.ttl {
			c := s.last
			s.mu.Unlock()
			return c.v, c.err
		}
		c := s.inflight
		leader := c == nil
		if leader {
			c = &flightCall[T]{done: make(chan struct{}), epoch: s.epoch}
			s.inflight = c
		}
		stale := c.epoch != s.epoch
		s.mu.Unlock()

		if leader {
			s.lead(ctx, c, fn)
			return c.v, c.err
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("waiting for the rule read in flight: %w", ctx.Err())
		}
		if stale {
			continue // it began before what it reads changed: read again
		}
		if c.err != nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) && ctx.Err() == nil {
			continue
		}
		return c.v, c.err
	}
}

// lead runs fn and publishes its result; the deferred part also runs if fn
// panics, so waiters are never stuck.
func (s *sharedRead[T]) lead(ctx context.Context, c *flightCall[T], fn func(context.Context) (T, error)) {
	c.err = errors.New("rule read did not complete")
	defer func() {
		s.mu.Lock()
		s.inflight = nil
		if s.keep(c.v, c.err) && c.epoch == s.epoch {
			s.last, s.lastAt = c, s.now()
		}
		s.mu.Unlock()
		close(c.done)
	}()
	c.v, c.err = fn(ctx)
}
