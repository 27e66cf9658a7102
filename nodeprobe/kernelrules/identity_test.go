package kernelrules

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// ap is a test shorthand for an address and port.
func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// pick returns v6 for IPv6, else v4.
func pick(ipv6 bool) func(v4, v6 string) string {
	return func(v4, v6 string) string {
		if ipv6 {
			return v6
		}
		return v4
	}
}

// identityService: a NodePort Service with two local endpoints and one on another node.
func identityService(ipv6 bool) genService {
	a := pick(ipv6)
	return genService{
		ns: "shop", name: "web", port: "http", proto: "tcp",
		clusterIP: a("10.96.0.30", "fd00:10:96::30"), svcPort: 80, nodePort: 30130, etpLocal: true,
		eps: []genEndpoint{
			{ip: a("10.244.1.30", "fd00:10:244:1::30"), port: 8080, local: true},
			{ip: a("10.244.1.31", "fd00:10:244:1::31"), port: 8080, local: true},
			{ip: a("10.244.2.30", "fd00:10:244:2::30"), port: 8080},
		},
	}
}

// checkIdentity: the rules name exactly the local endpoints of s, each is the API endpoint of the same
// address and port and no other (another address, another port, another Service port).
func checkIdentity(t *testing.T, st PortState, s genService, wantAddrs bool) {
	t.Helper()
	sp := s.servicePort()
	want := localEndpointsOf(s)
	if st.LocalEndpoints != len(want) || len(st.Endpoints) != len(want) {
		t.Fatalf("%d local endpoints, %d named, want %d: %+v", st.LocalEndpoints, len(st.Endpoints), len(want), st)
	}
	other := sp
	other.Name = "other"
	for _, e := range st.Endpoints {
		if e.Addr.IsValid() != wantAddrs {
			t.Errorf("%s: address spelled %v, want %v", e, e.Addr.IsValid(), wantAddrs)
		}
		matches := 0
		for _, w := range want {
			if e.Is(sp, w.Addr) {
				matches++
			}
			if e.Is(other, w.Addr) && !e.Addr.IsValid() {
				t.Errorf("%s is %s of another Service port", e, w.Addr)
			}
			if e.Is(sp, netip.AddrPortFrom(w.Addr.Addr(), w.Addr.Port()+1)) {
				t.Errorf("%s is %s on another port", e, w.Addr)
			}
		}
		if matches != 1 {
			t.Errorf("%s matches %d of the API's local endpoints %v, want 1", e, matches, want)
		}
		for _, ep := range s.eps {
			if !ep.local && e.Is(sp, ap(epAddr(ep))) {
				t.Errorf("%s is the remote endpoint %s", e, epAddr(ep))
			}
		}
	}
}

// TestLocalEndpointIdentityIPTables: the KUBE-SVL jumps name their endpoints by the "-> ip:port" comment,
// and without it (large-cluster mode, older comments) by the KUBE-SEP chain's hash, in both families.
func TestLocalEndpointIdentityIPTables(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, noComments := range []bool{false, true} {
			t.Run(fmt.Sprintf("ipv6=%v/noComments=%v", v6, noComments), func(t *testing.T) {
				s := identityService(v6)
				s.noComments = noComments
				res := newIPTablesResult()
				if err := parseIPTablesSave([]byte(genRules(layout125, v6, []genService{s})), res); err != nil {
					t.Fatal(err)
				}
				snap := &Snapshot{}
				snap.addFamily(FamilyIPv4, res.ports)
				checkIdentity(t, snap.Family(s.servicePort(), FamilyIPv4), s, !noComments)
			})
		}
	}
	// kube-proxy ≤1.23 commented its KUBE-XLB jumps "Balancing rule N for ns/name:port": no address, the
	// chain's hash still names the endpoint.
	t.Run("v1.23 comments", func(t *testing.T) {
		s := identityService(false)
		text := genRules(layout123, false, []genService{s})
		for _, ep := range s.eps {
			text = strings.ReplaceAll(text, `"`+s.portName()+" -> "+epAddr(ep)+`"`, `"Balancing rule 0 for `+s.portName()+`"`)
		}
		res := newIPTablesResult()
		if err := parseIPTablesSave([]byte(text), res); err != nil {
			t.Fatal(err)
		}
		snap := &Snapshot{}
		snap.addFamily(FamilyIPv4, res.ports)
		checkIdentity(t, snap.Family(s.servicePort(), FamilyIPv4), s, false)
	})
	// Unnamed ports were spelled "ns/name:" by very old releases, in the endpoint hash too.
	t.Run("unnamed port, old spelling", func(t *testing.T) {
		sp := ServicePort{Namespace: "shop", Name: "web", Protocol: "TCP"}
		e := chainEndpoint(sepKey(sp, ":", ap("10.244.1.30:8080")), sepChain)
		if !e.Is(sp, ap("10.244.1.30:8080")) || e.Is(sp, ap("10.244.1.31:8080")) {
			t.Error("old spelling of an unnamed port not matched")
		}
	})
}

// TestNFTEndpointChainNames: kube-proxy's endpoint chain names spell the endpoint (IPv6 colons as dots);
// a name cut at 240 bytes ("...") is matched by its hash.
func TestNFTEndpointChainNames(t *testing.T) {
	// kubeProxyName is servicePortEndpointChainNameBase + hashAndTruncate (pkg/proxy/nftables/proxier.go).
	kubeProxyName := func(sp ServicePort, ep netip.AddrPort) string {
		name := fmt.Sprintf("%s/%s/%s/%s__%s/%d", sp.Namespace, sp.Name, strings.ToLower(sp.Protocol), sp.Port,
			strings.ReplaceAll(ep.Addr().String(), ":", "."), ep.Port())
		name = genHash(name)[:8] + "-" + name
		if len(name) > 240 {
			name = name[:237] + "..."
		}
		return "endpoint-" + name
	}
	long := strings.Repeat("p", 63) // a Service port name is a DNS label: up to 63 characters
	for _, c := range []struct {
		sp        ServicePort
		ep        string
		truncated bool
	}{
		{ServicePort{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: "TCP"}, "10.180.0.1:80", false},
		{ServicePort{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: "TCP"}, "[fd00:10:244:1::5]:8080", false},
		{ServicePort{Namespace: "ns1", Name: "svc1", Port: "", Protocol: "UDP"}, "[fd00::1]:53", false},
		{ServicePort{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63), Port: long, Protocol: "SCTP"}, "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:38680", true},
	} {
		want := ap(c.ep)
		name := kubeProxyName(c.sp, want)
		e, ok := nftEndpointChain(name)
		if !ok {
			t.Fatalf("%s: not an endpoint chain", name)
		}
		if got := strings.HasSuffix(name, "..."); got != c.truncated {
			t.Fatalf("%s: truncated %v, want %v", name, got, c.truncated)
		}
		if !c.truncated && e.Addr != want {
			t.Errorf("%s: address %s, want %s", name, e.Addr, want)
		}
		if c.truncated && e.Addr.IsValid() {
			t.Errorf("%s: a truncated name gave address %s", name, e.Addr)
		}
		if !e.Is(c.sp, want) || e.Is(c.sp, netip.AddrPortFrom(want.Addr(), want.Port()+1)) {
			t.Errorf("%s: Is(%s) %v, Is(next port) %v", name, want, e.Is(c.sp, want), e.Is(c.sp, netip.AddrPortFrom(want.Addr(), want.Port()+1)))
		}
	}
	for _, bad := range []string{"endpoint-X", "endpoint-ABCDEFGHxns/s/tcp/p__1.2.3.4/80", "service-ABCDEFGH-ns/s/tcp/p"} {
		if _, ok := nftEndpointChain(bad); ok {
			t.Errorf("%q taken for an endpoint chain", bad)
		}
	}
}

// longNames is a Local LoadBalancer Service whose "namespace/name:port" is 143 bytes, longer than the
// 128 bytes nftables keeps of a comment, with its endpoint elsewhere (the node drops it), and a Service of
// the same first 128 bytes (another port name) with no endpoint anywhere (rejected).
func longNames(ipv6 bool) []genService {
	a := pick(ipv6)
	ns, name := strings.Repeat("n", 63), strings.Repeat("s", 63)
	return []genService{
		{
			ns: ns, name: name, port: "http-metrics-01", proto: "tcp",
			clusterIP: a("10.96.0.60", "fd00:10:96::60"), svcPort: 80, nodePort: 30160, etpLocal: true,
			lbIPs: []string{a("192.0.2.60", "2001:db8::60")},
			eps:   []genEndpoint{{ip: a("10.244.2.60", "fd00:10:244:2::60"), port: 8080}},
		},
		{
			ns: ns, name: name, port: "http-metrics-02", proto: "tcp",
			clusterIP: a("10.96.0.61", "fd00:10:96::61"), svcPort: 81, nodePort: 30161, etpLocal: true,
		},
	}
}

// TestNFTElementsByKey: a drop element is the Service port's by its key, through the dispatch entry of
// the same key, not by its comment, which kube-proxy truncated; a reject's comment of 128 bytes may be
// cut, so it names nothing.
func TestNFTElementsByKey(t *testing.T) {
	requireRoot(t)
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			svcs := longNames(v6)
			if len(svcs[0].portName()) != 143 {
				t.Fatalf("%d bytes", len(svcs[0].portName()))
			}
			fam, name := "ip", FamilyIPv4
			if v6 {
				fam, name = "ip6", FamilyIPv6
			}
			ns := newNetns(t)
			nsRun(t, ns, []byte(genNFTLayout(v6, svcs, true)), "nft", "-f", "-")
			out := nsRun(t, ns, nil, "nft", "-j", "list", "table", fam, "kube-proxy")
			res, err := parseNFTJSON(out)
			if err != nil {
				t.Fatal(err)
			}
			snap := &Snapshot{}
			snap.addFamily(name, res.ports)
			lb := "192.0.2.60"
			if v6 {
				lb = "2001:db8::60"
			}
			want := PortState{Programmed: true, Drop: true, Drops: []DropRule{{Port: 30160}, {Address: lb, Port: 80}}}
			if got := snap.Family(svcs[0].servicePort(), name); !equalState(got, want) {
				t.Errorf("dropping long-named port: %+v, want %+v", got, want)
			}
			if got := snap.Family(svcs[1].servicePort(), name); !equalState(got, PortState{}) {
				t.Errorf("rejected long-named port: %+v, want nothing (its comment is cut)", got)
			}
			// Nothing is filed under the truncated comment's hash.
			if n := snap.Len(); n != 1 {
				t.Errorf("%d Service ports in the snapshot, want 1", n)
			}
		})
	}
}

// TestNFTLongEndpointChains: a Service port whose endpoint chain names kube-proxy truncates (a 63-character
// port name, IPv6), with session affinity (endpoint chains): read from a real nft, each local endpoint is
// the API's by its hash.
func TestNFTLongEndpointChains(t *testing.T) {
	requireRoot(t)
	s := genService{
		ns: strings.Repeat("n", 63), name: strings.Repeat("s", 63), port: strings.Repeat("p", 63), proto: "tcp",
		clusterIP: "fd00:10:96::70", svcPort: 80, nodePort: 30170, etpLocal: true, affinity: true,
		eps: []genEndpoint{
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9a70", port: 38080, local: true},
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9a71", port: 38080, local: true},
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9b70", port: 38080},
		},
	}
	ns := newNetns(t)
	text := genNFTLayout(true, []genService{s}, true)
	if !strings.Contains(text, "...") {
		t.Fatal("no truncated chain name: the test proves nothing")
	}
	nsRun(t, ns, []byte(text), "nft", "-f", "-")
	res, err := parseNFTJSON(nsRun(t, ns, nil, "nft", "-j", "list", "table", "ip6", "kube-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv6, res.ports)
	checkIdentity(t, snap.Family(s.servicePort(), FamilyIPv6), s, false)
}

// TestFirewallDropsCounted: with loadBalancerSourceRanges kube-proxy's KUBE-PROXY-FIREWALL drops a load
// balancer IP's new connections before KUBE-EXTERNAL-SERVICES sees them; on a node without a local endpoint
// its counter is the LB IP's drop count. With a local endpoint the firewall's drops are its own.
func TestFirewallDropsCounted(t *testing.T) {
	lbDrop := genService{
		ns: "shop", name: "fenced", port: "https", proto: "tcp",
		clusterIP: "10.96.0.80", svcPort: 443, nodePort: 30180, hcNodePort: 31180, etpLocal: true,
		lbIPs: []string{"192.0.2.80"}, sourceRanges: []string{"198.51.100.0/24"}, dropPkts: 2, fwPkts: 40,
		eps: []genEndpoint{{ip: "10.244.2.80", port: 8443}},
	}
	lbServes := lbDrop
	lbServes.name, lbServes.clusterIP, lbServes.nodePort, lbServes.hcNodePort, lbServes.lbIPs = "open", "10.96.0.81", 30181, 31181, []string{"192.0.2.81"}
	lbServes.eps = []genEndpoint{{ip: "10.244.1.81", port: 8443, local: true}}
	parse := func() *iptablesResult {
		res := newIPTablesResult()
		if err := parseIPTablesSave([]byte(genRules(layout125, false, []genService{lbDrop, lbServes})), res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv4, parse().ports)
	want := PortState{Programmed: true, Drop: true, DropPackets: 2 + 42, Drops: []DropRule{
		{Port: 30180, Packets: 2, Counted: true},
		{Address: "192.0.2.80", Port: 443, Packets: 42, Counted: true},
	}}
	if got := snap.Family(lbDrop.servicePort(), FamilyIPv4); !equalState(got, want) {
		t.Errorf("fenced LB without a local endpoint: %+v, want %+v", got, want)
	}
	if got := snap.Family(lbServes.servicePort(), FamilyIPv4); got.Drop || got.DropPackets != 0 {
		t.Errorf("fenced LB with a local endpoint: %+v, want no drop", got)
	}

	// The nft backend's steady reads take both chains' counters over netlink while the generation holds.
	t.Run("fresh counters", func(t *testing.T) {
		res := parse() // as kept: never sorted, a snapshot gets copies
		fresh := withCounters(res, countersOf(res.extRules, 5), countersOf(res.fwRules, 100))
		st := fresh.ports[hashKey(lbDrop.portName(), "tcp")]
		got := slices.Clone(st.Drops)
		sortDrops(got)
		if len(got) != 2 || got[0].Packets != 5 || got[1].Packets != 105 || st.DropPackets != 110 {
			t.Errorf("fresh counters: %+v", *st)
		}
		if orig := res.ports[hashKey(lbDrop.portName(), "tcp")]; orig.DropPackets != 44 {
			t.Errorf("the kept parse changed: %+v", *orig)
		}
	})
}

func countersOf(n int, v uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestFirewallDropsIntegration: real packets on the real kernel. A client inside and one outside
// loadBalancerSourceRanges each send a SYN to the load balancer IP of a Service with no local endpoint; the
// firewall drops both, and the read (both backends; with the nft backend from the kept parse with counters
// over netlink) counts them as the address's drops.
func TestFirewallDropsIntegration(t *testing.T) {
	requireRoot(t)
	svc := genService{
		ns: "shop", name: "fenced", port: "https", proto: "tcp",
		clusterIP: "10.96.0.80", svcPort: 443, nodePort: 30180, hcNodePort: 31180, etpLocal: true,
		lbIPs: []string{"10.99.0.80"}, sourceRanges: []string{"10.99.0.1/32"},
		eps: []genEndpoint{{ip: "10.244.2.80", port: 8443}},
	}
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		t.Run(string(backend), func(t *testing.T) {
			ns := newNetns(t)
			nsRun(t, ns, []byte(genRules(layout125, false, []genService{svc})), xtablesCmd(false, backend, "restore"), "-c")
			nsRun(t, ns, []byte(kubeletMangle), xtablesCmd(false, backend, "restore"), "--noflush")
			run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
			r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1})
			lbPackets := func() uint64 {
				t.Helper()
				snap, err := r.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range snap.Family(svc.servicePort(), FamilyIPv4).Drops {
					if d.Address == "10.99.0.80" {
						return d.Packets
					}
				}
				t.Fatalf("no drop for the LB IP: %+v", snap.Family(svc.servicePort(), FamilyIPv4))
				return 0
			}
			if n := lbPackets(); n != 0 {
				t.Fatalf("%d packets before any traffic", n)
			}
			nsRun(t, ns, nil, "ip", "addr", "add", "10.99.0.80/32", "dev", "lo")
			var last uint64
			for _, src := range []string{"10.99.0.1", "10.99.0.2"} { // allowed, refused
				peer := newNetns(t)
				nsRun(t, ns, nil, "ip", "link", "add", "fw-"+src[len(src)-1:], "type", "veth", "peer", "name", "out", "netns", peer)
				nsRun(t, ns, nil, "ip", "addr", "add", "10.99.0.254/24", "dev", "fw-"+src[len(src)-1:])
				nsRun(t, ns, nil, "ip", "link", "set", "fw-"+src[len(src)-1:], "up")
				nsRun(t, peer, nil, "ip", "addr", "add", src+"/24", "dev", "out")
				nsRun(t, peer, nil, "ip", "link", "set", "out", "up")
				// A SYN can be lost before it reaches the rules (ARP on a loaded machine): dial until the
				// count moves, a few times at most.
				n := last
				for try := 0; try < 5 && n <= last; try++ {
					dialDropped(t, peer, "10.99.0.80:443")
					n = lbPackets()
				}
				if n <= last {
					t.Errorf("SYNs from %s: LB IP drop count %d, was %d", src, n, last)
				}
				last = n
				nsRun(t, ns, nil, "ip", "link", "del", "fw-"+src[len(src)-1:])
			}
			if backend == BackendNFT {
				if n := run.count(saveCommand(ipFamilies[0], backend) + " -c -t filter"); n != 1 {
					t.Errorf("nft backend: filter saved %d times, want 1 (counters over netlink)", n)
				}
			}
		})
	}
}
