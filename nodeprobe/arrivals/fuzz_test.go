package arrivals

import (
	"testing"
)

// FuzzFilterAgreesWithDecode holds the kernel filter (run in x/net/bpf's VM) and the user-space decoder and
// lookup to the same answer on any bytes: a packet the exact filter passes is an arrival, and an arrival is
// never dropped in the kernel. Each family's filter sees only packets of its version in the kernel (the
// sockets are bound to ETH_P_IP and ETH_P_IPV6), but both run on every input here.
func FuzzFilterAgreesWithDecode(f *testing.F) {
	for _, c := range filterCases() {
		f.Add(c.pkt.bytes())
	}
	tl := newTally(Config{}.withDefaults(), nil)
	nw, err := testWatch.normalize()
	if err != nil {
		f.Fatal(err)
	}
	tl.setWatch(nw, testNow)
	v4 := newVMFilter(f, mustCompile(f, testWatch, false, FilterExact))
	v6 := newVMFilter(f, mustCompile(f, testWatch, true, FilterExact))
	f.Fuzz(func(t *testing.T, b []byte) {
		n4, n6 := v4.run(t, pktHost, 2, b), v6.run(t, pktHost, 2, b)
		a4, a6 := n4 > 0, n6 > 0
		if a4 && a6 {
			t.Fatalf("both families' filters accept %x", b)
		}
		// The kernel copies the bytes the filter accepts (the headers alone); the decoder sees those.
		snap := b[:min(len(b), max(n4, n6))]
		if m := matches(tl, snap); m != (a4 || a6) {
			t.Fatalf("filter accepts=%v (v4 %v, v6 %v), decode+match=%v for %x", a4 || a6, a4, a6, m, b)
		}
	})
}
