package scrape

import (
	"container/heap"
	"slices"
	"time"
)

// The model's schedule: which Services to decide and which health check node ports to probe at a step, found
// without a pass over every Service. At 10,000 Services, a step's passes over all of them (to find the few
// that changed or came due) cost more than deciding those few.

// timed is one entry's time in a timeQueue.
type timed struct {
	at time.Time
	e  *entry
}

// timeQueue is a min-heap of entries' times. Removal is lazy: a time the entry no longer has (it was decided
// or probed again meanwhile, or it is gone) is dropped when it surfaces, so a time is pushed whenever one is set
// and never looked for.
type timeQueue []timed

func (q timeQueue) Len() int           { return len(q) }
func (q timeQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q timeQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *timeQueue) Push(x any)        { *q = append(*q, x.(timed)) }
func (q *timeQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// push adds e's time at (none when zero).
func (q *timeQueue) push(at time.Time, e *entry) {
	if !at.IsZero() {
		heap.Push(q, timed{at: at, e: e})
	}
}

// peek is the earliest time live holds for, dropping the ones before it that it does not hold for.
func (q *timeQueue) peek(live func(timed) bool) (timed, bool) {
	for q.Len() > 0 {
		if it := (*q)[0]; live(it) {
			return it, true
		}
		heap.Pop(q)
	}
	return timed{}, false
}

// pop removes the earliest time (after peek found it live).
func (q *timeQueue) pop() { heap.Pop(q) }

// current: e is still the model's entry for its Service.
func (s *modelState) current(e *entry) bool { return s.services[e.key] == e }

// wakeLive: the time is still one the entry will be decided at (its due or sweep time).
func (s *modelState) wakeLive(it timed) bool {
	return s.current(it.e) && (it.at.Equal(it.e.due) || it.at.Equal(it.e.sweep))
}

// checkLive: the time is still the entry's next health check probe.
func (s *modelState) checkLive(it timed) bool {
	e := it.e
	return s.current(e) && probed(e.state) && len(e.checkDue) > 0 && it.at.Equal(e.checkDue[0])
}

// markDirty: an input of e changed, so the next step decides it again.
func (s *modelState) markDirty(e *entry) {
	if !e.dirty {
		e.dirty = true
		s.dirty = append(s.dirty, e)
	}
}

// scheduled records e's times after it was decided: when a time-driven change may come, and its sweep; and
// whether its rules send traffic to endpoints the API view lacks, not yet confirmed gone (gonePending): then
// it is decided again when the API view next hears from the API server.
func (s *modelState) scheduled(e *entry, gonePending bool) {
	s.wakes.push(e.due, e)
	s.wakes.push(e.sweep, e)
	if gonePending {
		s.gone[e] = true
	} else {
		delete(s.gone, e)
	}
}

// checkSoon records e's next health check probe time.
func (s *modelState) checkSoon(e *entry) {
	if probed(e.state) && len(e.checkDue) > 0 {
		s.checks.push(e.checkDue[0], e)
	}
}

// probeNext is the earliest time a health check probe is due (zero: none).
func (s *modelState) probeNext() time.Time {
	it, _ := s.checks.peek(s.checkLive)
	return it.at
}

// due is what a step at now decides when not every Service: the ones marked dirty, the ones whose due or sweep
// time came, and (apiMoved) the ones waiting for the API view to confirm endpoints gone; in the order of the
// Services' keys, each once.
func (s *modelState) due(now time.Time, apiMoved bool) []*entry {
	out := s.dirty
	s.dirty = nil
	for {
		it, ok := s.wakes.peek(s.wakeLive)
		if !ok || it.at.After(now) {
			break
		}
		s.wakes.pop()
		out = append(out, it.e)
	}
	if apiMoved {
		for e := range s.gone {
			out = append(out, e)
		}
	}
	out = slices.DeleteFunc(out, func(e *entry) bool { return !s.current(e) })
	slices.SortFunc(out, func(a, b *entry) int { return a.idx - b.idx })
	return slices.Compact(out)
}
