package arrivals

import (
	"net/netip"
	"slices"
	"time"
)

// Health checkers are not clients. A load balancer that checks the traffic port (HAProxy `check`, an F5 TCP
// monitor, NGINX `health_check`, a cloud's TCP check of the NodePort) opens a connection to the Service's
// NodePort on every node at a fixed interval, from a few addresses of its own; kube-proxy drops those on a node
// without a local endpoint, which is how the load balancer learns to drain it. Counted as clients, they would
// page that node forever although no client is ever sent there. So, per destination, the meter keeps a small
// bounded set of sources with their cadence, and reports apart the sources that arrive at a steady cadence
// (Checkers) and the count of everyone else (Clients). The exporter reads each node alone: it cannot see that
// the same source reaches every node alike, only that it reaches this one like a clock.
//
// The rule, per source and destination:
//   - A new attempt is a SYN (or SCTP INIT) from a source port not among the source's last four: a SYN from
//     one of those is the kernel retransmitting an attempt already counted (1 s, 3 s, 7 s … after it), which
//     counts as an arrival but is no tick of the source's clock. Every UDP datagram is a new attempt.
//   - The interval between two new attempts is steady when it is within 10 % (at least 20 ms) of the interval
//     that began the current streak, and between 1 s and 5 min (a client's burst is faster, a clock slower
//     than that is not told from chance).
//   - A source is a checker once five new attempts came at a steady cadence (four steady intervals in a
//     row). It stays one through a few irregular intervals (a check the load balancer skipped, a client it
//     forwarded from the same address) and stops being one after more irregular intervals than steady ones.
//   - A source that is not a checker yet but whose every interval so far was steady, and whose first attempt
//     is less than candidateWindow old, is still proving its cadence: its arrivals are neither a checker's nor
//     a client's until it proves one or the other, so a checker's first few probes do not count as lost
//     clients. A client that connects once waits candidateWindow before it counts.
//   - At most Config.CheckerSources sources are kept per destination. When full, a new source replaces the
//     non-checker seen longest ago (or a checker silent for longer than maxCadence); if every kept source is
//     a live checker, the new one is not kept. Arrivals of sources not kept (or no longer kept) are clients.
//
// Its limits: a client that itself connects at a steady cadence from one address (a synthetic monitor, a
// cron job) looks exactly like a checker; the Service's localtraffic.io/health-check annotation settles it
// (the verdict then takes every arrival as a client). Checks slower than about one every 7 s take longer than
// candidateWindow to prove, so their first probes count as clients until they do.

const (
	minCadence       = time.Second
	maxCadence       = 5 * time.Minute
	cadenceTolerance = 10 // an interval within 1/10 (10 %) of the streak's first
	minTolerance     = int64(20 * time.Millisecond)
	// checkerSteady is the steady intervals in a row that make a checker: five attempts like a clock.
	checkerSteady = 4
	maxSteady     = 15
	// irregularCost is what an irregular interval takes from a checker's score: after more irregular
	// intervals than steady ones it is a checker no more.
	irregularCost = 3
	// candidateWindow is how long a source whose intervals are all steady so far may take to prove it is a
	// checker before its arrivals count as a client's.
	candidateWindow = 30 * time.Second
	retransmitPorts = 4
)

// destSources is one destination's sources, allocated at its first arrival. It allocates again when the
// destination sees a new source while it has room for one, never per packet after that.
type destSources struct {
	list []sourceCadence
	// others counts the arrivals of sources not in list (never kept, or forgotten): clients.
	others runCount
}

// sourceCadence is one source's arrivals at one destination and its cadence. Times are unix nanoseconds.
type sourceCadence struct {
	addr      netip.Addr
	n         uint64
	run, last int64 // the current run (no pause of the quiet period) began at run; the latest arrival
	first     int64 // the first new attempt
	lastNew   int64 // the latest new attempt (not a retransmission)
	ref       int64 // the interval that began the current streak; 0 before the second new attempt
	ports     [retransmitPorts]uint16
	nextPort  uint8
	steady    uint8 // the streak's score: steady intervals, less irregularCost per irregular one
	checker   bool
	broken    bool // an interval was not steady before the source became a checker: not a candidate
}

// add counts one arrival from p.src at at (quiet: the meter's quiet period). max bounds len(list).
func (d *destSources) add(p packet, sport uint16, at, quiet int64, max int) {
	// One pass finds the source or, failing that, the place a new one would take: the non-checker seen longest
	// ago, or a checker silent for longer than maxCadence. A live checker keeps its place: a flood of clients
	// must not turn it into a client.
	victim := -1
	for i := range d.list {
		s := &d.list[i]
		if s.addr == p.src {
			s.arrive(p.proto, sport, at, quiet)
			return
		}
		if (!s.checker || at-s.last >= int64(maxCadence)) && (victim < 0 || s.last < d.list[victim].last) {
			victim = i
		}
	}
	fresh := sourceCadence{addr: p.src}
	fresh.arrive(p.proto, sport, at, quiet)
	switch {
	case len(d.list) < max:
		// Grown as sources come (an allocation per new source at most, never per packet): most NodePorts see one
		// or two load balancer addresses, not 16 sources.
		d.list = append(d.list, fresh)
	case victim < 0:
		d.others.fold(fresh, quiet)
	default:
		d.others.fold(d.list[victim], quiet)
		d.list[victim] = fresh
	}
}

// arrive counts one arrival of this source.
func (s *sourceCadence) arrive(proto Protocol, sport uint16, at, quiet int64) {
	if s.n == 0 || at-s.last >= quiet {
		s.run = at
	}
	s.n++
	s.last = max(s.last, at)
	if proto != UDP {
		if s.n > 1 && slices.Contains(s.ports[:], sport) {
			return // a retransmitted SYN or INIT: the same attempt again
		}
		s.ports[s.nextPort] = sport
		s.nextPort = (s.nextPort + 1) % retransmitPorts
	}
	if s.lastNew == 0 {
		s.first, s.lastNew = at, at
		return
	}
	iv := at - s.lastNew
	s.lastNew = at
	inRange := iv >= int64(minCadence) && iv <= int64(maxCadence)
	if s.ref != 0 && inRange && abs(iv-s.ref) <= max(s.ref/cadenceTolerance, minTolerance) {
		s.steady = min(s.steady+1, maxSteady)
		if s.steady >= checkerSteady {
			s.checker = true
		}
		return
	}
	// Irregular (or the first interval).
	if s.ref != 0 && !s.checker {
		s.broken = true
	}
	if s.checker && s.steady > irregularCost {
		s.steady -= irregularCost
		return
	}
	s.checker = false
	s.ref, s.steady = 0, 0
	if inRange {
		s.ref, s.steady = iv, 1
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// candidate: not a checker yet, every interval so far steady, and young enough to be still proving it.
func (s *sourceCadence) candidate(now int64) bool {
	return !s.checker && !s.broken && now-s.first < int64(candidateWindow)
}

// fold adds a forgotten source's arrivals to the count of others.
func (r *runCount) fold(s sourceCadence, quiet int64) {
	switch {
	case r.n == 0:
		r.first, r.active, r.last = s.run, s.run, s.last
	case s.last > r.last:
		if s.run-r.last >= quiet {
			r.active = s.run
		} else {
			r.active = min(r.active, s.run)
		}
		r.last = s.last
	case r.active-s.last < quiet:
		r.active = min(r.active, s.run)
	}
	r.first = min(r.first, s.run)
	r.n += s.n
}

// CheckerSource is a source that arrives at a destination at a steady cadence: a load balancer's health
// checker, most likely.
type CheckerSource struct {
	Addr netip.Addr
	// Attempts counts its arrivals (retransmissions included); Interval is its cadence.
	Attempts uint64
	Interval time.Duration
	LastSeen time.Time
}

// ClientCount is a destination's arrivals without those of its checkers and of the sources still proving
// their cadence: what clients sent.
type ClientCount struct {
	Attempts              uint64
	ActiveSince, LastSeen time.Time
}

// fillSources sets c.Clients and c.Checkers from the destination's whole count and its sources at now.
// checkers is where the checker lists of every destination are appended (a few allocations per snapshot, not
// one per destination); the grown slice is returned.
func (t *tally) fillSources(c *DestCount, whole runCount, d *destSources, now, quiet int64, checkers []CheckerSource) []CheckerSource {
	c.Clients = ClientCount{Attempts: whole.n, ActiveSince: t.nsTime(whole.active), LastSeen: t.nsTime(whole.last)}
	if d == nil {
		return checkers
	}
	from := len(checkers)
	aside := false
	for i := range d.list {
		s := &d.list[i]
		switch {
		case s.checker:
			checkers = append(checkers, CheckerSource{Addr: s.addr, Attempts: s.n, Interval: time.Duration(s.ref), LastSeen: t.nsTime(s.last)})
			aside = true
		case s.candidate(now):
			aside = true
		}
	}
	if len(checkers) > from {
		c.Checkers = checkers[from:len(checkers):len(checkers)]
		slices.SortFunc(c.Checkers, func(a, b CheckerSource) int { return a.Addr.Compare(b.Addr) })
	}
	if !aside {
		return checkers // nobody set aside: the clients are every arrival (the destination's own count)
	}
	c.SetAside = true
	// Clients: the others and every kept source that is neither a checker nor a candidate, their runs joined
	// as the destination's own count joins arrivals (a pause shorter than the quiet period continues a run).
	type run struct{ active, last int64 }
	var scratch [maxRuns]run
	runs := scratch[:0]
	var n uint64
	if d.others.n > 0 {
		runs = append(runs, run{d.others.active, d.others.last})
		n += d.others.n
	}
	for i := range d.list {
		s := &d.list[i]
		if s.checker || s.candidate(now) || len(runs) == maxRuns {
			continue
		}
		runs = append(runs, run{s.run, s.last})
		n += s.n
	}
	c.Clients = ClientCount{Attempts: n}
	if len(runs) == 0 {
		return checkers
	}
	slices.SortFunc(runs, func(a, b run) int { return cmpInt64(b.last, a.last) })
	active, last := runs[0].active, runs[0].last
	for _, r := range runs[1:] {
		if r.last >= active-quiet {
			active = min(active, r.active)
		}
	}
	c.Clients.ActiveSince, c.Clients.LastSeen = t.nsTime(active), t.nsTime(last)
	return checkers
}

// maxRuns bounds fillSources' scratch array: the others and every kept source.
const maxRuns = 1 + maxCheckerSources

// maxCheckerSources caps Config.CheckerSources: fillSources joins runs in a fixed array.
const maxCheckerSources = 64

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// countSource records the source of one arrival at t.dests[di]: only at a NodePort (where a traffic-port
// checker probes), and not at all with Config.CheckerSources negative.
func (t *tally) countSource(di int, p packet, at int64) {
	d := &t.dests[di]
	if t.cfg.CheckerSources <= 0 || !d.dest.IsNode() {
		return
	}
	if d.src == nil {
		// Allocated at the first arrival (once): a destination nobody reaches costs a pointer.
		d.src = &destSources{}
	}
	d.src.add(p, p.sport, at, int64(t.cfg.QuietPeriod), t.cfg.CheckerSources)
}
