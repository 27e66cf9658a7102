package scrape

import (
	"context"
	"sync"
	"time"
)

// The node model writes the state file off its own goroutine and never from a scrape: a write syncs the file
// and its directory, which on a busy disk takes as long as the disk wants. stateWriter takes the latest body
// the model offers and writes it when it can; a body offered while one is written replaces any still waiting.

type stateWriter struct {
	sf   *StateFile
	mu   sync.Mutex
	next *stateBody
	wake chan struct{}
	done chan struct{} // closed when run returns
	quit chan struct{} // closed by stop
	once sync.Once
}

func newStateWriter(sf *StateFile) *stateWriter {
	return &stateWriter{sf: sf, wake: make(chan struct{}, 1), done: make(chan struct{}), quit: make(chan struct{})}
}

// post offers b; it never waits for a write.
func (w *stateWriter) post(b stateBody) {
	w.mu.Lock()
	w.next = &b
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes what is posted until ctx ends or stop.
func (w *stateWriter) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		b := w.next
		w.next = nil
		w.mu.Unlock()
		if b != nil {
			w.sf.offer(*b, false)
		}
	}
}

// stop ends run (waiting for a write in progress), so that the last write is the forced one on shutdown.
func (w *stateWriter) stop() {
	w.once.Do(func() { close(w.quit) })
	select {
	case <-w.done:
	case <-time.After(5 * time.Second): // run never started, or a write hangs on the disk
	}
}

// offerState offers the model's state to the file, at most every stateWriteInterval: the state file's own
// rules then decide whether it is written (changed, or due for a refresh). Nothing is offered before the API
// view answered once (StateFile.armed): before that the meter watches nothing, and writing would throw away
// what the file carries over.
func (m *Model) offerState(now time.Time) {
	sf := m.g.cfg.State
	if sf == nil || m.writer == nil {
		return
	}
	sf.mu.Lock()
	if m.m.apiErr == nil {
		sf.armed = true
	}
	armed := sf.armed
	sf.mu.Unlock()
	if !armed || now.Sub(m.m.statePosted) < stateWriteInterval {
		return
	}
	m.m.statePosted = now
	m.writer.post(m.g.stateBody(m.m.meterSnap, sf.cfg.Horizon))
}
