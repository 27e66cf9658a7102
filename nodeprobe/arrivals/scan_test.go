package arrivals

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// scanBed counts packets at testWatch's destinations and snapshots one of them at a chosen time.
type scanBed struct {
	t    *testing.T
	tl   *tally
	port uint16
}

func newScanBed(t *testing.T, cfg Config) *scanBed {
	return &scanBed{t: t, tl: newTestTally(t, cfg, testWatch), port: 1024}
}

// send counts p from src at at, from a new source port, and retransmissions of it (the same port) 1 s, 3 s,
// 7 s … later.
func (b *scanBed) send(p testPacket, src netip.Addr, at time.Duration, retransmits int) {
	b.t.Helper()
	b.port++
	p.src, p.sport = src, b.port
	countRetransmitted(b.t, b.tl, p, at, retransmits)
}

func (b *scanBed) at(d Dest, at time.Duration) DestCount {
	b.t.Helper()
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(at)}
	b.tl.fill(&s)
	c, ok := s.Dest(d)
	if !ok {
		b.t.Fatalf("%v not in snapshot", d)
	}
	return c
}

func sameRepeats(a, b RepeatCount) bool {
	return a.Attempts == b.Attempts && a.ActiveSince.Equal(b.ActiveSince) && a.LastSeen.Equal(b.LastSeen)
}

// scanner is the k-th address of a scan: each sends once.
func scanner(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, byte(k >> 8), byte(k)}) }

// A port scan: one SYN (one datagram) from each of many sources, never retransmitted, at a NodePort, a load
// balancer IP and UDP ports. Every one counts as an arrival (and, at a NodePort once past the candidate window,
// as a client's), none as repeated. A client whose SYN is retransmitted is repeated from its first SYN on.
func TestPortScanNeverRepeats(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    testPacket
		d    Dest
	}{
		{"NodePort", syn("0.0.0.0", "192.0.2.10", 30080), NodeDest(TCP, false, 30080)},
		{"load balancer IP", syn("0.0.0.0", "203.0.113.7", 80), lb(TCP, "203.0.113.7", 80)},
		{"UDP NodePort", udp("0.0.0.0", "192.0.2.10", 30053), NodeDest(UDP, false, 30053)},
		{"UDP load balancer IP", udp("0.0.0.0", "203.0.113.7", 53), lb(UDP, "203.0.113.7", 53)},
		{"SCTP NodePort", sctpInit("0.0.0.0", "192.0.2.10", 30132), NodeDest(SCTP, false, 30132)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newScanBed(t, Config{})
			for k := range 40 {
				b.send(tc.p, scanner(k), time.Duration(k)*1500*time.Millisecond, 0)
			}
			// The last scanner's SYN is past the candidate window: counted as a client's at a NodePort too.
			done := time.Minute + candidateWindow
			c := b.at(tc.d, done)
			if c.Attempts != 40 || c.Clients.Attempts != 40 {
				t.Errorf("attempts %d, clients %+v: want the 40 single attempts counted", c.Attempts, c.Clients)
			}
			if c.Repeated != (RepeatCount{}) || c.Clients.Repeated != (RepeatCount{}) {
				t.Errorf("repeated %+v, clients' %+v: want none", c.Repeated, c.Clients.Repeated)
			}
			// A client: its SYN dropped and retransmitted a second later (a datagram sent again).
			client := netip.MustParseAddr("203.0.113.50")
			b.send(tc.p, client, done, 1)
			c = b.at(tc.d, done+candidateWindow+2*time.Second)
			want := RepeatCount{Attempts: 2, ActiveSince: testNow.Add(done), LastSeen: testNow.Add(done + time.Second)}
			if !sameRepeats(c.Repeated, want) || !sameRepeats(c.Clients.Repeated, want) {
				t.Errorf("after a client's retransmission: repeated %+v, clients' %+v; want %+v", c.Repeated, c.Clients.Repeated, want)
			}
			if c.Attempts != 42 {
				t.Errorf("attempts %d, want 42", c.Attempts)
			}
		})
	}
}

// A source comes again with a new connection (a connect timeout shorter than the first retransmission), within
// repeatWindow: repeated. The same source again after repeatWindow (a scanner's next sweep): not.
func TestRepeatWindow(t *testing.T) {
	b := newScanBed(t, Config{})
	src := netip.MustParseAddr("203.0.113.60")
	p := syn("0.0.0.0", "203.0.113.7", 80)
	b.send(p, src, 0, 0)
	b.send(p, src, repeatWindow+time.Second, 0)
	if c := b.at(lb(TCP, "203.0.113.7", 80), time.Minute); c.Attempts != 2 || c.Repeated.Attempts != 0 {
		t.Errorf("two single SYNs %s apart: attempts %d repeated %+v; want none repeated", repeatWindow+time.Second, c.Attempts, c.Repeated)
	}
	b.send(p, src, repeatWindow+1500*time.Millisecond, 0) // a new connection half a second after the last
	if c := b.at(lb(TCP, "203.0.113.7", 80), time.Minute); c.Repeated.Attempts != 2 ||
		!c.Repeated.ActiveSince.Equal(testNow.Add(repeatWindow+time.Second)) {
		t.Errorf("a new connection within the window: repeated %+v; want the two from +%s", c.Repeated, repeatWindow+time.Second)
	}
}

// At a NodePort, a checker's probes repeat its source but are no client's: a scanner beside it leaves the
// clients' repeated count empty, while the whole count's holds the checker's.
func TestPortScanBesideAChecker(t *testing.T) {
	b := newScanBed(t, Config{})
	p := syn("0.0.0.0", "192.0.2.10", 30080)
	for i := range 40 {
		b.send(p, netip.MustParseAddr("198.18.0.5"), time.Duration(i)*2*time.Second, 1)
	}
	b.send(p, scanner(1), 20*time.Second, 0)
	c := b.at(NodeDest(TCP, false, 30080), 20*time.Second+candidateWindow+time.Second)
	if len(c.Checkers) != 1 || c.Clients.Attempts != 1 {
		t.Fatalf("checkers %v, clients %+v: want the checker and the scanner's SYN as a client's", checkerAddrs(c), c.Clients)
	}
	if c.Clients.Repeated != (RepeatCount{}) {
		t.Errorf("clients' repeated %+v, want none", c.Clients.Repeated)
	}
	if c.Repeated.Attempts != 80 {
		t.Errorf("repeated %+v, want the checker's 80 SYNs", c.Repeated)
	}
}

// A crowd of new clients, each retransmitting its dropped SYN a second later, far more than the places kept,
// counted in the order they arrive: the sources waiting for their repeat keep their places, so the first ones
// prove themselves a second after they came and make room. Evicting the oldest, as before, forgot each one 80 ms
// after it came, long before its retransmission, and the crowd never repeated.
func TestCrowdOfClientsRepeats(t *testing.T) {
	tl := newTestTally(t, Config{}, testWatch)
	type arrival struct {
		p  testPacket
		at time.Duration
	}
	var wire []arrival
	for k := range 1000 {
		p := syn("0.0.0.0", "203.0.113.7", 80)
		p.src, p.sport = netip.AddrFrom4([4]byte{100, 64, byte(k >> 8), byte(k)}), uint16(2000+k)
		at := time.Duration(k) * 5 * time.Millisecond
		wire = append(wire, arrival{p, at}, arrival{p, at + time.Second})
	}
	slices.SortStableFunc(wire, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	snap := func(upTo time.Duration) DestCount {
		t.Helper()
		for len(wire) > 0 && wire[0].at <= upTo {
			countBytes(t, tl, wire[0].p, testNow.Add(wire[0].at))
			wire = wire[1:]
		}
		s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(upTo)}
		tl.fill(&s)
		c, _ := s.Dest(lb(TCP, "203.0.113.7", 80))
		return c
	}
	if c := snap(900 * time.Millisecond); c.Attempts != 181 || c.Repeated.Attempts != 0 {
		t.Fatalf("before any retransmission: attempts %d repeated %+v; want 181 single SYNs", c.Attempts, c.Repeated)
	}
	c := snap(1100 * time.Millisecond)
	if c.Repeated.Attempts < 2 || !c.Repeated.ActiveSince.Equal(testNow) || !c.Repeated.LastSeen.After(testNow.Add(time.Second-time.Millisecond)) {
		t.Errorf("a second after the first client: repeated %+v; want its SYN and retransmission", c.Repeated)
	}
	c = snap(time.Minute)
	if c.Attempts != 2000 || c.Repeated.Attempts < 32 {
		t.Errorf("attempts %d repeated %d: want every SYN counted, the places' worth repeated at least", c.Attempts, c.Repeated.Attempts)
	}
}

// A crowd of scanners fills the places for repeatWindow at most: a client arriving after it is followed.
func TestCrowdOfScannersThenAClient(t *testing.T) {
	b := newScanBed(t, Config{})
	p := syn("0.0.0.0", "192.0.2.10", 30080)
	for k := range 1000 {
		b.send(p, scanner(k), time.Duration(k)*5*time.Millisecond, 0)
	}
	b.send(p, netip.MustParseAddr("203.0.113.70"), 20*time.Second, 2)
	c := b.at(NodeDest(TCP, false, 30080), 20*time.Second+candidateWindow+time.Second)
	if c.Clients.Repeated.Attempts != 3 || !c.Clients.Repeated.LastSeen.Equal(testNow.Add(23*time.Second)) {
		t.Errorf("clients' repeated %+v, want the client's 3 SYNs to +23s", c.Clients.Repeated)
	}
	if c.Clients.Attempts != 1003 {
		t.Errorf("clients %d, want every arrival", c.Clients.Attempts)
	}
}

// Without sources kept (Config.CheckerSources negative) nothing tells a repeat: every arrival counts as one.
// A run an earlier meter counted (Meter.Restore) counts as repeated: the state file keeps no sources.
func TestRepeatsUntoldAndRestored(t *testing.T) {
	b := newScanBed(t, Config{CheckerSources: -1})
	p := syn("0.0.0.0", "203.0.113.7", 80)
	b.send(p, scanner(1), 0, 0)
	if c := b.at(lb(TCP, "203.0.113.7", 80), time.Second); c.Repeated.Attempts != 1 || c.Clients.Repeated.Attempts != 1 {
		t.Errorf("untold: repeated %+v, clients' %+v; want the single SYN", c.Repeated, c.Clients.Repeated)
	}

	tl := newTally(Config{}.withDefaults(), nil)
	d := lb(TCP, "203.0.113.7", 80)
	tl.restore(map[Dest]Run{d: {Attempts: 30, FirstSeen: testNow.Add(-5 * time.Minute), ActiveSince: testNow.Add(-5 * time.Minute),
		LastSeen: testNow.Add(-10 * time.Second)}})
	nw, err := testWatch.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow)
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow}
	tl.fill(&s)
	c, _ := s.Dest(d)
	if c.Repeated.Attempts != 30 || !c.Repeated.LastSeen.Equal(testNow.Add(-10*time.Second)) || !sameRepeats(c.Clients.Repeated, c.Repeated) {
		t.Errorf("restored: repeated %+v, clients' %+v; want the restored run", c.Repeated, c.Clients.Repeated)
	}
}
