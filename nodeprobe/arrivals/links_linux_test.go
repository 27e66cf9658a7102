package arrivals

import (
	"net/netip"
	"testing"
	"time"
)

// TestKernelInternalByArrivalLink: on a real kernel, the pod's SYNs reach the node on the bridge cni0 (its veth
// vpod is a port of it) and the client's on br-ext. With no internal CIDR, kube-proxy's BridgeInterface detector
// (cni0) and InterfaceNamePrefix detector ("cni") make the pod's attempts internal, whatever its address; the
// client's stay arrivals. A detector naming the veth itself ("vpod") matches nothing: IP, and kube-proxy's
// `-i`/`iifname`, see the bridge, not its port.
func TestKernelInternalByArrivalLink(t *testing.T) {
	tb := newTestbed(t)
	m := openIn(t, tb.node, Config{BlockTimeout: 20 * time.Millisecond}, nil)
	np := NodeDest(TCP, false, 30080)
	for _, tc := range []struct {
		links       []LinkMatch
		podInternal bool
	}{
		{links: []LinkMatch{{Name: "cni0"}}, podInternal: true},
		{links: []LinkMatch{{Name: "cni", Prefix: true}}, podInternal: true},
		{links: []LinkMatch{{Name: "vpod"}}},
		{links: nil},
	} {
		w := testbedWatch()
		w.Internal = nil
		w.InternalLinks = tc.links
		if err := m.Watch(w); err != nil {
			t.Fatal(err)
		}
		before := attempts(m, np)
		internalBefore := m.Snapshot().Families[0].Internal
		const rounds = 3
		for range rounds {
			// 30080 has no listener: refused, one SYN each.
			_ = dialTCP(t, tb.pod, netip.AddrPortFrom(nodeV4, 30080), 2*time.Second)
			_ = dialTCP(t, tb.client, netip.AddrPortFrom(nodeV4, 30080), 2*time.Second)
		}
		settle(t, m, tb.client, nodeV4, nodeV6)
		s := m.Snapshot()
		got := attempts(m, np) - before
		internal := s.Families[0].Internal - internalBefore
		want, wantInternal := uint64(2*rounds), uint64(0)
		if tc.podInternal {
			want, wantInternal = rounds, rounds
		}
		if got != want || internal != wantInternal {
			t.Errorf("internal links %v: %d attempts and %d internal, want %d and %d", tc.links, got, internal, want, wantInternal)
		}
	}
}
