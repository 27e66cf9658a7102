package arrivals

import (
	"net/netip"
	"testing"
	"time"
)

// ownedWatch is testWatch with every destination and health check node port owned by owner (Watch.Owners).
func ownedWatch(owner string) Watch {
	w := testWatch.clone()
	w.Owners = map[Dest]string{}
	for _, d := range append(append([]Dest{}, w.Dests...), w.HealthChecks...) {
		w.Owners[d] = owner
	}
	return w
}

// setOwner gives the bed's tally testWatch owned by owner, at at.
func (b *sourceBed) setOwner(owner string, at time.Duration) {
	b.t.Helper()
	nw, err := ownedWatch(owner).normalize()
	if err != nil {
		b.t.Fatal(err)
	}
	b.tl.setWatch(nw, testNow.Add(at))
}

// irregularGaps are a client's pauses between attempts: no two clocks keep them.
var irregularGaps = []time.Duration{3100 * time.Millisecond, 1400 * time.Millisecond, 5200 * time.Millisecond,
	2300 * time.Millisecond, 4100 * time.Millisecond, 900 * time.Millisecond}

// A source proven a checker at a NodePort (a load balancer's, every 2 s) for one Service; the Service is
// deleted and a new one gets the NodePort, where the same address is a client (irregular attempts, each
// dropped and retransmitted). The new Service's counts start afresh: the client counts by its fifth attempt,
// as any new client does. Before the meter kept owners, it arrived as the proven checker, its attempts set
// aside, and a lost client paged nothing.
func TestOwnerChangeForgetsCheckers(t *testing.T) {
	b := newSourceBed(t, Config{})
	b.setOwner("uid-old", 0)
	for i := range 20 {
		b.attempt("198.18.0.5", time.Duration(i)*2*time.Second, 0)
	}
	if got := checkerAddrs(b.at(40 * time.Second)); len(got) != 1 || got[0] != "198.18.0.5/2s" {
		t.Fatalf("checkers %v under the old Service, want 198.18.0.5 every 2s", got)
	}
	b.setOwner("uid-new", 41*time.Second)
	c := b.at(41 * time.Second)
	if c.Attempts != 0 || len(c.Checkers) != 0 {
		t.Fatalf("new owner's NodePort: attempts %d, checkers %v; want nothing learnt", c.Attempts, checkerAddrs(c))
	}
	at := 42 * time.Second
	for i, gap := range irregularGaps {
		b.attempt("198.18.0.5", at, 1)
		c := b.at(at + 500*time.Millisecond)
		if len(c.Checkers) != 0 || c.Owner != "uid-new" {
			t.Fatalf("attempt %d of the new Service's client: checkers %v, owner %q; want none, uid-new", i+1, checkerAddrs(c), c.Owner)
		}
		if i >= 4 && c.Clients.Attempts == 0 {
			t.Fatalf("attempt %d of the new Service's client: no client attempt counted, want its attempts (clients %+v)", i+1, c.Clients)
		}
		at += gap
	}
}

// The other way round: a source that was a client of the old Service (counted as one) is a load balancer's
// checker of the new one (every 2 s). Its first probes at the new Service are set aside while it proves its
// cadence, as a new checker's are, and it is named a checker; none of them is a client's. Before the meter
// kept owners, the source arrived counted as a client already, and its first probes were lost client
// attempts.
func TestOwnerChangeForgetsClients(t *testing.T) {
	b := newSourceBed(t, Config{})
	b.setOwner("uid-old", 0)
	at := time.Duration(0)
	for _, gap := range append(irregularGaps, irregularGaps...) {
		b.attempt("198.18.0.5", at, 1)
		at += gap
	}
	if c := b.at(at); c.Clients.Attempts == 0 || len(c.Checkers) != 0 {
		t.Fatalf("old Service: clients %+v, checkers %v; want a client", c.Clients, checkerAddrs(c))
	}
	start := at + time.Second
	b.setOwner("uid-new", start)
	for i := range 15 {
		p := start + time.Duration(i)*2*time.Second
		b.attempt("198.18.0.5", p, 0)
		c := b.at(p + time.Second)
		if c.Clients.Attempts != 0 {
			t.Fatalf("probe %d of the new Service's checker: clients %+v, want none (a checker's probes are no client's)", i+1, c.Clients)
		}
		if i >= 5 && len(c.Checkers) == 0 {
			t.Fatalf("probe %d of the new Service's checker: not named a checker", i+1)
		}
	}
}

// A source proven a checker on a slow clock (every 30 s) at the old Service is a checker every 2 s at the new
// one: it is named a checker at its new interval, and no probe of it is a client's.
func TestOwnerChangeForgetsClocks(t *testing.T) {
	b := newSourceBed(t, Config{})
	b.setOwner("uid-old", 0)
	for i := range 8 {
		b.attempt("198.18.0.5", time.Duration(i)*30*time.Second, 1)
	}
	if got := checkerAddrs(b.at(211 * time.Second)); len(got) != 1 || got[0] != "198.18.0.5/30s" {
		t.Fatalf("checkers %v under the old Service, want 198.18.0.5 every 30s", got)
	}
	start := 212 * time.Second
	b.setOwner("uid-new", start)
	for i := range 15 {
		p := start + time.Duration(i)*2*time.Second
		b.attempt("198.18.0.5", p, 0)
		c := b.at(p + time.Second)
		if c.Clients.Attempts != 0 {
			t.Fatalf("probe %d of the new Service's checker: clients %+v, want none", i+1, c.Clients)
		}
		if got := checkerAddrs(c); i >= 5 && (len(got) != 1 || got[0] != "198.18.0.5/2s") {
			t.Fatalf("probe %d of the new Service's checker: checkers %v, want 198.18.0.5 every 2s alone", i+1, got)
		}
	}
}

// The same owner keeps what was learnt through any number of Watches, and so does a destination whose owner
// is not known (a caller that names none).
func TestSameOwnerKeepsCheckers(t *testing.T) {
	for _, owner := range []string{"uid-old", ""} {
		b := newSourceBed(t, Config{})
		b.setOwner("uid-old", 0)
		for i := range 10 {
			b.attempt("198.18.0.5", time.Duration(i)*2*time.Second, 0)
		}
		w := ownedWatch(owner)
		w.Dests = append(w.Dests, lb(TCP, "203.0.113.99", 80)) // another Service came
		nw, err := w.normalize()
		if err != nil {
			t.Fatal(err)
		}
		b.tl.setWatch(nw, testNow.Add(21*time.Second))
		if c := b.at(21 * time.Second); c.Attempts != 10 || len(c.Checkers) != 1 {
			t.Errorf("owner %q: attempts %d, checkers %v; want the 10 probes and the checker kept", owner, c.Attempts, checkerAddrs(c))
		}
	}
}

// A health check node port's probers are its owner's too: a new owner's starts without the old one's.
func TestOwnerChangeForgetsHealthCheckProbers(t *testing.T) {
	tl := newTestTally(t, Config{}, ownedWatch("uid-old"))
	for i := range 10 {
		countBytes(t, tl, syn("198.18.0.5", "192.0.2.10", 31000), testNow.Add(time.Duration(i)*2*time.Second))
	}
	hc := func() HealthCheckCount {
		s := snap(tl)
		for _, h := range s.HealthChecks {
			if h.Dest == NodeDest(TCP, false, 31000) {
				return h
			}
		}
		t.Fatal("health check node port not in snapshot")
		return HealthCheckCount{}
	}
	if h := hc(); h.Probes != 10 || len(h.Sources) != 1 {
		t.Fatalf("old owner: probes %d, sources %d; want 10 from one", h.Probes, len(h.Sources))
	}
	nw, err := ownedWatch("uid-new").normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow.Add(time.Minute))
	if h := hc(); h.Probes != 0 || len(h.Checkers) != 0 || len(h.Sources) != 0 {
		t.Errorf("new owner: probes %d, checkers %d, sources %d; want none", h.Probes, len(h.Checkers), len(h.Sources))
	}
}

// A run an earlier meter counted (the state file) is applied to its destination only when the first Watch
// gives it the run's owner, or when either is not known (a state file written before owners were kept): a
// Service that got the NodePort while no exporter ran starts without the old one's checkers and clients.
func TestRestoreOnlyOntoItsOwner(t *testing.T) {
	np := NodeDest(TCP, false, 30080)
	for _, tc := range []struct {
		runOwner, watchOwner string
		want                 bool
	}{
		{"uid-old", "uid-old", true},
		{"uid-old", "uid-new", false},
		{"", "uid-new", true},
		{"uid-old", "", true},
	} {
		tl := newTally(Config{}.withDefaults(), nil)
		tl.restore(map[Dest]Run{np: {Attempts: 12, FirstSeen: testNow.Add(-30 * time.Second), LastSeen: testNow.Add(-time.Second),
			ActiveSince: testNow.Add(-30 * time.Second), Told: true, Owner: tc.runOwner,
			Checkers: []CheckerSource{{Addr: netip.MustParseAddr("198.18.0.5"), Interval: 2 * time.Second, LastSeen: testNow.Add(-time.Second)}}}})
		nw, err := ownedWatch(tc.watchOwner).normalize()
		if err != nil {
			t.Fatal(err)
		}
		tl.setWatch(nw, testNow)
		c, _ := snap(tl).Dest(np)
		if got := c.Restored == 12 && len(c.Checkers) == 1; got != tc.want {
			t.Errorf("run of %q onto a NodePort of %q: restored %d, checkers %d; want restored: %v",
				tc.runOwner, tc.watchOwner, c.Restored, len(c.Checkers), tc.want)
		}
	}
}
