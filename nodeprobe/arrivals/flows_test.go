package arrivals

import (
	"net/netip"
	"testing"
	"time"
)

// TestFlowsTellPinnedFromNew: at a UDP destination, LastNewFlow moves only when a datagram starts a flow (a
// source address and port not seen within the quiet period); flows that may have begun before the meter
// looked are not new; an idle flow that comes back is; TCP has no flows.
func TestFlowsTellPinnedFromNew(t *testing.T) {
	node := netip.MustParseAddr("192.0.2.1")
	udp := NodeDest(UDP, false, 30053)
	tcp := NodeDest(TCP, false, 30080)
	tl := newTestTally(t, Config{QuietPeriod: time.Minute}, Watch{NodeAddrs: []netip.Addr{node}, Dests: []Dest{udp, tcp}})
	send := func(proto Protocol, src string, sport, dport uint16, at time.Duration) {
		tl.count(packet{proto: proto, src: netip.MustParseAddr(src), dst: node, sport: sport, dport: dport}, testNow.Add(at).UnixNano(), 0)
	}
	lastNew := func(d Dest) time.Time {
		c, _ := snap(tl).Dest(d)
		return c.LastNewFlow
	}
	// Within the first quiet period after the watch began a flow may be an old one: none is new.
	send(UDP, "198.51.100.1", 5000, 30053, 10*time.Second)
	if got := lastNew(udp); !got.IsZero() {
		t.Fatalf("a flow seen in the first quiet period is new at %v", got)
	}
	// The same flow for minutes: still not new.
	for at := 20 * time.Second; at < 5*time.Minute; at += 10 * time.Second {
		send(UDP, "198.51.100.1", 5000, 30053, at)
	}
	if got := lastNew(udp); !got.IsZero() {
		t.Fatalf("a flow that kept sending became new at %v", got)
	}
	// Another source port of the same client: a new flow.
	send(UDP, "198.51.100.1", 5001, 30053, 5*time.Minute)
	if got, want := lastNew(udp), testNow.Add(5*time.Minute); !got.Equal(want) {
		t.Fatalf("new flow at %v, want %v", got, want)
	}
	// The first flow idle for longer than the quiet period, then back: the load balancer chose again.
	send(UDP, "198.51.100.1", 5000, 30053, 7*time.Minute)
	if got, want := lastNew(udp), testNow.Add(7*time.Minute); !got.Equal(want) {
		t.Fatalf("a flow back after an idle quiet period: new at %v, want %v", got, want)
	}
	send(TCP, "198.51.100.1", 5000, 30080, 8*time.Minute)
	if got := lastNew(tcp); !got.IsZero() {
		t.Fatalf("TCP has a new flow at %v", got)
	}
}

// TestFlowsBounded: more flows than maxFlows evict the one seen longest ago, which, back, is new.
func TestFlowsBounded(t *testing.T) {
	node := netip.MustParseAddr("192.0.2.1")
	udp := NodeDest(UDP, false, 30053)
	tl := newTestTally(t, Config{QuietPeriod: time.Minute}, Watch{NodeAddrs: []netip.Addr{node}, Dests: []Dest{udp}})
	send := func(sport uint16, at time.Duration) {
		tl.count(packet{proto: UDP, src: netip.MustParseAddr("198.51.100.1"), dst: node, sport: sport, dport: 30053}, testNow.Add(at).UnixNano(), 0)
	}
	base := 2 * time.Minute // past the first quiet period
	for i := range maxFlows + 1 {
		send(uint16(6000+i), base+time.Duration(i)*time.Second)
	}
	if n := len(tl.dests[0].flows.list); n != maxFlows {
		t.Fatalf("%d flows kept, want %d", n, maxFlows)
	}
	at := base + time.Duration(maxFlows+1)*time.Second
	send(6000, at) // evicted by the 17th
	if got, want := tl.dests[0].flows.lastNew, testNow.Add(at).UnixNano(); got != want {
		t.Fatalf("evicted flow back: last new %d, want %d", got, want)
	}
}
