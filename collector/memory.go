package collector

import (
	"sync"
	"time"
)

// Memory is the exporter's only state that outlives a scrape: the dropped-packet totals, made monotonic over
// kube-proxy's rule rewrites. The exporter owns one; concurrent scrapes share it.
type Memory struct {
	mu       sync.Mutex
	counters map[counterKey]*dropCounter
}

// counterKey names one drop rule counter the exporter totals.
type counterKey struct {
	namespace, name, port, protocol string
}

// dropCounter turns a rule counter that resets on every kube-proxy sync into a monotonic total.
type dropCounter struct {
	raw   uint64    // the rule counter last seen
	total uint64    // packets counted so far
	at    time.Time // ReadAt of the snapshot last applied
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{counters: map[counterKey]*dropCounter{}}
}

// countDrops folds a raw rule counter into the key's monotonic total. A raw value below the last one means
// kube-proxy rewrote the rule: the new rule's count is all new packets. Snapshots older than the last one
// applied (two scrapes racing) change nothing.
func (m *Memory) countDrops(k counterKey, raw uint64, at time.Time) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counters[k]
	if c == nil {
		c = &dropCounter{}
		m.counters[k] = c
	}
	if !c.at.IsZero() && !at.After(c.at) {
		return c.total
	}
	if raw >= c.raw {
		c.total += raw - c.raw
	} else {
		c.total += raw
	}
	c.raw, c.at = raw, at
	return c.total
}

// forget drops the counters not in seen, so state does not grow with deleted Services.
func (m *Memory) forget(seen map[counterKey]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.counters {
		if !seen[k] {
			delete(m.counters, k)
		}
	}
}
