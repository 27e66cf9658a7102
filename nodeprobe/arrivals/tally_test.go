package arrivals

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

var testNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func newTestTally(t *testing.T, cfg Config, w Watch) *tally {
	t.Helper()
	tl := newTally(cfg.withDefaults(), nil)
	nw, err := w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow)
	return tl
}

func countBytes(t *testing.T, tl *tally, p testPacket, at time.Time) {
	t.Helper()
	d, ok := decode(p.bytes())
	if !ok {
		t.Fatalf("%+v does not decode", p)
	}
	tl.count(d, at.UnixNano(), 0)
}

func snap(tl *tally) Snapshot {
	s := Snapshot{Families: []FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}}
	tl.fill(&s)
	return s
}

func TestTallyCountsAttemptsAndTimes(t *testing.T) {
	tl := newTestTally(t, Config{QuietPeriod: time.Minute}, testWatch)
	np := NodeDest(TCP, false, 30080)
	for i, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 5 * time.Minute, 5*time.Minute + time.Second} {
		dst := "192.0.2.10"
		if i%2 == 1 {
			dst = "198.51.100.10"
		}
		countBytes(t, tl, syn("10.9.9.9", dst, 30080), testNow.Add(at))
	}
	s := snap(tl)
	c, ok := s.Dest(np)
	if !ok {
		t.Fatal("NodePort not in snapshot")
	}
	if c.Attempts != 5 {
		t.Errorf("attempts %d, want 5 (both node addresses)", c.Attempts)
	}
	if !c.FirstSeen.Equal(testNow) || !c.LastSeen.Equal(testNow.Add(5*time.Minute+time.Second)) {
		t.Errorf("first %v last %v", c.FirstSeen, c.LastSeen)
	}
	// A gap of 4m40s > QuietPeriod ended the first run.
	if !c.ActiveSince.Equal(testNow.Add(5 * time.Minute)) {
		t.Errorf("active since %v, want the first attempt after the gap", c.ActiveSince)
	}
	if !c.WatchedSince.Equal(testNow) {
		t.Errorf("watched since %v", c.WatchedSince)
	}
	if c6, _ := s.Dest(NodeDest(TCP, true, 30080)); c6.Attempts != 0 {
		t.Errorf("IPv6 NodePort counted IPv4 attempts: %d", c6.Attempts)
	}
	if other, _ := s.Dest(lb(TCP, "203.0.113.7", 80)); other.Attempts != 0 || !other.FirstSeen.IsZero() {
		t.Errorf("LB dest counted: %+v", other)
	}
}

func TestTallyInternalAndUnmatched(t *testing.T) {
	w := testWatch
	w.Internal = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	tl := newTestTally(t, Config{}, w)
	countBytes(t, tl, syn("10.244.3.4", "192.0.2.10", 30080), testNow)       // a pod: internal
	countBytes(t, tl, syn("fd00:10:244::5", "2001:db8::10", 30080), testNow) // a pod: internal
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.99", 30080), testNow)         // not a node address
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.10", 30080), testNow)         // external
	countBytes(t, tl, syn("10.244.3.4", "192.0.2.10", 31000), testNow)       // a pod probing the health check
	countBytes(t, tl, syn("2001:db8:9::9", "2001:db8:1::7", 443), testNow)   // LB IP, port not watched
	s := snap(tl)
	if c, _ := s.Dest(NodeDest(TCP, false, 30080)); c.Attempts != 1 {
		t.Errorf("attempts %d, want 1", c.Attempts)
	}
	if h, _ := s.HealthCheck(NodeDest(TCP, false, 31000)); h.Probes != 0 || len(h.Sources) != 0 {
		t.Errorf("internal probe counted: %+v", h)
	}
	if s.Families[0].Internal != 2 || s.Families[1].Internal != 1 {
		t.Errorf("internal %d/%d, want 2/1", s.Families[0].Internal, s.Families[1].Internal)
	}
	if s.Families[0].Unmatched != 1 || s.Families[1].Unmatched != 1 {
		t.Errorf("unmatched %d/%d, want 1/1", s.Families[0].Unmatched, s.Families[1].Unmatched)
	}
}

func TestTallyExactBeatsNode(t *testing.T) {
	// An announcer holds the LB IP on the node: the LB destination counts it, not the node's.
	w := Watch{NodeAddrs: addrs("192.0.2.10", "203.0.113.7"),
		Dests: []Dest{NodeDest(TCP, false, 80), lb(TCP, "203.0.113.7", 80)}}
	tl := newTestTally(t, Config{}, w)
	countBytes(t, tl, syn("10.9.9.9", "203.0.113.7", 80), testNow)
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.10", 80), testNow)
	s := snap(tl)
	if c, _ := s.Dest(lb(TCP, "203.0.113.7", 80)); c.Attempts != 1 {
		t.Errorf("LB attempts %d, want 1", c.Attempts)
	}
	if c, _ := s.Dest(NodeDest(TCP, false, 80)); c.Attempts != 1 {
		t.Errorf("node attempts %d, want 1", c.Attempts)
	}
}

func TestTallyHealthCheckSourcesBounded(t *testing.T) {
	tl := newTestTally(t, Config{MaxSources: 3}, testWatch)
	hc := NodeDest(TCP, false, 31000)
	probe := func(src string, at time.Duration) {
		countBytes(t, tl, syn(src, "192.0.2.10", 31000), testNow.Add(at))
	}
	probe("10.1.0.1", 0)
	probe("10.1.0.2", time.Second)
	probe("10.1.0.1", 2*time.Second)
	probe("10.1.0.3", 3*time.Second)
	probe("10.1.0.4", 4*time.Second) // full: forgets 10.1.0.2, the one seen longest ago
	probe("10.1.0.4", 5*time.Second)
	h, _ := snap(tl).HealthCheck(hc)
	if h.Probes != 6 {
		t.Errorf("probes %d, want 6", h.Probes)
	}
	want := []SourceCount{
		{netip.MustParseAddr("10.1.0.4"), 2, testNow.Add(5 * time.Second)},
		{netip.MustParseAddr("10.1.0.3"), 1, testNow.Add(3 * time.Second)},
		{netip.MustParseAddr("10.1.0.1"), 2, testNow.Add(2 * time.Second)},
	}
	if len(h.Sources) != len(want) {
		t.Fatalf("sources %+v", h.Sources)
	}
	for i := range want {
		if h.Sources[i].Addr != want[i].Addr || h.Sources[i].Probes != want[i].Probes || !h.Sources[i].LastSeen.Equal(want[i].LastSeen) {
			t.Errorf("source %d: %+v, want %+v", i, h.Sources[i], want[i])
		}
	}
	if h.SourcesEvicted != 1 {
		t.Errorf("evicted %d, want 1", h.SourcesEvicted)
	}
}

func TestTallyWatchChangeKeepsCounts(t *testing.T) {
	tl := newTestTally(t, Config{}, testWatch)
	countBytes(t, tl, syn("10.9.9.9", "203.0.113.7", 80), testNow)
	countBytes(t, tl, syn("10.9.9.9", "203.0.113.8", 443), testNow)
	later := testNow.Add(time.Hour)
	w := Watch{NodeAddrs: testWatch.NodeAddrs, Dests: []Dest{lb(TCP, "203.0.113.7", 80), lb(TCP, "203.0.113.9", 443)}}
	nw, _ := w.normalize()
	tl.setWatch(nw, later)
	countBytes(t, tl, syn("10.9.9.9", "203.0.113.8", 443), later) // no longer watched
	s := snap(tl)
	if len(s.Dests) != 1 || len(s.Idle) != 1 || len(s.HealthChecks) != 0 {
		t.Fatalf("snapshot follows the old watch: %+v, idle %+v", s.Dests, s.Idle)
	}
	if c, _ := s.Dest(lb(TCP, "203.0.113.7", 80)); c.Attempts != 1 || !c.WatchedSince.Equal(testNow) {
		t.Errorf("kept destination: %+v", c)
	}
	if c, _ := s.Dest(lb(TCP, "203.0.113.9", 443)); c.Attempts != 0 || !c.WatchedSince.Equal(later) {
		t.Errorf("new destination: %+v", c)
	}
	if s.Families[0].Unmatched != 1 {
		t.Errorf("unmatched %d, want 1", s.Families[0].Unmatched)
	}
}

func TestWatchNormalize(t *testing.T) {
	a := Watch{
		NodeAddrs: addrs("::ffff:192.0.2.10", "192.0.2.10"),
		Dests:     []Dest{lb(TCP, "::ffff:203.0.113.7", 80), lb(TCP, "203.0.113.7", 80), NodeDest(UDP, false, 1)},
		Internal:  []netip.Prefix{netip.MustParsePrefix("10.244.1.0/16"), netip.MustParsePrefix("::ffff:10.244.0.0/112")},
	}
	b := Watch{
		NodeAddrs: addrs("192.0.2.10"),
		Dests:     []Dest{NodeDest(UDP, false, 1), lb(TCP, "203.0.113.7", 80)},
		Internal:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}
	na, err := a.normalize()
	if err != nil {
		t.Fatal(err)
	}
	nb, err := b.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if !na.equal(nb) {
		t.Errorf("normalised watches differ:\n%+v\n%+v", na, nb)
	}
	for name, w := range map[string]Watch{
		"unknown protocol":      {Dests: []Dest{{Protocol: 1, Addr: netip.MustParseAddr("192.0.2.1"), Port: 1}}},
		"no address":            {Dests: []Dest{{Protocol: TCP, Port: 1}}},
		"port 0":                {Dests: []Dest{NodeDest(TCP, false, 0)}},
		"UDP health check":      {HealthChecks: []Dest{NodeDest(UDP, false, 31000)}},
		"health check and dest": {Dests: []Dest{NodeDest(TCP, false, 31000)}, HealthChecks: []Dest{NodeDest(TCP, false, 31000)}},
		"unspecified node addr": {NodeAddrs: addrs("0.0.0.0")},
		"invalid prefix":        {Internal: []netip.Prefix{{}}},
	} {
		if _, err := w.normalize(); !errors.Is(err, ErrInvalidWatch) {
			t.Errorf("%s: err %v, want ErrInvalidWatch", name, err)
		}
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	pkts := [][]byte{syn("10.9.9.9", "192.0.2.10", 30080).bytes(), syn("2001:db8:9::9", "2001:db8::10", 30080).bytes()}
	tl := newTestTally(t, Config{}, testWatch)
	allocs := testing.AllocsPerRun(1000, func() {
		for _, b := range pkts {
			if p, ok := decode(b); ok {
				tl.count(p, 1, 0)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("decoding and counting allocate %.1f times per run", allocs)
	}
}

func TestDecodeFields(t *testing.T) {
	p, ok := decode(syn("2001:db8:9::9", "2001:db8::10", 30080).bytes())
	if !ok || p.proto != TCP || p.src != netip.MustParseAddr("2001:db8:9::9") || p.dst != netip.MustParseAddr("2001:db8::10") || p.dport != 30080 {
		t.Errorf("IPv6 SYN: %+v %v", p, ok)
	}
	v4 := syn("10.9.9.9", "192.0.2.10", 30080)
	v4.ipv4Options = 8
	p, ok = decode(v4.bytes())
	if !ok || p.src != netip.MustParseAddr("10.9.9.9") || p.dst != netip.MustParseAddr("192.0.2.10") || p.dport != 30080 {
		t.Errorf("IPv4 SYN with options: %+v %v", p, ok)
	}
	// IPv4-mapped destinations in an IPv6 packet stay IPv6: such a packet is not IPv4 traffic.
	p, ok = decode(syn("2001:db8:9::9", "::ffff:192.0.2.10", 30080).bytes())
	if !ok || !p.dst.Is6() || p.dst.Is4In6() == false {
		t.Errorf("mapped: %+v %v", p, ok)
	}
	for _, b := range [][]byte{nil, {0x45}, {0x50, 0, 0, 0}, make([]byte, 19)} {
		if _, ok := decode(b); ok {
			t.Errorf("%x decodes", b)
		}
	}
}

func TestBudget(t *testing.T) {
	b := newBudget(1000, testNow) // 100 saved up at most
	steps := []struct {
		after time.Duration
		n     int
		want  bool
	}{
		{0, 60, true},                     // 40 left
		{0, 60, true},                     // into debt: -20
		{0, 1, false},                     // in debt
		{10 * time.Millisecond, 1, false}, // -10
		{30 * time.Millisecond, 5, true},  // +20 → 10 → 5
		{10 * time.Second, 500, true},     // refilled to 100 only, not 10,000: one block may still pass
		{0, 1, false},
	}
	now := testNow
	for i, s := range steps {
		now = now.Add(s.after)
		if got := b.take(s.n, now); got != s.want {
			t.Fatalf("step %d: take(%d) = %v, want %v (tokens %.1f)", i, s.n, got, s.want, b.tokens)
		}
	}
}

// TestWatchSameInputDifferentOrder: the fast path compares the input as given; the same set in another
// order is normalised and found equal, so the counts stay and no filter is rebuilt.
func TestWatchSameInputDifferentOrder(t *testing.T) {
	m := &Meter{cfg: Config{}.withDefaults(), done: make(chan struct{})}
	m.tally = newTally(m.cfg, nil)
	w := testWatch
	if err := m.Watch(w); err != nil {
		t.Fatal(err)
	}
	m.tally.count(packet{proto: TCP, src: netip.MustParseAddr("10.9.9.9"), dst: netip.MustParseAddr("203.0.113.7"), dport: 80}, 1, 0)
	r := w.clone()
	slices.Reverse(r.Dests)
	if err := m.Watch(r); err != nil {
		t.Fatal(err)
	}
	if c, _ := m.Snapshot().Dest(lb(TCP, "203.0.113.7", 80)); c.Attempts != 1 {
		t.Errorf("count lost across a reordered Watch: %+v", c)
	}
	// The caller's slices may change after Watch returns: the meter kept a copy.
	r.Dests[0] = lb(TCP, "198.18.0.1", 1)
	if err := m.Watch(r); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Snapshot().Dest(lb(TCP, "198.18.0.1", 1)); !ok {
		t.Error("a changed Watch in the same slice was taken for the previous one")
	}
}

// An idle destination is kept in a snapshot as its WatchedSince alone: what Dest answers for it is exactly the
// whole count the meter would have made of it, before and after a watch change, with and without source
// tracking, and a destination leaves Idle with its first arrival.
func TestTallyIdleDestinationsAreWholeCounts(t *testing.T) {
	for _, cfg := range []Config{{}, {CheckerSources: -1}} {
		tl := newTestTally(t, cfg, testWatch)
		countBytes(t, tl, syn("10.9.9.9", "203.0.113.7", 80), testNow)
		countBytes(t, tl, udp("10.9.9.9", "192.0.2.10", 30053), testNow)
		later := testNow.Add(time.Hour)
		w := testWatch
		w.Dests = append(slices.Clone(w.Dests), lb(TCP, "203.0.113.9", 443))
		nw, _ := w.normalize()
		tl.setWatch(nw, later)
		s := Snapshot{Taken: later.Add(time.Minute)}
		tl.fill(&s)
		if len(s.Dests) != 2 || len(s.Dests)+len(s.Idle) != len(nw.Dests) {
			t.Fatalf("%d counted, %d idle of %d watched; want the 2 with arrivals counted", len(s.Dests), len(s.Idle), len(nw.Dests))
		}
		for i := range tl.dests {
			d := &tl.dests[i]
			whole, _ := tl.destCount(d, s.Taken, nil)
			got, ok := s.Dest(d.dest)
			if !ok || !reflect.DeepEqual(got, whole) {
				t.Errorf("%v (idle %v): Dest gives %+v, the whole count is %+v", d.dest, d.idle(), got, whole)
			}
		}
		if !slices.IsSortedFunc(s.Idle, func(a, b IdleDest) int { return compareDest(a.Dest, b.Dest) }) {
			t.Errorf("Idle is not sorted: %v", s.Idle)
		}
		countBytes(t, tl, syn("10.9.9.9", "203.0.113.9", 443), later)
		s = Snapshot{Taken: later}
		tl.fill(&s)
		if c, _ := s.Dest(lb(TCP, "203.0.113.9", 443)); c.Attempts != 1 || len(s.Dests) != 3 {
			t.Errorf("after its first arrival: %+v, %d counted", c, len(s.Dests))
		}
	}
}
