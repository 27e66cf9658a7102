package rules

import "sync"

// DropCounter turns PortState.DropPackets — a rule counter that restarts from
// zero whenever kube-proxy rewrites the rule (every sync of the ≥1.25 filter
// table) — into a total per Service port that never decreases, for a Prometheus
// counter. A raw value below the previous one is read as a reset: the new raw
// value is added whole. Packets counted between a reset and the read before it
// are lost (the old rule's final count is never seen), so the total is a lower
// bound. Safe for concurrent use; the zero value is ready.
type DropCounter struct {
	mu    sync.Mutex
	last  map[ServicePort]uint64
	total map[ServicePort]uint64
}

// Observe records a raw DropPackets value for sp and returns the running total.
func (c *DropCounter) Observe(sp ServicePort, raw uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last, c.total = map[ServicePort]uint64{}, map[ServicePort]uint64{}
	}
	last, seen := c.last[sp]
	switch {
	case !seen || raw < last:
		c.total[sp] += raw
	default:
		c.total[sp] += raw - last
	}
	c.last[sp] = raw
	return c.total[sp]
}

// Retain forgets the ports for which keep returns false (e.g. Services deleted
// from the API), so the counter does not grow with churn.
func (c *DropCounter) Retain(keep func(ServicePort) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sp := range c.total {
		if !keep(sp) {
			delete(c.total, sp)
			delete(c.last, sp)
		}
	}
}
