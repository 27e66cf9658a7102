package arrivals

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// probes adds a load balancer's checker from src to the timeline: a new connection every interval from phase
// on, each on its timer to a few milliseconds (a scheduler's delay, no configured jitter), dropped: the SYN and
// the kernel's retransmissions until the check's timeout, which is shorter than the interval (HAProxy's
// `timeout check` defaults to it), a datagram for UDP.
func (tl *timeline) probes(src netip.Addr, interval, phase, end time.Duration) {
	timeout := min(interval-100*time.Millisecond, time.Duration(1500+tl.rng.IntN(8500))*time.Millisecond)
	for at := phase; at < end; at += interval {
		when := at + time.Duration(tl.rng.IntN(5000))*time.Microsecond
		tl.add(src, uint16(1024+tl.rng.IntN(60000)), when)
		if tl.tmpl.proto == UDP {
			continue
		}
		for backoff, r := time.Second, when+time.Second; r < when+timeout; backoff, r = backoff*2, r+backoff*2 {
			tl.add(src, tl.wire[len(tl.wire)-1].p.sport, r)
		}
	}
}

// nodePortTimeline is an empty timeline at a NodePort, TCP for even seeds and UDP for odd ones, its random
// numbers from seed and stream.
func nodePortTimeline(seed, stream uint64) (*timeline, Dest) {
	tl := &timeline{rng: rand.New(rand.NewPCG(seed, stream)), tmpl: syn("0.0.0.0", "192.0.2.10", 30080)}
	if seed%2 == 1 {
		tl.tmpl = udp("0.0.0.0", "192.0.2.10", 30053)
		return tl, NodeDest(UDP, false, 30053)
	}
	return tl, NodeDest(TCP, false, 30080)
}

// countUntil counts the packets of the sorted timeline from wire[i] up to at into ty, and returns d's count at
// at and the index of the next packet.
func countUntil(t *testing.T, ty *tally, wire []wirePacket, i int, d Dest, at time.Duration) (DestCount, int) {
	t.Helper()
	for ; i < len(wire) && wire[i].at <= at; i++ {
		countBytes(t, ty, wire[i].p, testNow.Add(wire[i].at))
	}
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(at)}
	ty.fill(&s)
	c, _ := s.Dest(d)
	return c, i
}

// neverClients counts tl at a NodePort in the order its packets arrive, snapshotting every 2 s up to end: no
// client attempt, repeated or not, at any of them, and src named a checker at the end.
func neverClients(t *testing.T, name string, tl *timeline, d Dest, end time.Duration, src netip.Addr) {
	t.Helper()
	slices.SortStableFunc(tl.wire, func(a, b wirePacket) int { return cmp.Compare(a.at, b.at) })
	ty := newTestTally(t, Config{}, testWatch)
	var c DestCount
	for i, at := 0, 2*time.Second; at <= end; at += 2 * time.Second {
		c, i = countUntil(t, ty, tl.wire, i, d, at)
		if c.Clients.Attempts != 0 || c.Clients.Repeated.Attempts != 0 {
			t.Errorf("%s: at +%s clients %+v (of %d attempts), want none", name, at, c.Clients, c.Attempts)
			return
		}
		if at == end && (len(c.Checkers) == 0 || c.Checkers[0].Addr != src) {
			t.Errorf("%s: at +%s checkers %v, want %s", name, at, checkerAddrs(c), src)
		}
	}
}

// TestTwoCheckersOneAddressSeeded: 200 recorded timelines, seeded, of two checkers behind one address (two
// load balancer backends, two monitors) at a NodePort, TCP or UDP, each at its own cadence of 1 to 10 s (the
// same one in half of them: two backends configured alike) and phase, five minutes long: their probes
// are never a client's, at any moment, and the address is named a checker.
func TestTwoCheckersOneAddressSeeded(t *testing.T) {
	const end = 5 * time.Minute
	src := netip.MustParseAddr("198.18.0.5")
	for seed := range uint64(200) {
		tl, d := nodePortTimeline(seed, 0x2c1c)
		rng := tl.rng
		a := time.Duration(1000+rng.IntN(9000)) * time.Millisecond
		b := time.Duration(1000+rng.IntN(9000)) * time.Millisecond
		if seed%4 < 2 {
			b = a
		}
		if a/2*b/(a/2+b/2) < minCadence {
			b = max(b, 2*time.Second) // together faster than once a second: a client's pace, never a checker's
			a = max(a, 2*time.Second)
		}
		pa, pb := time.Duration(rng.Int64N(int64(a))), time.Duration(rng.Int64N(int64(b)))
		tl.probes(src, a, pa, end)
		tl.probes(src, b, pb, end)
		neverClients(t, fmt.Sprintf("seed %d: %v every %s from +%s and every %s from +%s at %v", seed, src, a, pa, b, pb, d), tl, d, end, src)
	}
}

// TestSlowCheckersSeeded: 100 recorded timelines, seeded, of a slow checker alone at a NodePort (AWS target
// groups check every 30 s by default, many load balancers allow up to 60 s), TCP or UDP, its phase and
// timeout random, ten minutes long: its probes are never a client's while it proves its cadence (its fifth
// probe comes two to four minutes after the first) nor after, and it is named a checker.
func TestSlowCheckersSeeded(t *testing.T) {
	const end = 10 * time.Minute
	src := netip.MustParseAddr("198.18.0.7")
	for seed := range uint64(100) {
		tl, d := nodePortTimeline(seed, 0x510e)
		rng := tl.rng
		every := time.Duration(30000+rng.IntN(30001)) * time.Millisecond
		phase := time.Duration(rng.Int64N(int64(every)))
		tl.probes(src, every, phase, end)
		neverClients(t, fmt.Sprintf("seed %d: %v every %s from +%s at %v", seed, src, every, phase, d), tl, d, end, src)
	}
}

// runOf is what the exporter's state file keeps of a destination's count (scrape, stateBody).
func runOf(c DestCount) Run {
	r := Run{Attempts: c.Attempts, FirstSeen: c.FirstSeen, LastSeen: c.LastSeen, ActiveSince: c.ActiveSince,
		WatchedSince: c.WatchedSince}
	if c.SetAside {
		r.Told, r.Checkers, r.Clients = true, c.Checkers, c.Clients.Repeated
	}
	return r
}

// restartAt is a meter restored at back from what the state file keeps of c, d's count when the earlier one
// stopped, with wire[i:] sent since: it returns the new tally and the index of the first packet it sees.
func restartAt(t *testing.T, c DestCount, d Dest, wire []wirePacket, i int, back time.Duration) (*tally, int) {
	t.Helper()
	after := newTally(Config{}.withDefaults(), nil)
	after.restore(map[Dest]Run{d: runOf(c)})
	nw, err := testWatch.normalize()
	if err != nil {
		t.Fatal(err)
	}
	after.setWatch(nw, testNow.Add(back))
	for ; i < len(wire) && wire[i].at < back; i++ { // the packets no meter saw
	}
	return after, i
}

// TestCheckersAcrossARestartSeeded: 200 recorded timelines, seeded, of a checker at a NodePort (alone, or two
// behind one address), TCP or UDP, every 1 to 60 s, whose exporter restarts once the checker has proven its
// cadence: down for 1 to 60 s, then a new meter restored from what the state file keeps. From its first
// snapshot on, before any probe reached it and while the checker re-proves itself, no attempt is a client's,
// and the checker is named.
func TestCheckersAcrossARestartSeeded(t *testing.T) {
	const end = 10 * time.Minute
	src := netip.MustParseAddr("198.18.0.9")
	for seed := range uint64(200) {
		tl, d := nodePortTimeline(seed, 0x4e57)
		rng := tl.rng
		every := time.Duration(1000+rng.IntN(59000)) * time.Millisecond
		tl.probes(src, every, time.Duration(rng.Int64N(int64(every))), end)
		name := fmt.Sprintf("seed %d: %v every %s", seed, src, every)
		if seed%4 >= 2 {
			other := max(every+every/3, 2*time.Second)
			tl.probes(src, other, time.Duration(rng.Int64N(int64(other))), end)
			name += fmt.Sprintf(" and every %s", other)
		}
		name += fmt.Sprintf(" at %v", d)
		slices.SortStableFunc(tl.wire, func(a, b wirePacket) int { return cmp.Compare(a.at, b.at) })
		down := 6*every + 2*time.Minute*time.Duration(rng.IntN(2)) // proven, or proven long before
		back := down + time.Duration(1000+rng.IntN(59000))*time.Millisecond

		c, i := countUntil(t, newTestTally(t, Config{}, testWatch), tl.wire, 0, d, down)
		if len(c.Checkers) == 0 || c.Clients.Repeated.Attempts != 0 {
			t.Errorf("%s: before the restart checkers %v, clients %+v; want it proven", name, checkerAddrs(c), c.Clients)
			continue
		}
		after, i := restartAt(t, c, d, tl.wire, i, back)
		for at := back; at <= end; at += 2 * time.Second {
			c, i = countUntil(t, after, tl.wire, i, d, at)
			if c.Clients.Repeated.Attempts != 0 || len(c.Checkers) == 0 {
				t.Errorf("%s, down from +%s to +%s: at +%s checkers %v, clients %+v; want the checker and no client",
					name, down, back, at, checkerAddrs(c), c.Clients)
				break
			}
		}
	}
}

// TestCandidatesAcrossARestartSeeded: as TestCheckersAcrossARestartSeeded, but the exporter restarts while the
// checker is still proving its cadence (after its first or second probe, within its candidate window): the
// state file keeps no candidate, and what it keeps of the run must not make its probes a client's after the
// restart. From the restored meter's first snapshot on no attempt is a client's, and the checker proves itself
// again by the end.
func TestCandidatesAcrossARestartSeeded(t *testing.T) {
	const end = 10 * time.Minute
	src := netip.MustParseAddr("198.18.0.9")
	for seed := range uint64(200) {
		tl, d := nodePortTimeline(seed, 0xca4d)
		rng := tl.rng
		every := time.Duration(1000+rng.IntN(19000)) * time.Millisecond
		phase := time.Duration(rng.Int64N(int64(every)))
		tl.probes(src, every, phase, end)
		name := fmt.Sprintf("seed %d: %v every %s at %v", seed, src, every, d)
		slices.SortStableFunc(tl.wire, func(a, b wirePacket) int { return cmp.Compare(a.at, b.at) })
		// Down after the first or second probe (and its retransmissions), before the third proves a clock.
		down := phase + time.Duration(1+rng.IntN(2))*every - every/4
		back := down + time.Duration(1000+rng.IntN(59000))*time.Millisecond

		c, i := countUntil(t, newTestTally(t, Config{}, testWatch), tl.wire, 0, d, down)
		if len(c.Checkers) != 0 || c.Clients.Repeated.Attempts != 0 {
			t.Errorf("%s: before the restart at +%s checkers %v, clients %+v; want a candidate", name, down, checkerAddrs(c), c.Clients)
			continue
		}
		after, i := restartAt(t, c, d, tl.wire, i, back)
		for at := back; at <= end; at += 2 * time.Second {
			c, i = countUntil(t, after, tl.wire, i, d, at)
			if c.Clients.Repeated.Attempts != 0 {
				t.Errorf("%s, down from +%s to +%s: at +%s clients %+v; want none", name, down, back, at, c.Clients)
				break
			}
		}
		if len(c.Checkers) == 0 {
			t.Errorf("%s, down from +%s to +%s: no checker at the end", name, down, back)
		}
	}
}
