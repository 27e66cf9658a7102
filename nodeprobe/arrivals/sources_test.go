package arrivals

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// sourceBed counts SYNs at the NodePort 30080 of testWatch and snapshots at a chosen time.
type sourceBed struct {
	t    *testing.T
	tl   *tally
	port uint16 // the next source port, so each attempt is a new connection
}

func newSourceBed(t *testing.T, cfg Config) *sourceBed {
	return &sourceBed{t: t, tl: newTestTally(t, cfg, testWatch), port: 1024}
}

// attempt is a new connection from src at at; retransmits adds the kernel's SYN retransmissions of it (same
// source port) 1 s, 3 s, 7 s … later.
func (b *sourceBed) attempt(src string, at time.Duration, retransmits int) {
	b.t.Helper()
	p := syn(src, "192.0.2.10", 30080)
	b.port++
	p.sport = b.port
	countRetransmitted(b.t, b.tl, p, at, retransmits)
}

// countRetransmitted counts p at at and the kernel's retransmissions of it (the same packet) 1 s, 3 s, 7 s …
// later.
func countRetransmitted(t *testing.T, tl *tally, p testPacket, at time.Duration, retransmits int) {
	t.Helper()
	countBytes(t, tl, p, testNow.Add(at))
	backoff := time.Second
	for r, when := 0, at; r < retransmits; r++ {
		when += backoff
		backoff *= 2
		countBytes(t, tl, p, testNow.Add(when))
	}
}

func (b *sourceBed) at(at time.Duration) DestCount {
	b.t.Helper()
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(at)}
	b.tl.fill(&s)
	c, ok := s.Dest(NodeDest(TCP, false, 30080))
	if !ok {
		b.t.Fatal("NodePort not in snapshot")
	}
	return c
}

func checkerAddrs(c DestCount) []string {
	var out []string
	for _, ch := range c.Checkers {
		out = append(out, fmt.Sprintf("%s/%s", ch.Addr, ch.Interval.Round(10*time.Millisecond)))
	}
	return out
}

// An HAProxy-style checker: a new connection every 2 s from one address, each dropped (one retransmission
// before the check's 2 s timeout). Its first probes are set aside while it proves its cadence, then it is a
// checker: no client attempt at any time.
func TestSourcesChecker(t *testing.T) {
	b := newSourceBed(t, Config{})
	for i := range 30 {
		at := time.Duration(i) * 2 * time.Second
		b.attempt("198.18.0.5", at+time.Duration(i%3)*time.Millisecond, 1)
		c := b.at(at + 1500*time.Millisecond)
		if c.Clients.Attempts != 0 || !c.Clients.LastSeen.IsZero() {
			t.Fatalf("after probe %d: clients %+v, want none (a checker's probes are not clients)", i+1, c.Clients)
		}
		if want := i >= 4; (len(c.Checkers) == 1) != want {
			t.Fatalf("after probe %d: checkers %v, want one: %v", i+1, checkerAddrs(c), want)
		}
		if c.Attempts != uint64(2*(i+1)) {
			t.Fatalf("after probe %d: attempts %d, want every SYN (retransmissions too)", i+1, c.Attempts)
		}
	}
	c := b.at(time.Minute)
	if got := checkerAddrs(c); len(got) != 1 || got[0] != "198.18.0.5/2s" {
		t.Errorf("checkers %v, want 198.18.0.5 every 2s", got)
	}
}

// A client next to the checker: only the client's attempts are clients, with its own times.
func TestSourcesCheckerAndClient(t *testing.T) {
	b := newSourceBed(t, Config{})
	for i := range 20 {
		b.attempt("198.18.0.5", time.Duration(i)*2*time.Second, 1)
	}
	// An irregular client: 3.1 s, 1.4 s, 5.2 s, 2.3 s apart.
	at := 10 * time.Second
	for _, gap := range []time.Duration{0, 3100 * time.Millisecond, 1400 * time.Millisecond, 5200 * time.Millisecond, 2300 * time.Millisecond} {
		at += gap
		b.attempt("203.0.113.50", at, 1)
	}
	c := b.at(40 * time.Second)
	if got := checkerAddrs(c); len(got) != 1 || got[0] != "198.18.0.5/2s" {
		t.Errorf("checkers %v, want 198.18.0.5 alone", got)
	}
	if c.Clients.Attempts != 10 || !c.Clients.ActiveSince.Equal(testNow.Add(10*time.Second)) ||
		!c.Clients.LastSeen.Equal(testNow.Add(at+time.Second)) {
		t.Errorf("clients %+v, want the client's 10 SYNs from +10s to +%s", c.Clients, at+time.Second)
	}
}

// A client that connects once is set aside for candidateWindow (it might be a checker's first probe, as slow
// as one a minute), then counts; one whose attempts no two clocks could keep counts at once: its fifth attempt
// off every clock (four might still begin two).
func TestSourcesCandidates(t *testing.T) {
	b := newSourceBed(t, Config{})
	b.attempt("203.0.113.60", 0, 2)
	if c := b.at(5 * time.Second); c.Clients.Attempts != 0 {
		t.Errorf("a first attempt 5s old: clients %+v, want it set aside", c.Clients)
	}
	if c := b.at(candidateWindow + time.Second); c.Clients.Attempts != 3 || !c.Clients.LastSeen.Equal(testNow.Add(3*time.Second)) {
		t.Errorf("a first attempt older than the window: clients %+v, want its 3 SYNs", c.Clients)
	}

	// A quiet period shorter than candidateWindow bounds the wait: a cadence slower than it is no run of
	// arrivals, and a loss hold shortened with it would end before the client counted.
	b = newSourceBed(t, Config{QuietPeriod: 10 * time.Second})
	b.attempt("203.0.113.62", 0, 1)
	if c := b.at(9 * time.Second); c.Clients.Attempts != 0 {
		t.Errorf("quiet period 10s, a first attempt 9s old: clients %+v, want it set aside", c.Clients)
	}
	if c := b.at(11 * time.Second); c.Clients.Repeated.Attempts != 2 {
		t.Errorf("quiet period 10s, a first attempt 11s old: clients %+v, want its SYN and retransmission", c.Clients)
	}

	b = newSourceBed(t, Config{})
	for _, at := range []time.Duration{0, 2 * time.Second, 5 * time.Second, 6500 * time.Millisecond} {
		b.attempt("203.0.113.61", at, 0)
	}
	if c := b.at(7 * time.Second); c.Clients.Attempts != 0 {
		t.Errorf("four attempts 2s, 3s, 1.5s apart: clients %+v; want them set aside (two clocks might begin)", c.Clients)
	}
	b.attempt("203.0.113.61", 12*time.Second, 0)
	if c := b.at(13 * time.Second); c.Clients.Attempts != 5 || len(c.Checkers) != 0 {
		t.Errorf("a fifth 5.5s later: clients %+v, checkers %v; want 5 client attempts", c.Clients, checkerAddrs(c))
	}
}

// What never makes a checker: clients faster than once a second, an irregular cadence, nothing tracked.
func TestSourcesNotCheckers(t *testing.T) {
	t.Run("faster than 1s", func(t *testing.T) {
		b := newSourceBed(t, Config{})
		for i := range 50 {
			b.attempt("203.0.113.70", time.Duration(i)*500*time.Millisecond, 0)
		}
		if c := b.at(time.Minute); len(c.Checkers) != 0 || c.Clients.Attempts != 50 {
			t.Errorf("checkers %v, clients %+v", checkerAddrs(c), c.Clients)
		}
	})
	t.Run("irregular", func(t *testing.T) {
		b := newSourceBed(t, Config{})
		at := time.Duration(0)
		for i := range 60 {
			b.attempt("203.0.113.71", at, 0)
			at += []time.Duration{2300, 3700, 2800, 4600, 3200}[i%5] * time.Millisecond
		}
		if c := b.at(at); len(c.Checkers) != 0 || c.Clients.Attempts != 60 {
			t.Errorf("checkers %v, clients %+v", checkerAddrs(c), c.Clients)
		}
	})
	t.Run("not tracked", func(t *testing.T) {
		b := newSourceBed(t, Config{CheckerSources: -1})
		for i := range 10 {
			b.attempt("198.18.0.5", time.Duration(i)*2*time.Second, 0)
		}
		if c := b.at(20 * time.Second); len(c.Checkers) != 0 || c.Clients.Attempts != 10 {
			t.Errorf("checkers %v, clients %+v", checkerAddrs(c), c.Clients)
		}
	})
	t.Run("load balancer IP", func(t *testing.T) {
		tl := newTestTally(t, Config{}, testWatch)
		for i := range 10 {
			p := syn("198.18.0.5", "203.0.113.7", 80)
			p.sport = uint16(2000 + i)
			countBytes(t, tl, p, testNow.Add(time.Duration(i)*2*time.Second))
		}
		s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(20 * time.Second)}
		tl.fill(&s)
		if c, _ := s.Dest(lb(TCP, "203.0.113.7", 80)); len(c.Checkers) != 0 || c.Clients.Attempts != 10 {
			t.Errorf("checkers %v, clients %+v: checkers are recognised at NodePorts only", checkerAddrs(c), c.Clients)
		}
	})
}

// A checker stays one through a skipped check and a client forwarded from its address, and stops being one
// when its cadence is gone.
func TestSourcesCheckerTolerance(t *testing.T) {
	b := newSourceBed(t, Config{})
	at := time.Duration(0)
	for range 12 {
		b.attempt("198.18.0.5", at, 0)
		at += 2 * time.Second
	}
	b.attempt("198.18.0.5", at-time.Second, 0) // a client forwarded in between
	b.attempt("198.18.0.5", at, 0)
	at += 4 * time.Second // a skipped check
	b.attempt("198.18.0.5", at, 0)
	if c := b.at(at); len(c.Checkers) != 1 || c.Clients.Attempts != 0 {
		t.Fatalf("after three irregular intervals: checkers %v, clients %+v; want still a checker", checkerAddrs(c), c.Clients)
	}
	for i := range 12 {
		at += []time.Duration{700, 3900, 1500, 6100}[i%4] * time.Millisecond
		b.attempt("198.18.0.5", at, 0)
	}
	if c := b.at(at); len(c.Checkers) != 0 || c.Clients.Attempts != 27 {
		t.Errorf("after its cadence is gone: checkers %v, clients %+v; want every attempt a client's", checkerAddrs(c), c.Clients)
	}
}

// Sixteen checkers keep their places through a flood of one-shot clients, which all count as clients.
func TestSourcesBoundedFlood(t *testing.T) {
	b := newSourceBed(t, Config{})
	for i := range 10 {
		for k := range 16 {
			b.attempt(fmt.Sprintf("198.18.1.%d", k), time.Duration(i)*5*time.Second+time.Duration(k)*time.Millisecond, 0)
		}
	}
	for k := range 1000 {
		src := netip.AddrFrom4([4]byte{203, 0, byte(k >> 8), byte(k)}).String()
		b.attempt(src, 50*time.Second+time.Duration(k)*time.Millisecond, 0)
	}
	c := b.at(2 * time.Minute)
	if len(c.Checkers) != 16 {
		t.Errorf("%d checkers after the flood, want the 16", len(c.Checkers))
	}
	if c.Clients.Attempts != 1000 || !c.Clients.ActiveSince.Equal(testNow.Add(50*time.Second)) {
		t.Errorf("clients %+v, want the flood's 1000 attempts from +50s", c.Clients)
	}
	if n := len(b.tl.dests[b.tl.idx[NodeDest(TCP, false, 30080)]].src.list); n != 16 {
		t.Errorf("%d sources kept, want 16 (Config.CheckerSources)", n)
	}
}

// UDP has no retransmission to tell apart: every datagram is a tick.
func TestSourcesUDP(t *testing.T) {
	tl := newTestTally(t, Config{}, testWatch)
	for i := range 8 {
		countBytes(t, tl, udp("198.18.0.9", "192.0.2.10", 30053), testNow.Add(time.Duration(i)*3*time.Second))
	}
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(30 * time.Second)}
	tl.fill(&s)
	if c, _ := s.Dest(NodeDest(UDP, false, 30053)); len(c.Checkers) != 1 || c.Checkers[0].Interval != 3*time.Second {
		t.Errorf("checkers %v, want 198.18.0.9 every 3s", checkerAddrs(c))
	}
}

// A dropped client's SYN comes again from the same source port (the kernel's retransmissions) and counts as
// an arrival, but is told apart as a retransmission: at a NodePort and at a load balancer IP alike, so that
// Attempts less Retransmits are the distinct attempts (what an exposure episode lost). A client's second
// connection, from a new port within a second, is a new attempt.
func TestRetransmitsToldApart(t *testing.T) {
	b := newSourceBed(t, Config{})
	b.attempt("198.18.0.1", 0, 3)
	b.attempt("198.18.0.2", 500*time.Millisecond, 2)
	b.attempt("198.18.0.2", 900*time.Millisecond, 0)
	c := b.at(20 * time.Second)
	if c.Attempts != 4+3+1 || c.Retransmits != 3+2 {
		t.Errorf("NodePort: attempts, retransmits = %d, %d; want 8, 5", c.Attempts, c.Retransmits)
	}
	// The latest arrival is the first attempt's third retransmission; the latest attempt is the one at 0.9 s.
	if want := testNow.Add(900 * time.Millisecond); !c.LastAttempt.Equal(want) || !c.LastSeen.Equal(testNow.Add(7*time.Second)) {
		t.Errorf("NodePort: last attempt %v, last seen %v; want %v and 7 s", c.LastAttempt, c.LastSeen, want)
	}
	p := syn("198.18.0.3", "203.0.113.7", 80)
	p.sport = 40000
	countRetransmitted(t, b.tl, p, 0, 4)
	p.sport = 40001
	countRetransmitted(t, b.tl, p, 0, 0)
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(20 * time.Second)}
	b.tl.fill(&s)
	if c, _ := s.Dest(lb(TCP, "203.0.113.7", 80)); c.Attempts != 6 || c.Retransmits != 4 {
		t.Errorf("load balancer IP: attempts, retransmits = %d, %d; want 6, 4", c.Attempts, c.Retransmits)
	}
}

// A load balancer's checker at a health check node port: kube-proxy answers every probe (200 or 503), so each
// is one SYN on a new port. After five on one clock the prober is a checker with its interval; a prober at no
// steady cadence (a person's curl now and then) is none, and with CheckerSources negative nothing is followed.
func TestHealthCheckCheckers(t *testing.T) {
	hc := NodeDest(TCP, false, 31000)
	checkers := func(cfg Config, probes map[string][]time.Duration, at time.Duration) []string {
		t.Helper()
		tl := newTestTally(t, cfg, testWatch)
		port := uint16(1024)
		for src, times := range probes {
			for _, when := range times {
				p := syn(src, "192.0.2.10", 31000)
				port++
				p.sport = port
				countBytes(t, tl, p, testNow.Add(when))
			}
		}
		s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}, Taken: testNow.Add(at)}
		tl.fill(&s)
		h, ok := s.HealthCheck(hc)
		if !ok {
			t.Fatal("health check node port not in snapshot")
		}
		var out []string
		for _, ch := range h.Checkers {
			out = append(out, fmt.Sprintf("%s/%s", ch.Addr, ch.Interval.Round(10*time.Millisecond)))
		}
		return out
	}
	every := func(n int, interval time.Duration) []time.Duration {
		var out []time.Duration
		for i := range n {
			out = append(out, time.Duration(i)*interval+time.Duration(i%3)*time.Millisecond)
		}
		return out
	}
	if got := checkers(Config{}, map[string][]time.Duration{"198.18.0.5": every(4, time.Second)}, 5*time.Second); len(got) != 0 {
		t.Errorf("after four probes: %v, want none proven yet", got)
	}
	if got := checkers(Config{}, map[string][]time.Duration{"198.18.0.5": every(10, time.Second),
		"198.18.0.9": {0, 3 * time.Second, 3500 * time.Millisecond, 9 * time.Second}}, 10*time.Second); len(got) != 1 || got[0] != "198.18.0.5/1s" {
		t.Errorf("checkers %v, want 198.18.0.5 every 1s", got)
	}
	if got := checkers(Config{CheckerSources: -1}, map[string][]time.Duration{"198.18.0.5": every(10, time.Second)}, 10*time.Second); len(got) != 0 {
		t.Errorf("with CheckerSources negative: %v, want none", got)
	}
}
