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

// timeline is packets on the wire at one destination, each at its time from testNow.
type timeline struct {
	rng  *rand.Rand
	tmpl testPacket // the destination, protocol and kind of packet
	wire []wirePacket
	next uint32 // the next fresh scanner address
}

type wirePacket struct {
	p  testPacket
	at time.Duration
}

func (tl *timeline) add(src netip.Addr, sport uint16, at time.Duration) {
	p := tl.tmpl
	p.src, p.sport = src, sport
	tl.wire = append(tl.wire, wirePacket{p, at})
}

// scanners: a scan's single packets from fresh addresses, rate a second on average, from 0 to end.
func (tl *timeline) scanners(rate float64, end time.Duration) int {
	n := 0
	for at := time.Duration(0); rate > 0; n++ {
		at += time.Duration(tl.rng.ExpFloat64() / rate * float64(time.Second))
		if at >= end {
			return n
		}
		tl.next++
		tl.add(netip.AddrFrom4([4]byte{198, 51, byte(tl.next >> 8), byte(tl.next)}), uint16(1024+tl.rng.IntN(60000)), at)
	}
	return n
}

// attempt is a client's connection attempt from src:sport at at, dropped: the SYN and the kernel's
// retransmissions 1 s, 3 s, 7 s, 15 s … after it, until its connect timeout; for UDP, a datagram and one
// retry after the timeout, capped at 5 s (a resolver's). It returns the attempt's last packet time.
func (tl *timeline) attempt(src netip.Addr, sport uint16, at time.Duration) time.Duration {
	timeout := time.Duration(1200+tl.rng.IntN(8800)) * time.Millisecond
	tl.add(src, sport, at)
	if tl.tmpl.proto == UDP {
		retry := min(timeout, 5*time.Second)
		tl.add(src, sport, at+retry)
		return at + retry
	}
	last := at
	for backoff, when := time.Second, at+time.Second; when < at+timeout; backoff, when = backoff*2, when+backoff*2 {
		tl.add(src, sport, when)
		last = when
	}
	return last
}

// irregular: one client address whose attempts come at gaps of 0.3 to 30 s, each at least 15 % off the
// previous one (never a clock: see sources.go for what a checker is). It returns the first and last attempt.
func (tl *timeline) irregular(src netip.Addr, end time.Duration) (first, last time.Duration) {
	gap := time.Duration(300+tl.rng.IntN(29700)) * time.Millisecond
	first = time.Duration(tl.rng.IntN(int(end / 2)))
	for at := first; at < end; {
		tl.attempt(src, uint16(1024+tl.rng.IntN(60000)), at)
		last = at
		for {
			next := time.Duration(float64(gap) * (0.5 + 1.5*tl.rng.Float64()))
			next = min(max(next, 300*time.Millisecond), 30*time.Second)
			if d := next - gap; d > gap*15/100 || -d > gap*15/100 {
				gap = next
				break
			}
		}
		at += gap
	}
	return first, last
}

// bursty: bursts of 2 to 8 attempts within 200 ms from one address, 20 to 90 s apart.
func (tl *timeline) bursty(src netip.Addr, end time.Duration) (first, last time.Duration) {
	first = time.Duration(tl.rng.IntN(int(end / 2)))
	for at := first; at < end; at += time.Duration(20+tl.rng.IntN(70)) * time.Second {
		for k, n := 0, 2+tl.rng.IntN(7); k < n; k++ {
			when := at + time.Duration(tl.rng.IntN(200))*time.Millisecond
			tl.attempt(src, uint16(1024+tl.rng.IntN(60000)), when)
			last = max(last, when)
		}
	}
	return first, last
}

// population: 20 to 60 clients behind one NAT address, each its own source port, each trying 1 to 3 times
// at random moments.
func (tl *timeline) population(src netip.Addr, end time.Duration) (first, last time.Duration) {
	first = end
	for range 20 + tl.rng.IntN(41) {
		sport := uint16(1024 + tl.rng.IntN(60000))
		for range 1 + tl.rng.IntN(3) {
			at := time.Duration(tl.rng.Int64N(int64(end)))
			tl.attempt(src, sport, at)
			first, last = min(first, at), max(last, at)
		}
	}
	return first, last
}

// count counts the timeline's packets in the order they arrive.
func (tl *timeline) count(t *testing.T, ty *tally) {
	t.Helper()
	slices.SortStableFunc(tl.wire, func(a, b wirePacket) int { return cmp.Compare(a.at, b.at) })
	for _, w := range tl.wire {
		countBytes(t, ty, w.p, testNow.Add(w.at))
	}
}

// TestScansAndClientsSeeded runs hundreds of recorded timelines, seeded: at a NodePort or a load balancer IP,
// TCP or UDP, a port scan (single packets from fresh addresses, up to 5 a second) alone never makes a repeated
// arrival; a scan at up to one every 2 s beside a client of each shape (irregular, bursty, a population behind
// one NAT address), whose dropped attempts the kernel retransmits, always does, the clients' repeated arrivals
// reaching to the client's last attempt (so a loss is held from it), and, where no cadence is followed (a load
// balancer IP), from within 4 s of its first attempt.
func TestScansAndClientsSeeded(t *testing.T) {
	const end = 5 * time.Minute
	dests := []struct {
		tmpl testPacket
		d    Dest
	}{
		{syn("0.0.0.0", "192.0.2.10", 30080), NodeDest(TCP, false, 30080)},
		{syn("0.0.0.0", "203.0.113.7", 80), lb(TCP, "203.0.113.7", 80)},
		{udp("0.0.0.0", "192.0.2.10", 30053), NodeDest(UDP, false, 30053)},
		{udp("0.0.0.0", "203.0.113.7", 53), lb(UDP, "203.0.113.7", 53)},
	}
	shapes := []string{"scan alone", "irregular", "bursty", "population"}
	client := netip.MustParseAddr("203.0.113.50")
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 0x5ca9))
		dest := dests[seed%4]
		shape := shapes[seed/4%4]
		name := fmt.Sprintf("seed %d, %s at %v", seed, shape, dest.d)
		tl := &timeline{rng: rng, tmpl: dest.tmpl}
		var first, last time.Duration
		switch shape {
		case "scan alone":
			tl.scanners(5*rng.Float64(), end)
		case "irregular":
			tl.scanners(0.5*rng.Float64(), end)
			first, last = tl.irregular(client, end)
		case "bursty":
			tl.scanners(0.5*rng.Float64(), end)
			first, last = tl.bursty(client, end)
		case "population":
			tl.scanners(0.5*rng.Float64(), end)
			first, last = tl.population(client, end)
		}
		ty := newTestTally(t, Config{}, testWatch)
		if shape != "scan alone" && !dest.d.IsNode() {
			// The page's time: the repeats counted by 4 s after the first attempt (its retransmission 1 s later,
			// or 3 s for one the places could not take at once).
			early := *tl
			early.wire = slices.DeleteFunc(slices.Clone(tl.wire), func(w wirePacket) bool { return w.at > first+4*time.Second })
			early.count(t, ty)
			s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(first + 4*time.Second)}
			ty.fill(&s)
			if c, _ := s.Dest(dest.d); c.Clients.Repeated.Attempts == 0 && lastOfFirst(tl, client, first) > first {
				t.Errorf("%s: 4 s after the client's first attempt nothing repeated: %+v", name, c.Clients)
			}
			ty = newTestTally(t, Config{}, testWatch)
		}
		tl.count(t, ty)
		s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(end + 2*time.Minute)}
		ty.fill(&s)
		c, _ := s.Dest(dest.d)
		if c.Attempts != uint64(len(tl.wire)) {
			t.Errorf("%s: %d attempts, want every one of %d packets", name, c.Attempts, len(tl.wire))
		}
		if shape == "scan alone" {
			if c.Repeated.Attempts != 0 || c.Clients.Repeated.Attempts != 0 {
				t.Errorf("%s: %d single packets, repeated %+v", name, len(tl.wire), c.Repeated)
			}
			continue
		}
		if len(c.Checkers) != 0 {
			t.Errorf("%s: the client taken for a checker: %v", name, checkerAddrs(c))
		}
		if got := c.Clients.Repeated; got.Attempts == 0 || got.LastSeen.Before(testNow.Add(last)) {
			t.Errorf("%s: clients' repeated %+v, want them to reach its last attempt at +%s", name, got, last)
		}
	}
}

// lastOfFirst is the last packet of src at or within 10 s of first: whether its first attempt had a
// retransmission (or a next attempt) to repeat it at all.
func lastOfFirst(tl *timeline, src netip.Addr, first time.Duration) time.Duration {
	last := first
	for _, w := range tl.wire {
		if w.p.src == src && w.at > first && w.at <= first+4*time.Second {
			last = max(last, w.at)
		}
	}
	return last
}
