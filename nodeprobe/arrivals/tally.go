package arrivals

import (
	"net/netip"
	"slices"
	"time"
)

// tally counts decoded packets against the current Watch. It is not safe for concurrent use: the Meter holds
// its lock around every call.
type tally struct {
	cfg   Config
	watch Watch
	// clk is the timeline of every time kept below (the zero clock in tests that count by hand).
	clk meterClock

	dests  []destCount
	checks []checkCount
	// idx maps a destination to its index in dests (≥ 0) or in checks (-1-index): one lookup per packet.
	idx map[Dest]int
	// node is Watch.NodeAddrs: a few addresses, compared in a loop.
	node []netip.Addr

	fam [2]famCount // IPv4, IPv6

	// links names the interface a packet arrived on, for Watch.InternalLinks.
	links linkNames
	// internalAddrs and internalNets are Watch.Internal split: single addresses in a set, prefixes in a list.
	internalAddrs map[netip.Addr]bool
	internalNets  []netip.Prefix
	// restored holds runs an earlier meter counted (Meter.Restore) until setWatch adds their destinations.
	restored map[Dest]restoredRun
	// activity grows with every arrival or probe counted and every new Watch (Meter.Activity).
	activity uint64
}

type famCount struct{ internal, unmatched uint64 }

// runCount is a counter with its first, last and active-since times, as unix nanoseconds (no time.Time per
// packet: it is three words and carries a location).
type runCount struct {
	n                   uint64
	first, last, active int64
	watchedSince        int64
}

func (r *runCount) add(at int64, quiet int64) {
	if r.n == 0 || at-r.last >= quiet {
		r.active = at
	}
	if r.n == 0 {
		r.first = at
	}
	r.n++
	if at > r.last {
		r.last = at
	}
}

type destCount struct {
	dest Dest
	runCount
	src      *destSources // from its first arrival: its sources' repeats, and at NodePorts their cadence (sources.go)
	flows    *destFlows   // UDP only, from its first datagram: pinned flows or new ones (flows.go)
	restored uint64       // attempts an earlier meter counted (Meter.Restore)
	// restoredRun is that earlier meter's run: repeated arrivals, for the state file keeps no sources; when
	// the earlier meter told checkers from clients (told), restoredClients is the clients' part of it.
	restoredRun, restoredClients runCount
	told                         bool
}

// destCount is d's count at taken; its checkers are appended to checkers (fillSources).
func (t *tally) destCount(d *destCount, taken time.Time, checkers []CheckerSource) (DestCount, []CheckerSource) {
	c := DestCount{Dest: d.dest, Attempts: d.n, FirstSeen: t.nsTime(d.first), LastSeen: t.nsTime(d.last),
		ActiveSince: t.nsTime(d.active), WatchedSince: t.nsTime(d.watchedSince), Restored: d.restored,
		Owner: t.watch.Owners[d.dest]}
	if d.flows != nil {
		c.LastNewFlow = t.nsTime(d.flows.lastNew)
	}
	if d.src != nil {
		c.Retransmits = d.src.retransmits()
		c.LastAttempt = t.nsTime(d.src.lastAttempt)
	}
	r := restoredRun{run: d.restoredRun, clients: d.restoredClients, told: d.told}
	checkers = t.fillSources(&c, d.runCount, r, d.src, t.clk.ns(taken), int64(t.cfg.QuietPeriod), checkers)
	return c, checkers
}

// idle: nothing was counted at the destination, nor restored; its DestCount would be zero but for
// WatchedSince (Snapshot.Idle).
func (d *destCount) idle() bool {
	return d.n == 0 && d.restored == 0 && d.restoredRun.n == 0 && d.src == nil && d.flows == nil
}

type checkCount struct {
	dest Dest
	runCount
	sources []sourceCount // bounded by cfg.MaxSources, unordered
	evicted uint64
	// cadence follows the probers' clocks (sources.go), from the first probe, for at most checkSources of
	// them: a load balancer's checker proves its interval there (HealthCheckCount.Checkers).
	cadence *destSources
}

// checkSources bounds the probers whose cadence is followed per health check node port: a load balancer's
// checks come from a few addresses, and one proven clock is its interval; each costs a few hundred bytes for
// every health-checked Service.
const checkSources = 4

type sourceCount struct {
	addr netip.Addr
	n    uint64
	last int64
}

func newTally(cfg Config, linkName func(ifindex int32) (string, error)) *tally {
	return &tally{cfg: cfg, idx: map[Dest]int{}, links: linkNames{resolve: linkName}}
}

// nsTime is ns on the tally's timeline as a time.
func (t *tally) nsTime(ns int64) time.Time { return t.clk.time(ns) }

// setWatch switches to w (normalised), keeping the counts of destinations watched before and after by the
// same owner.
func (t *tally) setWatch(w Watch, now time.Time) {
	nowNs := t.clk.ns(now)
	idx := make(map[Dest]int, len(w.Dests)+len(w.HealthChecks))
	dests := make([]destCount, len(w.Dests))
	// A destination whose owner changed starts afresh (Watch.Owners): its sources' clocks and roles were
	// learnt of another Service's traffic.
	kept := func(d Dest) bool { return sameOwner(t.watch.Owners[d], w.Owners[d]) }
	for i, d := range w.Dests {
		dests[i] = destCount{dest: d, runCount: runCount{watchedSince: nowNs}}
		if j, ok := t.idx[d]; ok && j >= 0 && kept(d) {
			dests[i] = t.dests[j]
		} else if rc, ok := t.takeRestored(d); ok && sameOwner(rc.owner, w.Owners[d]) {
			dests[i] = destCount{dest: d, runCount: rc.run, restored: rc.run.n, restoredRun: rc.run,
				restoredClients: rc.clients, told: rc.told}
			if d.IsNode() {
				dests[i].src = t.restoredSources(rc)
			}
		}
		idx[d] = i
	}
	checks := make([]checkCount, len(w.HealthChecks))
	for i, d := range w.HealthChecks {
		checks[i] = checkCount{dest: d, runCount: runCount{watchedSince: nowNs}}
		if j, ok := t.idx[d]; ok && j < 0 && kept(d) {
			checks[i] = t.checks[-1-j]
		}
		idx[d] = -1 - i
	}
	t.watch, t.dests, t.checks, t.idx, t.node = w, dests, checks, idx, w.NodeAddrs
	t.activity++
	// Single addresses (the node's own, kube-proxy's --src-type LOCAL: in IPVS mode every Service address bound
	// to kube-ipvs0) go in a set, so a packet costs one lookup however many there are; only real prefixes are
	// scanned.
	t.internalAddrs, t.internalNets = map[netip.Addr]bool{}, nil
	for _, p := range w.Internal {
		if p.IsSingleIP() {
			t.internalAddrs[p.Addr()] = true
		} else {
			t.internalNets = append(t.internalNets, p)
		}
	}
	// A restored run this Watch did not add belongs to a Service that is gone.
	t.restored = nil
}

// match finds the watched destination of p: an index into t.dests or t.checks, -1 for neither. An exact
// destination (an LB or external IP) wins over the node's own (a NodePort) when the node holds that IP.
func (t *tally) match(p packet) (di, ci int) {
	if p.dst.IsUnspecified() {
		return -1, -1 // NodeDest's key: a packet addressed to 0.0.0.0 is nobody's arrival
	}
	key := Dest{Protocol: p.proto, Addr: p.dst, Port: p.dport}
	i, ok := t.idx[key]
	if !ok && slices.Contains(t.node, p.dst) {
		key.Addr = netip.IPv4Unspecified()
		if p.dst.Is6() {
			key.Addr = netip.IPv6Unspecified()
		}
		i, ok = t.idx[key]
	}
	switch {
	case !ok:
		return -1, -1
	case i >= 0:
		return i, -1
	}
	return -1, -1 - i
}

// internal reports whether a packet from src received on interface ifindex at at is not an external arrival:
// kube-proxy's local detector would send it to every endpoint (Watch.Internal, Watch.InternalLinks).
func (t *tally) internal(src netip.Addr, ifindex int32, at int64) bool {
	if t.internalAddrs[src] {
		return true
	}
	for _, pfx := range t.internalNets {
		if pfx.Contains(src) {
			return true
		}
	}
	if len(t.watch.InternalLinks) == 0 {
		return false
	}
	name := t.links.name(ifindex, at)
	if name == "" {
		return false
	}
	for _, l := range t.watch.InternalLinks {
		if l.matches(name) {
			return true
		}
	}
	return false
}

// count records one decoded packet received on interface ifindex at at (unix nanoseconds).
func (t *tally) count(p packet, at int64, ifindex int32) {
	fam := &t.fam[0]
	if p.dst.Is6() {
		fam = &t.fam[1]
	}
	di, ci := t.match(p)
	if di < 0 && ci < 0 {
		fam.unmatched++
		return
	}
	if t.internal(p.src, ifindex, at) {
		fam.internal++
		return
	}
	quiet := int64(t.cfg.QuietPeriod)
	t.activity++
	if di >= 0 {
		t.dests[di].add(at, quiet)
		t.countSource(di, p, at)
		t.countFlow(di, p, at)
		return
	}
	c := &t.checks[ci]
	c.add(at, quiet)
	if t.cfg.CheckerSources > 0 {
		if c.cadence == nil {
			c.cadence = &destSources{cadence: true, bands: !t.cfg.noBands}
		}
		c.cadence.add(p, p.sport, at, quiet, min(checkSources, t.cfg.CheckerSources))
	}
	for i := range c.sources {
		if c.sources[i].addr == p.src {
			c.sources[i].n++
			c.sources[i].last = max(c.sources[i].last, at)
			return
		}
	}
	if len(c.sources) < t.cfg.MaxSources {
		c.sources = append(c.sources, sourceCount{addr: p.src, n: 1, last: at})
		return
	}
	// Full: forget the source seen longest ago. A new prober matters more than one that has gone quiet.
	oldest := 0
	for i := range c.sources {
		if c.sources[i].last < c.sources[oldest].last {
			oldest = i
		}
	}
	c.sources[oldest] = sourceCount{addr: p.src, n: 1, last: at}
	c.evicted++
}

// fill copies the counts into s.
func (t *tally) fill(s *Snapshot) {
	idle := 0
	for i := range t.dests {
		if t.dests[i].idle() {
			idle++
		}
	}
	s.Dests, s.Idle = make([]DestCount, 0, len(t.dests)-idle), make([]IdleDest, 0, idle)
	var checkers []CheckerSource
	for _, d := range t.dests {
		if d.idle() {
			s.Idle = append(s.Idle, IdleDest{Dest: d.dest, WatchedSince: t.nsTime(d.watchedSince)})
			continue
		}
		var c DestCount
		c, checkers = t.destCount(&d, s.Taken, checkers)
		s.Dests = append(s.Dests, c)
	}
	s.HealthChecks = make([]HealthCheckCount, len(t.checks))
	n := 0
	for _, c := range t.checks {
		n += len(c.sources)
	}
	sources := make([]SourceCount, n) // one allocation for every health check's probers
	for i, c := range t.checks {
		h := HealthCheckCount{Dest: c.dest, Probes: c.n, FirstSeen: t.nsTime(c.first), LastSeen: t.nsTime(c.last),
			ActiveSince: t.nsTime(c.active), WatchedSince: t.nsTime(c.watchedSince), SourcesEvicted: c.evicted}
		if c.cadence != nil {
			for j := range c.cadence.list {
				if s := &c.cadence.list[j]; s.checker {
					h.Checkers = s.appendCheckers(h.Checkers, t)
				}
			}
		}
		if len(c.sources) > 0 {
			h.Sources, sources = sources[:len(c.sources):len(c.sources)], sources[len(c.sources):]
			for j, src := range c.sources {
				h.Sources[j] = SourceCount{Addr: src.addr, Probes: src.n, LastSeen: t.nsTime(src.last)}
			}
			slices.SortFunc(h.Sources, func(a, b SourceCount) int {
				if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
					return c
				}
				return a.Addr.Compare(b.Addr)
			})
		}
		s.HealthChecks[i] = h
	}
	for i := range s.Families {
		s.Families[i].Internal = t.fam[i].internal
		s.Families[i].Unmatched = t.fam[i].unmatched
	}
}
