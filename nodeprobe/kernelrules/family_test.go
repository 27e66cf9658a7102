package kernelrules

import (
	"net/netip"
	"testing"
)

// One Service port, dual-stack, as kube-proxy ≥1.25 writes it: IPv4 forwards
// (local endpoint), IPv6 drops its NodePort and an LB IP. The families stay apart.
func TestFamiliesKeptApart(t *testing.T) {
	sp := ServicePort{Namespace: "ns", Name: "dual", Port: "http", Protocol: "TCP"}
	svl := "KUBE-SVL-" + iptablesChainHash(sp)
	v4 := "*filter\n:KUBE-EXTERNAL-SERVICES - [0:0]\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n:" + svl + " - [0:0]\n" +
		"[0:0] -A " + svl + " -m comment --comment \"ns/dual:http -> 10.244.1.5:8080\" -j KUBE-SEP-AAAAAAAAAAAAAAAA\nCOMMIT\n"
	v6 := "*filter\n:KUBE-EXTERNAL-SERVICES - [0:0]\n" +
		"[9:540] -A KUBE-EXTERNAL-SERVICES -d 2001:DB8:0:0::10/128 -p tcp -m comment --comment \"ns/dual:http has no local endpoints\" -m tcp --dport 80 -j DROP\n" +
		"[4:240] -A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"ns/dual:http has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j DROP\n" +
		"COMMIT\n*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n"
	snap := &Snapshot{Mode: ModeIPTables}
	for _, f := range []struct{ name, data string }{{FamilyIPv4, v4}, {FamilyIPv6, v6}} {
		res := newIPTablesResult()
		if err := parseIPTablesSave([]byte(f.data), res); err != nil {
			t.Fatal(err)
		}
		snap.addFamily(f.name, res.ports)
	}
	if got, want := snap.Family(sp, FamilyIPv4), (PortState{Programmed: true, LocalEndpoints: 1,
		Endpoints: []Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:8080")}}}); !equalState(got, want) {
		t.Errorf("IPv4 %+v, want %+v", got, want)
	}
	want6 := PortState{Programmed: true, Drop: true, DropPackets: 13, Drops: []DropRule{
		{Port: 30080, Packets: 4, Counted: true},
		{Address: "2001:db8::10", Port: 80, Packets: 9, Counted: true},
	}}
	if got := snap.Family(sp, FamilyIPv6); !equalState(got, want6) {
		t.Errorf("IPv6 %+v, want %+v", got, want6)
	}
	if got := snap.Port(sp); !got.Drop || got.LocalEndpoints != 1 || got.DropPackets != 13 || len(got.Drops) != 2 {
		t.Errorf("merged %+v", got)
	}
}

func TestDropRuleDestinations(t *testing.T) {
	cases := []struct {
		rule string
		want DropRule
		bad  bool
	}{
		{rule: `[3:180] -A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "a/b:c has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30090 -j DROP`,
			want: DropRule{Port: 30090, Packets: 3, Counted: true}},
		// kube-proxy's own argument order, without counters (iptables-save without -c).
		{rule: `-A KUBE-EXTERNAL-SERVICES -m comment --comment "a/b:c has no local endpoints" -m tcp -p tcp -d 192.0.2.10/32 --dport 80 -j DROP`,
			want: DropRule{Address: "192.0.2.10", Port: 80}},
		{rule: `[1:60] -A KUBE-EXTERNAL-SERVICES -d ::ffff:192.0.2.1/128 -p tcp -m comment --comment "a/b:c has no local endpoints" -m tcp --dport 443 -j DROP`,
			want: DropRule{Address: "::ffff:192.0.2.1", Port: 443, Packets: 1, Counted: true}},
		{rule: `-A KUBE-EXTERNAL-SERVICES -d 192.0.2.0/24 -p udp -m comment --comment "a/b:c has no local endpoints" -m udp --dport 53 -j DROP`,
			want: DropRule{Address: "192.0.2.0/24", Port: 53}},
		{rule: `-A KUBE-EXTERNAL-SERVICES -d 192.0.2.300/32 -p tcp -m comment --comment "a/b:c has no local endpoints" -m tcp --dport 80 -j DROP`, bad: true},
		{rule: `-A KUBE-EXTERNAL-SERVICES -d 192.0.2.1/32 -p tcp -m comment --comment "a/b:c has no local endpoints" -m tcp --dport http -j DROP`, bad: true},
	}
	sp := ServicePort{Namespace: "a", Name: "b", Port: "c", Protocol: "TCP"}
	for _, c := range cases {
		res := newIPTablesResult()
		err := parseIPTablesSave([]byte("*filter\n"+c.rule+"\nCOMMIT\n"), res)
		if c.bad {
			if err == nil {
				t.Errorf("%s: parsed", c.rule)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.rule, err)
			continue
		}
		snap := &Snapshot{}
		snap.addFamily(FamilyIPv4, res.ports)
		p := sp
		if c.want.Port == 53 {
			p.Protocol = "UDP"
		}
		got := snap.Family(p, FamilyIPv4)
		if len(got.Drops) != 1 || got.Drops[0] != c.want || !got.Drop || got.DropPackets != c.want.Packets {
			t.Errorf("%s: %+v, want one drop %+v", c.rule, got, c.want)
		}
	}
}
