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
//   - A new attempt is a SYN (or SCTP INIT) from a source port not among the source's last eight: a SYN from
//     one of those is the kernel retransmitting an attempt already counted (1 s, 3 s, 7 s … after it), which
//     counts as an arrival but is no tick of the source's clock. Every UDP datagram is a new attempt.
//   - A source keeps up to two clocks (maxClocks): two load balancer backends, or two monitors, probing from
//     one address interleave their probes, and no single cadence explains them. A new attempt ticks the clock
//     it falls on: its latest tick plus its interval, within 10 % (at least 20 ms) of the interval, or 5 %
//     once the source keeps a clock (two clocks explain far more timelines than one). An attempt no clock
//     explains begins one with two earlier unexplained attempts at one interval (within 5 %), between 1 s and
//     5 min, the clocks together no faster than once a second (a client's burst is faster, a clock slower
//     than that is not told from chance). A clock not proven yet whose next tick is overdue began by chance:
//     it is dissolved, its attempts unexplained again.
//   - A load balancer may spread its checks (HAProxy `spread-checks`, Envoy's interval_jitter and
//     interval_jitter_percent): each waits its interval, less or more by a random amount, after the previous
//     check ended, so no clock keeps them. The gaps between its new attempts stay within a band instead: at
//     most 1.45 times the shortest (spreadNum/spreadDen), never under minCadence, and never across an
//     overlap (a retransmission of an earlier attempt after a later one began: a checker runs one check at a
//     time). A source whose every gap since its first attempt kept one band is banded: attempts no clock
//     explains do not break it while it is, within candidateWindow of its first attempt.
//   - A source is a checker once one clock ticked five attempts (four intervals) and every attempt since that
//     clock began kept one of its clocks, or once, banded and within candidateWindow of its first attempt, six
//     gaps kept a band within 1.25 times (eight within 1.45 times: spreadSteady). A band proves a spread within
//     that window only and never lengthens it: a source it held counts as a client once its band ends or the
//     window does, and past the window whenever it would without bands. A checker stays one through a few
//     irregular attempts (a check the load balancer skipped, a client it forwarded from the same address) and
//     stops being one after more irregular attempts than steady ones; one proven by its band, or on a clock
//     while banded, or taken over from an earlier meter, also keeps its score with each attempt in its band.
//   - A source that is not a checker yet whose unexplained attempts two clocks could still begin from (four at
//     most) is still proving its cadence for candidateWindow after its first attempt (66 s: the first interval
//     of a checker every minute; the quiet period if shorter), and from there while its next tick is due: its arrivals are neither a
//     checker's nor a client's until it proves one or the other, so a checker's first few probes, even a slow
//     one's, do not count as lost clients. A client that connects once waits candidateWindow before it counts;
//     once counted, a source stays a client until it proves a cadence.
//   - At most Config.CheckerSources sources are kept per destination. When full, a new source replaces the
//     non-checker seen longest ago (or a checker silent for longer than maxCadence); if every kept source is
//     a live checker, the new one is not kept. Arrivals of sources not kept (or no longer kept) are clients.
//
// Its limits: a client that itself connects at a steady cadence from one address (a synthetic monitor, a
// cron job) looks exactly like a checker; the Service's localtraffic.io/health-check annotation settles it
// (the verdict then takes every arrival as a client). Three checkers behind one address are not followed,
// nor two of one interval half a period apart while they look like one clock of half the interval and drift.
//
// A port scan is not a client either. An internet scanner (masscan, ZMap) sends one SYN per address and port
// and never retransmits it; a client whose SYN a node drops retransmits it from the same source address and
// port (Linux and macOS 1 s later, Windows 3 s), and one with a connect timeout shorter than that tries again
// with a new connection from the same address. So, at every destination (load balancer IPs and externalIPs
// too, where no checker is recognised), the same bounded set of sources tells arrivals that repeat a source
// from those that do not:
//   - An arrival repeats its source when the source's previous arrival at the destination is less than
//     repeatWindow old; both count as repeated (ClientCount.Repeated, DestCount.Repeated). One SYN, INIT or
//     datagram from a source that does not come again within repeatWindow counts as an arrival and as a
//     client's, never as repeated: the verdict reads repeated attempts alone for a loss.
//   - A source whose latest arrival is not repeated yet and less than repeatWindow old is waiting for its
//     repeat and keeps its place: a new source takes the place of one that is not waiting (or is not kept).
//     So in a crowd of new clients those kept prove themselves within a second and make room, and in a crowd
//     of scanners the places free up every repeatWindow: the sources followed are a sample of a crowd, never
//     fewer than the places.
//
// Its limits: a scanner that retries a port within repeatWindow from the same address (nmap against a filtered
// port) repeats like a client; a client that gives up after one SYN and never comes back is not told from a
// scan, and is not a loss anyone waits on. The run an earlier meter counted (Meter.Restore) counts as repeated:
// the state file keeps no sources.

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
	// candidateWindow is how long a new source may take to begin proving a cadence (its third attempt on one
	// clock) before its arrivals count as a client's: the first interval of the slowest checker followed
	// (slowChecker) and its tolerance, or the meter's quiet period when that is shorter. A source still proving
	// stays a candidate until its next tick is due.
	candidateWindow = slowChecker + slowChecker/cadenceTolerance
	// slowChecker is the slowest cadence a candidate is waited for: AWS target groups check every 30 s by
	// default, and at most every 60 s for most load balancers' TCP checks.
	slowChecker = time.Minute
	// maxClocks is how many cadences one source may keep at once: two load balancer backends, or two monitors,
	// probing from one address. looseKept is how many attempts no clock explains are kept to begin clocks
	// from: each clock begins with three, so every clock's first two fit.
	maxClocks       = 2
	looseKept       = 2*maxClocks + 2
	retransmitPorts = 8
	// A checker with a spread leaves between two checks at most spreadNum/spreadDen (1.45) times its shortest
	// gap. A checker's gap is its check's timeout (a dropped SYN never completes) and then its interval with
	// the spread: HAProxy's `spread-checks` s draws uniformly within ±s % of inter, Envoy adds
	// interval_jitter_percent of the interval and interval_jitter, each drawn uniformly from zero. 1.45 takes
	// spread-checks up to 36 with HAProxy's default timeout (inter: gaps of 1.64 to 2.36 inter), up to 18 with
	// any, and Envoy's interval_jitter_percent up to 45 (50 with a timeout of an eighth of the interval). A wider
	// band is not told from a client that tries again after its connect timeout and a pause of its own: one
	// pausing 2.3 to 4.6 s after a 2 s timeout leaves gaps within 1.53 times, which no band may take.
	// maxSpreadGaps caps a band's count of gaps (a uint8).
	spreadNum, spreadDen = 29, 20
	maxSpreadGaps        = 255
	// repeatWindow is how soon a source must come again for its arrivals to count as repeated: it covers
	// the first SYN retransmission of every common stack (1 s on Linux and macOS, 3 s on Windows) and the
	// second (3 s and 9 s after the first SYN), with room for a busy node's scheduling.
	repeatWindow = 10 * time.Second
)

// destSources is one destination's sources, allocated at its first arrival. It allocates again when the
// destination sees a new source while it has room for one, never per packet after that.
type destSources struct {
	list []sourceCadence
	// others counts the arrivals of sources not in list (never kept, or forgotten): clients. othersRep is the
	// part of them that repeated their source.
	others, othersRep runCount
	// othersRetrans is the retransmissions the sources no longer in list had been seen to send.
	othersRetrans uint64
	// cadence: checkers are recognised here (a NodePort). Elsewhere sources are kept for their repeats alone.
	cadence bool
	// bands: checkers with a spread are recognised too (Config.noBands unset).
	bands bool
	// lastAttempt is the latest arrival that was no recognised retransmission (unix nanoseconds).
	lastAttempt int64
}

// sourceCadence is one source's arrivals at one destination and its cadence. Times are unix nanoseconds.
type sourceCadence struct {
	addr      netip.Addr
	n         uint64
	run, last int64 // the current run (no pause of the quiet period) began at run; the latest arrival
	first     int64 // the first new attempt
	lastNew   int64 // the latest new attempt (not a retransmission)
	// until: while it is not proven a checker nor broken, the source is a candidate until then (it may still be
	// proving a cadence). Set by its first attempt and moved on by each tick due before it.
	until    int64
	ports    [retransmitPorts]uint16
	nextPort uint8
	// clocks are the cadences its new attempts keep (two backends or monitors behind one address run two);
	// loose are its latest new attempts no clock explains, oldest first, nLoose of them.
	clocks  [maxClocks]clock
	loose   [looseKept]int64
	nLoose  uint8
	score   uint8 // a checker's score: ticks, less irregularCost per attempt no clock explains
	checker bool
	broken  bool // an attempt no clock could explain, or the candidacy ran out, before it proved a cadence
	// rep counts the arrivals that came within repeatWindow of the source's previous one, and that previous
	// one: a retransmission or another attempt, what a port scan never sends.
	rep runCount
	// retrans counts its arrivals that were a retransmission of an attempt already counted (a SYN or INIT
	// from one of ports).
	retrans uint64
	// The band of its gaps, for a checker with a spread: bandLo and bandHi are the shortest and longest gap
	// between its new attempts since the band began, bandN of them. banded: every gap since its first attempt
	// kept one band and none overlapped; only such a source may prove a spread, and until it has proven one or
	// its candidate window ends, attempts no clock explains do not break it. spread: a checker whose attempts
	// in its band keep it one (it proved a spread, or an earlier meter proved it, one way or the other).
	// inBand: its latest new attempt kept its band. overlap: a retransmission of an attempt older than its
	// latest came since that one. held: its clocks could not explain it, and only its band keeps it a candidate.
	bandLo, bandHi                        int64
	bandN                                 uint8
	banded, spread, inBand, overlap, held bool
}

// clock is one cadence of a source: new attempts ref apart, the latest at last, the one before at prev. ref is
// 0 for an unused clock.
type clock struct {
	start, prev, last, ref int64
	// steady counts the intervals it explained, the two that began it included.
	steady uint8
}

// add counts one arrival from p.src at at (quiet: the meter's quiet period). max bounds len(list).
func (d *destSources) add(p packet, sport uint16, at, quiet int64, max int) {
	// One pass finds the source or, failing that, the place a new one would take: the non-checker seen longest
	// ago, or a checker silent for longer than maxCadence. A live checker keeps its place: a flood of clients
	// must not turn it into a client. A source waiting for its repeat keeps its place too: evicted, its
	// retransmission would look like a new source, and a crowd of clients like a crowd of scanners.
	victim := -1
	for i := range d.list {
		s := &d.list[i]
		if s.addr == p.src {
			if s.arrive(p.proto, sport, at, quiet, d.cadence, d.bands) && at > d.lastAttempt {
				d.lastAttempt = at
			}
			return
		}
		if (!s.checker || at-s.last >= int64(maxCadence)) && !s.waiting(at) && (victim < 0 || s.last < d.list[victim].last) {
			victim = i
		}
	}
	fresh := sourceCadence{addr: p.src}
	fresh.arrive(p.proto, sport, at, quiet, d.cadence, d.bands)
	if at > d.lastAttempt {
		d.lastAttempt = at
	}
	switch {
	case len(d.list) < max:
		// Grown as sources come (an allocation per new source at most, never per packet): most NodePorts see one
		// or two load balancer addresses, not 16 sources.
		d.list = append(d.list, fresh)
	case victim < 0:
		d.fold(fresh, quiet)
	default:
		d.fold(d.list[victim], quiet)
		d.list[victim] = fresh
	}
}

// waiting: the source's latest arrival is less than repeatWindow old and has not repeated an earlier one.
func (s *sourceCadence) waiting(at int64) bool {
	return at-s.last < int64(repeatWindow) && s.rep.last < s.last
}

// arrive counts one arrival of this source; cadence: follow its cadence too (a NodePort), and bands: its band
// (a checker with a spread). It says whether the arrival is a new attempt: false for a recognised
// retransmission.
func (s *sourceCadence) arrive(proto Protocol, sport uint16, at, quiet int64, cadence, bands bool) bool {
	if s.n > 0 && at-s.last < int64(repeatWindow) {
		if s.rep.last < s.last {
			s.rep.add(s.last, quiet) // the arrival this one repeats
		}
		s.rep.add(at, quiet)
	}
	if s.n == 0 || at-s.last >= quiet {
		s.run = at
	}
	s.n++
	s.last = max(s.last, at)
	if proto != UDP {
		if s.n > 1 && slices.Contains(s.ports[:], sport) {
			s.retrans++
			// A retransmission of an earlier attempt after a later one began: two attempts at once, which no
			// single checker makes (it starts its next check once the last one ended).
			if sport != s.ports[(int(s.nextPort)+retransmitPorts-1)%retransmitPorts] {
				s.overlap = true
			}
			return false // a retransmitted SYN or INIT: the same attempt again
		}
		s.ports[s.nextPort] = sport
		s.nextPort = (s.nextPort + 1) % retransmitPorts
	}
	if cadence {
		s.attempt(at, quiet, bands)
	}
	return true
}

// attempt follows one new attempt at at through the source's clocks and band (quiet: the meter's quiet period;
// bands: follow its band).
func (s *sourceCadence) attempt(at, quiet int64, bands bool) {
	if s.lastNew == 0 {
		s.first, s.lastNew, s.until = at, at, at+min(int64(candidateWindow), quiet)
		s.banded = bands && !s.checker
		s.addLoose(at)
		return
	}
	// A candidate whose time ran out has been counted as a client: it stays one unless it proves a cadence,
	// so a page it raised does not come and go while it might still be a clock.
	if !s.checker && at >= s.until {
		s.broken = true
	}
	s.inBand = bands && s.stretch(at-s.lastNew, quiet)
	s.lastNew = max(s.lastNew, at)
	if s.held && !s.checker && !s.holding() {
		s.broken = true
	}
	// A spread proves itself within the candidate window only, and never lengthens it: a client whose attempts
	// happen to keep a band counts when its window ends, as before, and no later.
	if !s.checker && s.holding() && !s.broken && at < s.until && s.bandN >= spreadSteady(s.bandLo, s.bandHi) {
		s.checker, s.spread, s.score = true, true, checkerSteady
	}
	s.dissolve(at)
	// The clock it falls on most closely (two backends configured alike run two clocks of one interval,
	// milliseconds apart).
	best, bestK, bestOff := -1, int64(0), int64(0)
	for i := range s.clocks {
		c := &s.clocks[i]
		if c.ref == 0 || at-c.last > int64(maxCadence) {
			continue
		}
		k := (at - c.last + c.ref/2) / c.ref
		off := abs(at - c.last - k*c.ref)
		if k == 0 && c.prev != 0 {
			// Within the tolerance of the clock's latest tick: whichever of the two falls closer to the time
			// that tick was due takes it (two clocks a few percent apart in phase), the other is loose.
			off = abs(at - c.prev - c.ref)
			if off >= abs(c.last-c.prev-c.ref) {
				continue
			}
		}
		// A tick due beats taking a tick already given: an attempt that keeps one clock is not another's.
		better := best < 0 || (k >= 1) != (bestK >= 1) && k >= 1 || (k >= 1) == (bestK >= 1) && off < bestOff
		if (k >= 1 || c.prev != 0) && off <= s.tolerance(c.ref) && better {
			best, bestK, bestOff = i, k, off
		}
	}
	if best >= 0 && bestK == 0 {
		c := &s.clocks[best]
		displaced := c.last
		c.last = at
		s.unexplained(displaced, quiet)
		return
	}
	if best >= 0 {
		c := &s.clocks[best]
		c.prev, c.last = c.last, at
		if bestK > 1 {
			// On its clock but a check late: one skipped (or its SYN lost). Irregular: it breaks a candidate and
			// costs a checker; the clock keeps its phase.
			if !s.checker {
				s.breakCandidate()
			}
			s.irregular()
			return
		}
		c.steady = min(c.steady+1, maxSteady)
		s.tick(c, at, quiet)
		return
	}
	s.unexplained(at, quiet)
}

// unexplained follows an attempt at at no clock explains: it may begin one with two loose attempts before it
// at one interval, the pair that keeps the interval most closely; else it is loose, and irregular.
func (s *sourceCadence) unexplained(at, quiet int64) {
	bi, bj, bestOff := -1, -1, int64(0)
	for i := int(s.nLoose) - 1; i >= 0; i-- {
		iv := at - s.loose[i]
		if iv < int64(minCadence) || iv > int64(maxCadence) || !s.roomFor(iv) {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			off := abs(s.loose[i] - s.loose[j] - iv)
			if off <= halfTolerance(iv) && (bi < 0 || off < bestOff) {
				bi, bj, bestOff = i, j, off
			}
		}
	}
	if bi >= 0 {
		s.beginClock(clock{start: s.loose[bj], prev: s.loose[bi], last: at, ref: at - s.loose[bi], steady: 2}, bi, bj, quiet)
		return
	}
	if s.nLoose == 1 && !s.broken && at < s.until {
		// Its second attempt: the first interval of a cadence, maybe a slow one (30 to 60 s, a cloud's default
		// check) whose third attempt comes after candidateWindow. It stays a candidate until that is due.
		if iv := at - s.loose[0]; iv >= int64(minCadence) && iv <= slowest(quiet) {
			s.until = max(s.until, at+iv+tolerance(iv)+1)
		}
	}
	s.insertLoose(at)
	s.irregular()
}

// dissolve frees the clocks that began by chance: one not proven yet whose next tick is overdue at at. A clock
// of three attempts gives them back as loose, to begin the clocks they belong to (two checkers a few percent
// apart in cadence, whose first attempts also fit a third interval).
func (s *sourceCadence) dissolve(at int64) {
	for i := range s.clocks {
		c := s.clocks[i]
		if c.ref == 0 || c.steady >= checkerSteady || at-c.last <= c.ref+s.tolerance(c.ref) {
			continue
		}
		s.clocks[i] = clock{}
		if c.steady == 2 {
			for _, t := range [...]int64{c.start, c.prev, c.last} {
				s.insertLoose(t)
			}
		}
	}
}

// slowest is the slowest cadence a candidate is waited for: slowChecker, or the meter's quiet period when that
// is shorter (a cadence slower than it ends its run of arrivals between attempts, and a loss hold shortened
// with it would end before a client waited for so long counts).
func slowest(quiet int64) int64 { return min(int64(slowChecker), quiet) }

// tolerance is how far from its clock's time an attempt may come and still tick it.
func tolerance(ref int64) int64 { return max(ref/cadenceTolerance, minTolerance) }

// tolerance is tolerance(ref) for this source: half of it once the source keeps a clock, since two clocks
// explain far more timelines than one (a client whose gaps alternate short and long is two clocks of their
// sum at 10 %), and a load balancer's timer keeps its cadence to milliseconds.
func (s *sourceCadence) tolerance(ref int64) int64 {
	for _, c := range s.clocks {
		if c.ref != 0 {
			return halfTolerance(ref)
		}
	}
	return tolerance(ref)
}

// halfTolerance is half of tolerance(ref).
func halfTolerance(ref int64) int64 { return max(ref/(2*cadenceTolerance), minTolerance) }

// roomFor: a clock of interval iv may begin beside the clocks the source keeps (it takes the place of the one
// seen longest ago when all are in use, as beginClock does): together they come no faster than once every
// minCadence (within its tolerance: two clocks of 2 s are two checkers alike), the fastest a single checker is
// taken for (two clocks of 1 s are a client's attempts every 500 ms).
func (s *sourceCadence) roomFor(iv int64) bool {
	k := s.clockPlace()
	rate := 1 / float64(iv)
	for i, c := range s.clocks {
		if i != k && c.ref != 0 {
			rate += 1 / float64(c.ref)
		}
	}
	return rate <= 1/float64(int64(minCadence)-tolerance(int64(minCadence)))
}

// clockPlace is where a new clock begins: an unused one, or the clock seen longest ago.
func (s *sourceCadence) clockPlace() int {
	k := 0
	for i, c := range s.clocks {
		if c.ref == 0 {
			return i
		}
		if c.last < s.clocks[k].last {
			k = i
		}
	}
	return k
}

// beginClock starts c, made of the loose attempts i and j and the latest one, in clockPlace.
func (s *sourceCadence) beginClock(c clock, i, j int, quiet int64) {
	s.loose[i], s.loose[j] = -1, -1
	// Earlier loose attempts on its clock are its own too (its first ones, left loose when a clock that began
	// by chance took the others and dissolved).
	for x := j - 1; x >= 0; x-- {
		if abs(c.start-s.loose[x]-c.ref) <= halfTolerance(c.ref) {
			c.start, s.loose[x] = s.loose[x], -1
			c.steady++
		}
	}
	s.nLoose = uint8(len(slices.DeleteFunc(s.loose[:s.nLoose], func(t int64) bool { return t < 0 })))
	k := s.clockPlace()
	s.clocks[k] = c
	s.tick(&s.clocks[k], c.last, quiet)
}

// tick counts an attempt a clock explained. A source proves a cadence when one clock explained four intervals
// in a row and no attempt since that clock began was left unexplained: its every attempt then keeps one of at
// most maxClocks clocks.
func (s *sourceCadence) tick(c *clock, at, quiet int64) {
	if s.checker {
		s.score = min(s.score+1, maxSteady)
		return
	}
	if !s.broken && !s.held && at < s.until {
		// Still proving: a candidate until this clock's next tick is overdue, for cadences up to slowChecker. Not
		// one only its band holds: a chance clock must not keep it longer than it would without one.
		if c.ref <= slowest(quiet) {
			s.until = max(s.until, at+c.ref+tolerance(c.ref)+1)
		}
	}
	if c.steady < checkerSteady {
		return
	}
	for _, t := range s.loose[:s.nLoose] {
		if t > c.start {
			return
		}
	}
	// Proven on a clock with every gap in one band: its cadence may as well be a spread's that came close to a
	// clock by chance, so its band keeps it too.
	s.checker, s.score, s.spread = true, checkerSteady, s.banded
}

// irregular counts an attempt off every clock: before the source proved a cadence, one more than its clocks
// could still begin from breaks it; a checker loses irregularCost of its score, and after more irregular
// attempts than steady ones it is a checker no more, its clocks forgotten.
func (s *sourceCadence) irregular() {
	if !s.checker {
		free := 0
		for _, c := range s.clocks {
			if c.ref == 0 {
				free++
			}
		}
		if int(s.nLoose) > 2*free {
			s.breakCandidate()
		}
		return
	}
	if s.spread && s.inBand {
		s.score = min(s.score+1, maxSteady) // off every clock, but within its spread
		return
	}
	if s.score > irregularCost {
		s.score -= irregularCost
		return
	}
	s.checker, s.score, s.broken, s.spread = false, 0, true, false
	s.clocks = [maxClocks]clock{}
}

// breakCandidate breaks a candidate its clocks cannot explain, unless it is holding to prove a spread: then it is
// held, and broken once its band ends or its candidate window does (candidate), whichever first.
func (s *sourceCadence) breakCandidate() {
	if s.holding() {
		s.held = true
		return
	}
	s.broken = true
}

// holding: the source is banded and its latest attempt came within candidateWindow of its first, the window
// it has to prove a spread. Past it, a chance clock that lengthened its candidacy holds it no longer than it
// would without a band.
func (s *sourceCadence) holding() bool { return s.banded && s.lastNew-s.first < int64(candidateWindow) }

// stretch follows one gap between the source's new attempts through its band, and reports whether the gap kept
// it. A gap shorter than minCadence or longer than the slowest cadence waited for, or one across an overlap
// (an earlier attempt still retransmitted after the latest began), ends the band: no checker makes one; the
// gap after it begins a new band (and keeps nothing yet). A gap that would make the band wider than 1.45 times
// its shortest begins a new band with itself. A source whose band ended or began again is no longer banded.
func (s *sourceCadence) stretch(gap, quiet int64) bool {
	overlap := s.overlap
	s.overlap = false
	if overlap || gap < int64(minCadence) || gap > slowest(quiet) {
		s.bandLo, s.bandHi, s.bandN, s.banded = 0, 0, 0, false
		return false
	}
	if s.bandN == 0 {
		// A band's first gap keeps nothing yet: a checker whose cadence is gone gets no credit for a gap that
		// merely follows a break.
		s.bandLo, s.bandHi, s.bandN = gap, gap, 1
		return false
	}
	lo, hi := min(s.bandLo, gap), max(s.bandHi, gap)
	if hi*spreadDen > lo*spreadNum {
		s.bandLo, s.bandHi, s.bandN, s.banded = gap, gap, 1, false
		return false
	}
	s.bandLo, s.bandHi, s.bandN = lo, hi, min(s.bandN+1, maxSpreadGaps)
	return true
}

// spreadSteady is how many gaps in one band, lo to hi, prove a checker with a spread: the wider the band, the
// more, since the more of a client's attempts fall in it by chance (recorded timelines:
// TestClientShapesPageSeeded). A band within 1.25 times (HAProxy `spread-checks` up to 11 with any timeout, 22
// with its default) takes six gaps, a wider one eight: a checker every 2 s with its 2 s timeout proves a
// spread in about 32 s, one whose gaps average 8 s within the candidate window.
func spreadSteady(lo, hi int64) uint8 {
	if 4*hi <= 5*lo {
		return 6
	}
	return 8
}

// insertLoose keeps at among the loose attempts, in the order they came: an attempt a clock gave up for a
// later one.
func (s *sourceCadence) insertLoose(at int64) {
	s.addLoose(at)
	for i := int(s.nLoose) - 1; i > 0 && s.loose[i] < s.loose[i-1]; i-- {
		s.loose[i], s.loose[i-1] = s.loose[i-1], s.loose[i]
	}
}

// addLoose keeps at among the latest attempts no clock explains, forgetting the oldest when full.
func (s *sourceCadence) addLoose(at int64) {
	if int(s.nLoose) == looseKept {
		copy(s.loose[:], s.loose[1:])
		s.nLoose--
	}
	s.loose[s.nLoose] = at
	s.nLoose++
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// candidate: not a checker yet, no attempt it could not explain, and its time to prove a cadence not out.
func (s *sourceCadence) candidate(now int64) bool {
	return !s.checker && !s.broken && now < s.until && !(s.held && now-s.first >= int64(candidateWindow))
}

// appendCheckers appends a checker's proven clocks to cs, one CheckerSource each (two backends behind one
// address are two), or its steadiest clock when none has proven itself since.
func (s *sourceCadence) appendCheckers(cs []CheckerSource, t *tally) []CheckerSource {
	best, n := -1, len(cs)
	for i, c := range s.clocks {
		if c.ref == 0 {
			continue
		}
		if c.steady >= checkerSteady {
			cs = append(cs, CheckerSource{Addr: s.addr, Attempts: s.n, Interval: time.Duration(c.ref), LastSeen: t.nsTime(s.last),
				LastTick: t.nsTime(c.last)})
		}
		if best < 0 || c.steady > s.clocks[best].steady {
			best = i
		}
	}
	if len(cs) == n {
		c := CheckerSource{Addr: s.addr, Attempts: s.n, LastSeen: t.nsTime(s.last)}
		switch {
		case s.spread && s.bandN > 0:
			// A checker with a spread: the middle of its band, its latest attempt the phase.
			c.Interval, c.LastTick = time.Duration((s.bandLo+s.bandHi)/2), t.nsTime(s.lastNew)
		case best >= 0:
			c.Interval, c.LastTick = time.Duration(s.clocks[best].ref), t.nsTime(s.clocks[best].last)
		}
		cs = append(cs, c)
	}
	return cs
}

// fold adds a forgotten source's arrivals to the count of others, and its repeated ones to othersRep.
func (d *destSources) fold(s sourceCadence, quiet int64) {
	d.others.join(s.n, s.run, s.last, quiet)
	d.othersRep.join(s.rep.n, s.rep.active, s.rep.last, quiet)
	d.othersRetrans += s.retrans
}

// retransmits is how many of the destination's arrivals its sources retransmitted.
func (d *destSources) retransmits() uint64 {
	n := d.othersRetrans
	for i := range d.list {
		n += d.list[i].retrans
	}
	return n
}

// join adds n arrivals whose run began at active and ended at last.
func (r *runCount) join(n uint64, active, last, quiet int64) {
	if n == 0 {
		return
	}
	switch {
	case r.n == 0:
		r.first, r.active, r.last = active, active, last
	case last > r.last:
		if active-r.last >= quiet {
			r.active = active
		} else {
			r.active = min(r.active, active)
		}
		r.last = last
	case r.active-last < quiet:
		r.active = min(r.active, active)
	}
	r.first = min(r.first, active)
	r.n += n
}

// CheckerSource is a source that arrives at a destination at a steady cadence: a load balancer's health
// checker, most likely.
type CheckerSource struct {
	Addr netip.Addr
	// Attempts counts its arrivals (retransmissions included); Interval is its cadence.
	Attempts uint64
	Interval time.Duration
	LastSeen time.Time
	// LastTick is the latest new attempt on this cadence's clock (not a retransmission): its phase, which a
	// restarted meter takes over (Run.Checkers). Zero: LastSeen stands for it.
	LastTick time.Time
}

// ClientCount is a destination's arrivals without those of its checkers and of the sources still proving
// their cadence: what clients sent.
type ClientCount struct {
	Attempts              uint64
	ActiveSince, LastSeen time.Time
	// Repeated is the part of them whose source came again within repeatWindow (a retransmitted SYN, another
	// attempt): never a port scan's single SYN or datagram.
	Repeated RepeatCount
}

// RepeatCount is the arrivals of a count that repeated their source within repeatWindow, and the run they
// make (ActiveSince: the first after the latest gap of the quiet period). Zero when none did.
type RepeatCount struct {
	Attempts              uint64
	ActiveSince, LastSeen time.Time
}

// span is a run of arrivals: began at active, ended at last (unix nanoseconds), n of them.
type span struct {
	n            uint64
	active, last int64
}

// joinSpans joins runs as a destination's own count joins arrivals (a pause shorter than quiet continues a
// run): the latest run, reaching back through every run that ended within quiet of its start. It sorts spans.
func joinSpans(spans []span, quiet int64) (n uint64, active, last int64) {
	spans = slices.DeleteFunc(spans, func(s span) bool { return s.n == 0 })
	if len(spans) == 0 {
		return 0, 0, 0
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpInt64(b.last, a.last) })
	active, last = spans[0].active, spans[0].last
	for _, s := range spans {
		n += s.n
		if s.last >= active-quiet {
			active = min(active, s.active)
		}
	}
	return n, active, last
}

// fillSources sets c.Clients, c.Repeated and c.Checkers from the destination's whole count, the run an
// earlier meter counted (restored) and its sources at now. checkers is where the checker lists of every
// destination are appended (a few allocations per snapshot, not one per destination); the grown slice is
// returned.
func (t *tally) fillSources(c *DestCount, whole runCount, restored restoredRun, d *destSources, now, quiet int64, checkers []CheckerSource) []CheckerSource {
	c.Clients = ClientCount{Attempts: whole.n, ActiveSince: t.nsTime(whole.active), LastSeen: t.nsTime(whole.last)}
	if t.cfg.CheckerSources <= 0 {
		// No source is kept: nothing tells a repeat, and every arrival counts as one (the meter before it
		// told port scans apart).
		c.Repeated = RepeatCount{Attempts: c.Clients.Attempts, ActiveSince: c.Clients.ActiveSince, LastSeen: c.Clients.LastSeen}
		c.Clients.Repeated = c.Repeated
		return checkers
	}
	var scratch [maxRuns + 1]span
	reps := append(scratch[:0], span{restored.run.n, restored.run.active, restored.run.last})
	if d != nil {
		reps = append(reps, span{d.othersRep.n, d.othersRep.active, d.othersRep.last})
		for i := range d.list {
			r := &d.list[i].rep
			reps = append(reps, span{r.n, r.active, r.last})
		}
	}
	c.Repeated = t.repeatCount(joinSpans(reps, quiet))
	c.Clients.Repeated = c.Repeated
	if restored.told {
		// The clients' repeats: the same, but of the restored run only what the earlier meter took for clients.
		reps[0] = span{restored.clients.n, restored.clients.active, restored.clients.last}
		c.Clients.Repeated = t.repeatCount(joinSpans(reps, quiet))
	}
	if d == nil || !d.cadence {
		return checkers
	}
	from := len(checkers)
	aside := false
	for i := range d.list {
		s := &d.list[i]
		switch {
		case s.checker:
			checkers = s.appendCheckers(checkers, t)
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
	runs := append(scratch[:0], span{d.others.n, d.others.active, d.others.last})
	// Of a restored run, only the part an earlier meter that told sources apart took for clients (one that
	// did not left nothing to tell it by).
	var repScratch [maxRuns + 1]span
	reps = append(repScratch[:0], span{d.othersRep.n, d.othersRep.active, d.othersRep.last})
	if restored.told {
		reps = append(reps, span{restored.clients.n, restored.clients.active, restored.clients.last})
	}
	for i := range d.list {
		s := &d.list[i]
		if s.checker || s.candidate(now) {
			continue
		}
		runs = append(runs, span{s.n, s.run, s.last})
		reps = append(reps, span{s.rep.n, s.rep.active, s.rep.last})
	}
	n, active, last := joinSpans(runs, quiet)
	c.Clients = ClientCount{Attempts: n, Repeated: t.repeatCount(joinSpans(reps, quiet))}
	if n > 0 {
		c.Clients.ActiveSince, c.Clients.LastSeen = t.nsTime(active), t.nsTime(last)
	}
	return checkers
}

// repeatCount is a joined run of repeated arrivals as a RepeatCount.
func (t *tally) repeatCount(n uint64, active, last int64) RepeatCount {
	if n == 0 {
		return RepeatCount{}
	}
	return RepeatCount{Attempts: n, ActiveSince: t.nsTime(active), LastSeen: t.nsTime(last)}
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

// countSource records the source of one arrival at t.dests[di], with its cadence only at a NodePort (where a
// traffic-port checker probes), and not at all with Config.CheckerSources negative.
func (t *tally) countSource(di int, p packet, at int64) {
	d := &t.dests[di]
	if t.cfg.CheckerSources <= 0 {
		return
	}
	if d.src == nil {
		// Allocated at the first arrival (once): a destination nobody reaches costs a pointer.
		d.src = &destSources{cadence: d.dest.IsNode(), bands: !t.cfg.noBands}
	}
	d.src.add(p, p.sport, at, int64(t.cfg.QuietPeriod), t.cfg.CheckerSources)
}
