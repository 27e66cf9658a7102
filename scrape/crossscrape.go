package scrape

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// The exporter's only state that outlives a scrape is here (and arrivalTotals, arrivals.go): each kind has its
// own type and its own lock, the Gatherer owns one of each (crossScrape), and concurrent scrapes share them.
// Everything else a scrape reads or decides lives in its State and is gone with it. What of it a restart must
// not lose (dropped-since times, the meter's runs, kube-proxy seen) the state file keeps (statefile.go).

// crossScrape is all a Gatherer carries from one scrape to the next.
type crossScrape struct {
	drops      *dropTotals
	ruleGrowth *ruleGrowth
	kubeProxy  *kubeProxySeen
	configz    *configzCache
	arrivals   *arrivalTotals
	checkers   *checkerWarnings
	gone       *goneSince
	outcomes   *outcomes
	exposure   *exposureTracker // set by NewGatherer: its quiet period is the Gatherer's
}

func newCrossScrape() crossScrape {
	return crossScrape{drops: newDropTotals(), ruleGrowth: newRuleGrowth(), kubeProxy: &kubeProxySeen{},
		configz: &configzCache{}, arrivals: newArrivalTotals(), checkers: newCheckerWarnings(),
		gone: &goneSince{first: map[goneKey]time.Time{}}, outcomes: &outcomes{}}
}

// kubeProxySeen: kube-proxy's rules or health server were seen on this node once. A kube-proxy that later
// vanishes is down, not replaced: its alerts must keep firing. last is when it was last seen (Unix
// nanoseconds, 0: never), kept in the state file so that a restarted exporter remembers it.
type kubeProxySeen struct {
	ever atomic.Bool
	last atomic.Int64
}

// record records that kube-proxy was seen when seen, and reports whether it ever was.
func (k *kubeProxySeen) record(seen bool) bool {
	if seen {
		k.ever.Store(true)
		k.last.Store(time.Now().UnixNano())
		return true
	}
	return k.ever.Load()
}

// configzCache is the last /configz read of kube-proxy's configuration, at at; stale: a probe it placed failed
// since, so kube-proxy may have restarted with another configuration.
type configzCache struct {
	mu    sync.Mutex
	cfg   nodeprobe.KubeProxyConfig
	at    time.Time
	stale bool
}

// fresh returns the cached kube-proxy configuration while younger than configzTTL.
func (c *configzCache) fresh(now time.Time) (nodeprobe.KubeProxyConfig, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || c.stale || now.Sub(c.at) >= configzTTL {
		return nodeprobe.KubeProxyConfig{}, false
	}
	return c.cfg, true
}

// markStale makes the next scrape read /configz again.
func (c *configzCache) markStale() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stale = true
}

// last returns the last successful read, however old.
func (c *configzCache) last() (nodeprobe.KubeProxyConfig, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg, !c.at.IsZero()
}

func (c *configzCache) set(cfg nodeprobe.KubeProxyConfig, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg, c.at, c.stale = cfg, at, false
}

// counterKey names one Service port's drop counter in one family ("" for the merged count of old callers).
type counterKey struct {
	namespace, name, port, protocol, family string
}

// dropTotals are the dropped-packet totals per Service port and family, made monotonic over kube-proxy's rule
// rewrites (localtraffic_rules_dropped_packets_total).
type dropTotals struct {
	mu       sync.Mutex
	counters map[counterKey]*dropCounter
}

// dropCounter turns a rule counter that resets on every kube-proxy sync into a monotonic total.
type dropCounter struct {
	raw   uint64    // the rule counter last seen
	total uint64    // packets counted so far
	at    time.Time // ReadAt of the snapshot last applied
}

func newDropTotals() *dropTotals { return &dropTotals{counters: map[counterKey]*dropCounter{}} }

// count folds a raw rule counter into the key's monotonic total. A raw value below the last one means
// kube-proxy rewrote the rule: the new rule's count is all new packets. Snapshots older than the last one
// applied (two scrapes racing) change nothing.
//
// A counter seen for the first time is a baseline, not growth: kube-proxy's rules outlive the exporter, so
// after the exporter (re)starts the rule already holds whatever it counted before; taken as new packets it
// would show as an increase (Prometheus reads the restarted series' first value as counted since the
// reset) and page on traffic that may be hours old. The total starts at 0 from there.
func (d *dropTotals) count(k counterKey, raw uint64, at time.Time) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.counters[k]
	if c == nil {
		d.counters[k] = &dropCounter{raw: raw, at: at}
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
func (d *dropTotals) forget(seen map[counterKey]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	deleteUnseen(d.counters, seen)
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

// ruleGrowth remembers when each destination's drop rule counter last grew: the counters' evidence of arrivals
// (--externalip.evidence-window, and the loss hold where the meter cannot see).
type ruleGrowth struct {
	mu    sync.Mutex
	rules map[ruleKey]*ruleCounter
}

// ruleCounter remembers when a drop rule's counter last grew.
type ruleCounter struct {
	raw    uint64
	at     time.Time // ReadAt of the snapshot last applied
	grewAt time.Time // zero: never seen growing
}

func newRuleGrowth() *ruleGrowth { return &ruleGrowth{rules: map[ruleKey]*ruleCounter{}} }

// observe records a drop rule's raw counter and returns when it last grew. The counter resets when
// kube-proxy rewrites the rule, so a value below the last one that is not zero is growth too. A value seen
// for the first time is a baseline, not growth (see dropTotals.count): a non-zero counter found after the
// exporter restarts says when traffic arrived only as "some time before", which is no evidence that it still
// does.
func (g *ruleGrowth) observe(k ruleKey, raw uint64, at time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.rules[k]
	if c == nil {
		g.rules[k] = &ruleCounter{raw: raw, at: at}
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

// size is how many drop rules are followed.
func (g *ruleGrowth) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.rules)
}

// forget drops the rule counters not in seen.
func (g *ruleGrowth) forget(seen map[ruleKey]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	deleteUnseen(g.rules, seen)
}

// goneSince is when kube-proxy's rules of a Service port were first read sending traffic to local endpoints the
// API view does not have. The API view can lag kube-proxy's (an informer reconnecting, a slow watch): then the
// endpoint is a new pod the exporter has not heard of, not a deleted one. It is taken for gone only once the
// API view has heard from the API server since that read.
type goneSince struct {
	mu    sync.Mutex
	first map[goneKey]time.Time
}

// confirmed records that the rules read at readAt hold endpoints the API view lacks for k, and reports whether
// the API view is newer than the first such read: apiSeen (when the EndpointSlice informer last heard from the
// API server) after it. Without informers to ask (ok false) it is taken as newer.
func (g *goneSince) confirmed(k goneKey, readAt time.Time, apiSeen time.Time, ok bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first, seen := g.first[k]
	if !seen || readAt.Before(first) {
		first = readAt
		g.first[k] = first
	}
	return !ok || apiSeen.After(first)
}

// forget drops the ports whose rules no longer hold such endpoints (false or absent in seen).
func (g *goneSince) forget(seen map[goneKey]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.first {
		if !seen[k] {
			delete(g.first, k)
		}
	}
}

// forgetService drops the ports of the Service namespace/name whose rules no longer hold such endpoints
// (false or absent in seen; nil: every port of it, the Service is gone).
func (g *goneSince) forgetService(namespace, name string, seen map[goneKey]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.first {
		if k.sp.Namespace == namespace && k.sp.Name == name && !seen[k] {
			delete(g.first, k)
		}
	}
}

// outcomes remembers the last outcome of each recurring read (a probe of kube-proxy's health server per
// endpoint, of a health check node port per Service and family, a listing of the addresses), so that a failure
// is logged at warn when it starts or changes, not at every read: the node model asks every few seconds, and a
// kube-proxy that is down for an hour must not write a thousand lines saying so. The metrics say it all along.
type outcomes struct {
	mu   sync.Mutex
	last map[string]string
}

// changed records outcome for key and reports whether it differs from the last one recorded.
func (o *outcomes) changed(key, outcome string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[string]string{}
	}
	if o.last[key] == outcome {
		return false
	}
	o.last[key] = outcome
	return true
}

// forget drops the keys that start with prefix (a Service gone).
func (o *outcomes) forget(prefix string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.last {
		if strings.HasPrefix(k, prefix) {
			delete(o.last, k)
		}
	}
}
