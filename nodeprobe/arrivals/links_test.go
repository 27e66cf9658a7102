package arrivals

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestTallyInternalLinks: with kube-proxy's interface detectors (BridgeInterface, InterfaceNamePrefix), a
// packet received on a matching interface is pod traffic whatever its source address (a pod address outside
// every pod CIDR the exporter knows), and everything else is an arrival. The interface's name is looked up once
// per linkNameTTL, not per packet, and a link that cannot be named is not taken for a pod's.
func TestTallyInternalLinks(t *testing.T) {
	names := map[int32]string{2: "eth0", 7: "cali12ab34cd", 8: "cni0", 9: "calico-bridge-x"}
	for _, tc := range []struct {
		links    []LinkMatch
		internal map[int32]bool // by arrival interface; absent: counted
	}{
		{links: nil},
		{links: []LinkMatch{{Name: "cali", Prefix: true}}, internal: map[int32]bool{7: true, 9: true}},
		{links: []LinkMatch{{Name: "cni0"}}, internal: map[int32]bool{8: true}},
		{links: []LinkMatch{{Name: "cni"}}}, // a bridge name is exact: "cni" is not cni0
		{links: []LinkMatch{{Name: "cni0"}, {Name: "cali12ab34cd"}}, internal: map[int32]bool{7: true, 8: true}},
	} {
		lookups := 0
		resolve := func(i int32) (string, error) {
			lookups++
			if n, ok := names[i]; ok {
				return n, nil
			}
			return "", errors.New("no such device")
		}
		w := testWatch.clone()
		w.Internal = nil
		w.InternalLinks = tc.links
		nw, err := w.normalize()
		if err != nil {
			t.Fatal(err)
		}
		tl := newTally(Config{}.withDefaults(), resolve)
		tl.setWatch(nw, testNow)
		p, ok := decode(syn("10.99.0.5", "192.0.2.10", 30080).bytes())
		if !ok {
			t.Fatal("test packet does not decode")
		}
		want := uint64(0)
		for _, ifindex := range []int32{2, 7, 8, 9, 42} {
			for k := range 3 {
				tl.count(p, testNow.Add(time.Duration(k)*time.Second).UnixNano(), ifindex)
				if !tc.internal[ifindex] {
					want++
				}
			}
		}
		s := snap(tl)
		c, _ := s.Dest(NodeDest(TCP, false, 30080))
		if c.Attempts != want {
			t.Errorf("links %v: %d attempts, want %d", tc.links, c.Attempts, want)
		}
		if got := s.Families[0].Internal; got != 15-want {
			t.Errorf("links %v: %d internal, want %d", tc.links, got, 15-want)
		}
		if len(tc.links) == 0 && lookups != 0 {
			t.Errorf("no internal links, yet %d interface lookups", lookups)
		}
		if len(tc.links) > 0 && lookups != 5 {
			t.Errorf("links %v: %d interface lookups for 5 interfaces within the TTL, want 5", tc.links, lookups)
		}
		// Past the TTL the name is looked up again: a renamed link is seen as renamed.
		names[7] = "eth9"
		tl.count(p, testNow.Add(time.Duration(linkNameTTL)+time.Minute).UnixNano(), 7)
		if c2, _ := snap(tl).Dest(NodeDest(TCP, false, 30080)); c2.Attempts != want+1 {
			t.Errorf("links %v: a packet on a link renamed to eth9 was not counted (%d → %d)", tc.links, want, c2.Attempts)
		}
		names[7] = "cali12ab34cd"
	}
}

func TestWatchInternalLinksNormalized(t *testing.T) {
	w := Watch{InternalLinks: []LinkMatch{{Name: "cali", Prefix: true}, {Name: "cni0"}, {Name: "cali", Prefix: true}}}
	nw, err := w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if len(nw.InternalLinks) != 2 || nw.InternalLinks[0] != (LinkMatch{Name: "cali", Prefix: true}) {
		t.Errorf("normalized %v", nw.InternalLinks)
	}
	for _, bad := range []string{"", "a-name-longer-than-15", "br 0"} {
		if _, err := (Watch{InternalLinks: []LinkMatch{{Name: bad}}}).normalize(); !errors.Is(err, ErrInvalidWatch) {
			t.Errorf("internal link %q: %v, want ErrInvalidWatch", bad, err)
		}
	}
	a, b := Watch{InternalLinks: []LinkMatch{{Name: "cni0"}}}, Watch{InternalLinks: []LinkMatch{{Name: "cni0", Prefix: true}}}
	if a.equal(b) {
		t.Error("a bridge name and the same prefix compare equal")
	}
}

// The node's own addresses are internal one by one (kube-proxy's --src-type LOCAL); in IPVS mode every Service
// address bound to kube-ipvs0 is one of them, thousands on a large cluster. They are looked up in a set: a
// packet from any of them is internal, one from elsewhere is counted, and prefixes still match.
func TestTallyManyInternalAddresses(t *testing.T) {
	w := testWatch.clone()
	w.Internal = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	for i := range 5000 {
		w.Internal = append(w.Internal, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 32))
	}
	nw, err := w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl := newTally(Config{}.withDefaults(), nil)
	tl.setWatch(nw, testNow)
	if len(tl.internalNets) != 1 || len(tl.internalAddrs) != 5000 {
		t.Fatalf("%d prefixes scanned, %d addresses in the set; want 1 and 5000", len(tl.internalNets), len(tl.internalAddrs))
	}
	for _, c := range []struct {
		src      string
		internal bool
	}{{"10.96.19.135", true}, {"10.244.7.7", true}, {"10.96.200.1", false}, {"192.0.2.99", false}} {
		if got := tl.internal(netip.MustParseAddr(c.src), 2, 1); got != c.internal {
			t.Errorf("%s: internal %v, want %v", c.src, got, c.internal)
		}
	}
}
