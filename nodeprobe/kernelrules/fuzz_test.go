package kernelrules

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func addSeeds(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func checkStates(t *testing.T, ports map[portKey]*PortState) {
	for k, st := range ports {
		if st.LocalEndpoints < 0 {
			t.Errorf("%s: negative local endpoints", k)
		}
		if st.DropPackets > 0 && !st.Drop {
			t.Errorf("%s: drop packets without drop", k)
		}
		var sum uint64
		for _, d := range st.Drops {
			sum += d.Packets
			if d.Packets > 0 && !d.Counted {
				t.Errorf("%s: packets on an uncounted rule %+v", k, d)
			}
			if d.AllDestinations && (d.Address != "" || d.Port != 0) {
				t.Errorf("%s: rule for all destinations names one: %+v", k, d)
			}
			if d.Port < 0 {
				t.Errorf("%s: negative port %+v", k, d)
			}
		}
		if sum != st.DropPackets || st.Drop != (len(st.Drops) > 0) {
			t.Errorf("%s: Drop/DropPackets out of step with Drops: %+v", k, *st)
		}
		if (st.Drop || st.Reject || st.LocalEndpoints > 0) && !st.Programmed {
			t.Errorf("%s: state without Programmed: %+v", k, *st)
		}
		// Every local endpoint counted is named, once, in order.
		if len(st.Endpoints) != st.LocalEndpoints {
			t.Errorf("%s: %d local endpoints, %d named: %+v", k, st.LocalEndpoints, len(st.Endpoints), *st)
		}
		for i, e := range st.Endpoints {
			if e.String() == "?" {
				t.Errorf("%s: endpoint with neither address nor chain", k)
			}
			if i > 0 && compareEndpoints(st.Endpoints[i-1], e) >= 0 {
				t.Errorf("%s: endpoints not sorted and distinct: %v", k, st.Endpoints)
			}
		}
	}
}

func FuzzParseIPTablesSave(f *testing.F) {
	addSeeds(f, iptablesShapeSeeds(f, "iptables-*.save"))
	addSeeds(f, iptablesShapeSeeds(f, "real-*-iptables-*.save"))
	f.Add([]byte("*filter\n[3:180] -A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"a/b:c has no local endpoints\" -j DROP\nCOMMIT\n"))
	f.Add([]byte("*nat\n-A KUBE-SVL-AAAAAAAAAAAAAAAA -m comment --comment \"x \\\" y\" -j KUBE-SEP-BBBBBBBBBBBBBBBB\nCOMMIT\n"))
	f.Add([]byte("*filter\n[9:540] -A KUBE-EXTERNAL-SERVICES -d 2001:DB8::10/128 -p tcp -m comment --comment \"a/b:c has no local endpoints\" -m tcp --dport 80 -j DROP\nCOMMIT\n"))
	f.Add([]byte("*filter\n-A KUBE-EXTERNAL-SERVICES -p udp -m comment --comment \"a/b has no local endpoints\" -m addrtype --dst-type LOCAL -m udp --dport 30053 -j DROP\nCOMMIT\n"))
	f.Add([]byte("*nat\n:KUBE-XLB-AAAAAAAAAAAAAAAA - [0:0]\n[2:120] -A KUBE-XLB-AAAAAAAAAAAAAAAA -m comment --comment \"a/b:c has no local endpoints\" -j KUBE-MARK-DROP\nCOMMIT\n"))
	// Local endpoints named by the jump's comment (IPv4, IPv6), by the chain alone (large-cluster mode),
	// and twice (session affinity).
	f.Add([]byte("*nat\n-A KUBE-SVL-AAAAAAAAAAAAAAAA -m comment --comment \"a/b:c -> 10.244.1.5:8080\" -j KUBE-SEP-BBBBBBBBBBBBBBBB\n-A KUBE-SVL-AAAAAAAAAAAAAAAA -m comment --comment \"a/b:c -> [fd00::5]:8080\" -j KUBE-SEP-CCCCCCCCCCCCCCCC\n-A KUBE-SVL-AAAAAAAAAAAAAAAA -j KUBE-SEP-DDDDDDDDDDDDDDDD\n-A KUBE-SVL-AAAAAAAAAAAAAAAA -m recent --rcheck -j KUBE-SEP-DDDDDDDDDDDDDDDD\nCOMMIT\n"))
	// loadBalancerSourceRanges: the firewall's DROP counts for the LB IP's no-local-endpoints drop.
	f.Add([]byte("*filter\n[3:180] -A KUBE-EXTERNAL-SERVICES -d 192.0.2.8/32 -p tcp -m comment --comment \"a/b:c has no local endpoints\" -m tcp --dport 443 -j DROP\n[5:300] -A KUBE-PROXY-FIREWALL -d 192.0.2.8/32 -p tcp -m comment --comment \"a/b:c traffic not accepted by KUBE-FW-AAAAAAAAAAAAAAAA\" -m tcp --dport 443 -j DROP\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := newIPTablesResult()
		errA := parseIPTablesSave(data, a)
		b := newIPTablesResult()
		errB := parseIPTablesSave(bytes.Clone(data), b)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("non-deterministic: %v vs %v", errA, errB)
		}
		if errA != nil {
			return
		}
		checkStates(t, a.ports)
		if len(a.ports) != len(b.ports) || a.rules != b.rules || a.kubeRules != b.kubeRules {
			t.Fatalf("non-deterministic result")
		}
		for k, st := range a.ports {
			if !equalState(*b.ports[k], *st) {
				t.Fatalf("%s: %+v vs %+v", k, *st, *b.ports[k])
			}
		}
		if a.kubeRules > a.rules {
			t.Fatalf("kube rules %d > rules %d", a.kubeRules, a.rules)
		}
		// A complete save cut in the middle of a table never reads as complete.
		if i := bytes.LastIndex(data, []byte("\nCOMMIT")); i > 0 && bytes.Count(data, []byte("\n*")) == 0 && data[0] == '*' {
			if err := parseIPTablesSave(data[:i+1], newIPTablesResult()); err == nil {
				t.Fatalf("truncated save (COMMIT removed) parsed without error")
			}
		}
	})
}

func FuzzParseNFTJSON(f *testing.F) {
	addSeeds(f, nftShapeSeeds(f, "nft-*.json"))
	addSeeds(f, nftShapeSeeds(f, "real-*-nft-*.json"))
	f.Add([]byte(`{"nftables":[{"table":{"family":"ip","name":"kube-proxy"}},{"map":{"name":"no-endpoint-nodeports","elem":[[{"elem":{"val":{"concat":["tcp",30090]},"comment":"a/b:c","counter":{"packets":3}}},{"drop":null}]]}}]}`))
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"rule":{"chain":"local-AAAAAAAA-a/b/tcp/c","expr":[{"vmap":{"data":{"set":[[0,{"goto":{"target":"endpoint-X"}}]]}}}]}}]}`))
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"rule":{"chain":"local-AAAAAAAA-a/b/tcp/c","expr":[{"dnat":{"addr":"10.180.2.1","port":80}}]}}]}`))
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"rule":{"chain":"local-AAAAAAAA-a/b/tcp/c","expr":[{"dnat":{"family":"ip6","addr":{"map":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"concat":["fd00::1",80]}],[1,{"concat":["fd00::2",80]}]]}}}}}]}}]}`))
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"map":{"name":"service-ips","elem":[[{"concat":["2001:db8::10","tcp",80]},{"goto":{"target":"external-AAAAAAAA-a/b/tcp/c"}}]]}},{"map":{"name":"no-endpoint-services","elem":[[{"elem":{"val":{"concat":["2001:db8::10","tcp",80]},"comment":"a/b:c"}},{"drop":null}]]}}]}`))
	// A drop named by its key's dispatch entry, its comment cut at 128 bytes; endpoint chains that spell
	// an IPv6 endpoint, and one whose name was cut.
	long := strings.Repeat("n", 63) + "/" + strings.Repeat("s", 63)
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"map":{"name":"service-nodeports","elem":[[{"concat":["tcp",30090]},{"goto":{"target":"external-AAAAAAAA-` + long + `/tcp/http-metrics-01"}}]]}},{"map":{"name":"no-endpoint-nodeports","elem":[[{"elem":{"val":{"concat":["tcp",30090]},"comment":"` + (long + ":http-metrics-01")[:128] + `"}},{"drop":null}]]}}]}`))
	f.Add([]byte(`{"nftables":[{"table":{"name":"kube-proxy"}},{"rule":{"chain":"local-AAAAAAAA-a/b/tcp/c","expr":[{"vmap":{"data":{"set":[[0,{"goto":{"target":"endpoint-AAAA1111-a/b/tcp/c__fd00.10.244.1..5/8080"}}],[1,{"goto":{"target":"endpoint-BBBB2222-a/b/tcp/c__10.244.1.6/8080"}}],[2,{"goto":{"target":"endpoint-CCCC3333-a/b/tcp/c__fd00.1234.5678.9ab..."}}]]}}}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := parseNFTJSON(data)
		if err != nil {
			return
		}
		if !res.table {
			t.Fatal("parsed without a kube-proxy table")
		}
		checkStates(t, res.ports)
		for k, st := range res.ports {
			for _, d := range st.Drops {
				if d.AllDestinations {
					t.Errorf("%s: nftables has no rule for all destinations: %+v", k, d)
				}
			}
		}
	})
}

// FuzzCanonicalDest: whatever -d value parses yields an address or prefix in
// canonical form, which parses again to itself.
func FuzzCanonicalDest(f *testing.F) {
	for _, s := range []string{"1.2.3.4/32", "2001:DB8:0::10/128", "::ffff:1.2.3.4", "192.0.2.0/24", "fe80::1%eth0/128", "1.2.3.4/33", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := canonicalDest([]byte(s))
		if err != nil {
			return
		}
		again, err := canonicalDest([]byte(got))
		if err != nil || again != got {
			t.Fatalf("%q -> %q -> %q, %v: not canonical", s, got, again, err)
		}
	})
}

// FuzzParseIPTablesVersion: a version is digits and dots only.
func FuzzParseIPTablesVersion(f *testing.F) {
	for _, s := range []string{"iptables v1.8.9 (nf_tables)\n", "iptables-legacy v1.8.7 (legacy)", "v", "vv1.2", "v1..2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := parseIPTablesVersion(b)
		if v == "" {
			return
		}
		if strings.Trim(v, "0123456789.") != "" || strings.Contains(v, "..") || strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") {
			t.Fatalf("%q: version %q", b, v)
		}
	})
}

func FuzzNFTServiceChain(f *testing.F) {
	for _, s := range []string{
		"external-7UYOFJ22-kubelings/checkout/tcp/http",
		"local-AAAAAAAA-kubelings/web/tcp/http",
		"service-AAAAAAAA-default/nginx/tcp/",
		"firewall-ZZZZZZZZ-a/b/sctp/p",
		"endpoint-AAAA1111-kubelings/checkout/tcp/http__10.244.1.5/8080",
		"services",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		prefix, k, ok := nftServiceChain(name)
		if !ok {
			return
		}
		// Whatever parses names a Service port whose hash it is.
		rest := name[len(prefix)+9:]
		parts := bytes.Split([]byte(rest), []byte("/"))
		sp := ServicePort{Namespace: string(parts[0]), Name: string(parts[1]), Protocol: string(parts[2]), Port: string(parts[3])}
		if got := iptablesChainHash(sp); got != string(k[:]) {
			t.Fatalf("%q: key %s, hash of %+v is %s", name, k, sp, got)
		}
	})
}

func FuzzNFTEndpointChain(f *testing.F) {
	for _, s := range []string{
		"endpoint-AAAA1111-kubelings/checkout/tcp/http__10.244.1.5/8080",
		"endpoint-AAAA1111-kubelings/checkout/tcp/http__fd00.10.244.1..5/8080",
		"endpoint-AAAA1111-kubelings/checkout/tcp/http__fd00.1234.5678.9a...",
		"endpoint-AAAA1111-a/b/udp/__1.2.3.4/53",
		"endpoint-X",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e, ok := nftEndpointChain(name)
		if !ok {
			return
		}
		if !e.Addr.IsValid() {
			if n, _ := e.Name.(chainName); n.chainKind != nftEPChain {
				t.Fatalf("%q: neither an address nor a chain hash", name)
			}
			return
		}
		// An address is only read from a whole name that spells it: "__<ip>/<port>" at its end.
		slash := strings.LastIndexByte(name, '/')
		port, err := strconv.ParseUint(name[slash+1:], 10, 16)
		if strings.HasSuffix(name, "...") || !strings.Contains(name, "__") || err != nil || uint16(port) != e.Addr.Port() {
			t.Fatalf("%q: address %s from a name that does not spell it", name, e.Addr)
		}
	})
}

// FuzzParseAddrPort: the in-place IPv4 reader agrees with netip wherever it answers, and answers for every
// canonical IPv4 address and port.
func FuzzParseAddrPort(f *testing.F) {
	for _, s := range []string{"10.244.1.5:8080", "[fd00::5]:8080", "1.2.3.4:0", "255.255.255.255:65535", "1.2.3.4:65536",
		"01.2.3.4:80", "1.2.3.4:080", "1.2.3:80", "1.2.3.4.5:80", "1.2.3.4", ":80", "1.2.3.4:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseAddrPort([]byte(s))
		want, err := netip.ParseAddrPort(s)
		if ok && (err != nil || got != netip.AddrPortFrom(want.Addr().Unmap(), want.Port())) {
			t.Fatalf("%q: %v, netip says %v (%v)", s, got, want, err)
		}
		if err == nil && want.Addr().Is4() && want.String() == s && !ok {
			t.Fatalf("%q: not read", s)
		}
	})
}
