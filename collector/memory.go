package collector

import (
	"sync"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// Memory is the exporter's only state that outlives a scrape: the dropped-packet totals, made monotonic over
// kube-proxy's rule rewrites, and when each address's drop rule last grew (externalIP evidence). The exporter
// owns one; concurrent scrapes share it.
type Memory struct {
	mu       sync.Mutex
	counters map[counterKey]*dropCounter
	rules    map[ruleKey]*ruleCounter
	// kubeProxySeen: kube-proxy's rules or health server were seen on this node once. A kube-proxy that
	// later vanishes is down, not replaced: its alerts must keep firing.
	kubeProxySeen bool
	// kubeProxyConfig is the last /configz read of kube-proxy's configuration, at configzAt; configzStale: a
	// probe it placed failed since, so kube-proxy may have restarted with another configuration.
	kubeProxyConfig nodeprobe.KubeProxyConfig
	configzAt       time.Time
	configzStale    bool
	// arrivals makes the arrivals meter's counts monotonic per node and remembers since when each
	// destination is dropped (its own lock).
	arrivals *arrivalTotals
}

// configz returns the cached kube-proxy configuration while younger than configzTTL.
func (m *Memory) configz(now time.Time) (nodeprobe.KubeProxyConfig, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.configzAt.IsZero() || m.configzStale || now.Sub(m.configzAt) >= configzTTL {
		return nodeprobe.KubeProxyConfig{}, false
	}
	return m.kubeProxyConfig, true
}

// staleConfigz makes the next scrape read /configz again.
func (m *Memory) staleConfigz() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.configzStale = true
}

// lastConfigz returns the last successful read, however old.
func (m *Memory) lastConfigz() (nodeprobe.KubeProxyConfig, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kubeProxyConfig, !m.configzAt.IsZero()
}

func (m *Memory) setConfigz(cfg nodeprobe.KubeProxyConfig, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kubeProxyConfig, m.configzAt, m.configzStale = cfg, at, false
}

// sawKubeProxy records that kube-proxy was seen when seen, and reports whether it ever was.
func (m *Memory) sawKubeProxy(seen bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kubeProxySeen = m.kubeProxySeen || seen
	return m.kubeProxySeen
}

// counterKey names one Service port's drop counter in one family ("" for the merged count of old callers).
type counterKey struct {
	namespace, name, port, protocol, family string
}

// dropCounter turns a rule counter that resets on every kube-proxy sync into a monotonic total.
type dropCounter struct {
	raw   uint64    // the rule counter last seen
	total uint64    // packets counted so far
	at    time.Time // ReadAt of the snapshot last applied
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{counters: map[counterKey]*dropCounter{}, rules: map[ruleKey]*ruleCounter{}, arrivals: newArrivalTotals()}
}

// countDrops folds a raw rule counter into the key's monotonic total. A raw value below the last one means
// kube-proxy rewrote the rule: the new rule's count is all new packets. Snapshots older than the last one
// applied (two scrapes racing) change nothing.
//
// A counter seen for the first time is a baseline, not growth: kube-proxy's rules outlive the exporter, so
// after the exporter (re)starts the rule already holds whatever it counted before; taken as new packets it
// would show as an increase (Prometheus reads the restarted series' first value as counted since the
// reset) and page on traffic that may be hours old. The total starts at 0 from there.
func (m *Memory) countDrops(k counterKey, raw uint64, at time.Time) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counters[k]
	if c == nil {
		m.counters[k] = &dropCounter{raw: raw, at: at}
		return 0
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
	deleteUnseen(m.counters, seen)
}

func deleteUnseen[K comparable, V any](m map[K]V, seen map[K]bool) {
	for k := range m {
		if !seen[k] {
			delete(m, k)
		}
	}
}

// ruleKey names one drop rule: a destination of one Service port in one family.
type ruleKey struct {
	counterKey
	family  string
	address string
	port    int32
}

// ruleCounter remembers when a drop rule's counter last grew.
type ruleCounter struct {
	raw    uint64
	at     time.Time // ReadAt of the snapshot last applied
	grewAt time.Time // zero: never seen growing
}

// observeRule records a drop rule's raw counter and returns when it last grew. The counter resets when
// kube-proxy rewrites the rule, so a value below the last one that is not zero is growth too. A value seen
// for the first time is a baseline, not growth (see countDrops): a non-zero counter found after the exporter
// restarts says when traffic arrived only as "some time before", which is no evidence that it still does.
func (m *Memory) observeRule(k ruleKey, raw uint64, at time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.rules[k]
	if c == nil {
		m.rules[k] = &ruleCounter{raw: raw, at: at}
		return time.Time{}
	}
	if !c.at.IsZero() && !at.After(c.at) {
		return c.grewAt
	}
	if raw > c.raw || raw < c.raw && raw > 0 {
		c.grewAt = at
	}
	c.raw, c.at = raw, at
	return c.grewAt
}

// forgetRules drops the rule counters not in seen.
func (m *Memory) forgetRules(seen map[ruleKey]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	deleteUnseen(m.rules, seen)
}
