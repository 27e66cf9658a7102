package kernelrules

import (
	"slices"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane/dataplanetest"
)

// A dual-stack node where kube-proxy's two proxiers disagree, as they do when a
// Service's IPv4 and IPv6 EndpointSlices list different pods on this node:
//   - kubelings/dual-lb (LoadBalancer): a local IPv4 endpoint, none in IPv6, so
//     IPv6 drops its NodePort and its LB IP while IPv4 forwards;
//   - kubelings/dual-np (NodePort): no local IPv4 endpoint (IPv4 drops the
//     NodePort), a local IPv6 one.
func dualScenario(ipv6 bool) []genService {
	return genOf(dataplanetest.Services(dataplanetest.WorldDual, ipv6), map[string]uint64{"dual-lb": 11, "dual-np": 5})
}

var (
	dualLB = ServicePort{Namespace: "kubelings", Name: "dual-lb", Port: "http", Protocol: "TCP"}
	dualNP = ServicePort{Namespace: "kubelings", Name: "dual-np", Port: "http", Protocol: "TCP"}
)

// dualWant: per family, what the reader must say. counted: iptables modes read
// counters; v6Zero: ip6tables-nft-restore 1.8.9 ignores -c, so IPv6 counters are 0.
func dualWant(counted, v6Zero bool) map[string]map[ServicePort]PortState {
	pk := func(n uint64, v6 bool) uint64 {
		if !counted || (v6 && v6Zero) {
			return 0
		}
		return n
	}
	v4, v6 := dualScenario(false), dualScenario(true)
	return map[string]map[ServicePort]PortState{
		FamilyIPv4: {
			dualLB: {Programmed: true, LocalEndpoints: 1, Endpoints: localEndpointsOf(v4[0])},
			dualNP: {Programmed: true, Drop: true, DropPackets: pk(5, false), Drops: []DropRule{{Port: 30141, Packets: pk(5, false), Counted: counted}}},
		},
		FamilyIPv6: {
			dualLB: {Programmed: true, Drop: true, DropPackets: 2 * pk(11, true), Drops: []DropRule{
				{Port: 30140, Packets: pk(11, true), Counted: counted},
				{Address: "2001:db8::40", Port: 80, Packets: pk(11, true), Counted: counted},
			}},
			dualNP: {Programmed: true, LocalEndpoints: 1, Endpoints: localEndpointsOf(v6[1])},
		},
	}
}

func checkDual(t *testing.T, snap *Snapshot, want map[string]map[ServicePort]PortState) {
	t.Helper()
	if !slices.Equal(snap.Families, []string{FamilyIPv4, FamilyIPv6}) || !snap.HasFamily(FamilyIPv4) || !snap.HasFamily(FamilyIPv6) {
		t.Fatalf("families %v", snap.Families)
	}
	for fam, ports := range want {
		checkFamily(t, snap, fam, ports)
	}
	// The merged view still says "drops" for both: exactly what hid the
	// disagreement before.
	for _, sp := range []ServicePort{dualLB, dualNP} {
		if m := snap.Port(sp); !m.Drop || m.LocalEndpoints != 1 {
			t.Errorf("merged %v: %+v", sp, m)
		}
	}
}

func TestIntegrationDualStackIPTables(t *testing.T) {
	requireRoot(t)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		t.Run(string(backend), func(t *testing.T) {
			ns := newNetns(t)
			restoreBothFamilies(t, ns, backend, func(v6 bool) string { return genRules(layout125, v6, dualScenario(v6)) })
			before := nsState(t, ns)
			snap := readNS(t, ns)
			if snap.Mode != ModeIPTables || snap.Backend != backend {
				t.Errorf("mode %s backend %s", snap.Mode, snap.Backend)
			}
			checkDual(t, snap, dualWant(true, backend == BackendNFT))
			compareState(t, before, nsState(t, ns))
		})
	}
}

func TestIntegrationDualStackNFTables(t *testing.T) {
	requireRoot(t)
	for name, dnat := range map[string]bool{"endpoint chains": false, "v1.37 dnat": true} {
		t.Run(name, func(t *testing.T) {
			ns := newNetns(t)
			for _, v6 := range []bool{false, true} {
				nsRun(t, ns, []byte(genNFTLayout(v6, dualScenario(v6), dnat)), "nft", "-f", "-")
			}
			before := nsState(t, ns)
			snap := readNS(t, ns)
			if snap.Mode != ModeNFTables {
				t.Errorf("mode %s", snap.Mode)
			}
			checkDual(t, snap, dualWant(false, false))
			compareState(t, before, nsState(t, ns))
		})
	}
}

// The v1.37 layout of the full scenario on the real kernel, both families: the
// same states as the endpoint-chain layout.
func TestIntegrationNFTablesDNATLayout(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(genNFTLayout(v6, scenario(v6), true)), "nft", "-f", "-")
	}
	before := nsState(t, ns)
	snap := readNS(t, ns)
	checkFamily(t, snap, FamilyIPv4, nftWant(false))
	checkFamily(t, snap, FamilyIPv6, nftWant(true))
	compareState(t, before, nsState(t, ns))
}

// The same without root: the generated restore input parsed per family.
func TestDualStackGenerated(t *testing.T) {
	checkDual(t, parseBothFamilies(t, func(v6 bool) string { return genRules(layout125, v6, dualScenario(v6)) }), dualWant(true, false))
}

// parseBothFamilies parses gen's IPv4 and IPv6 iptables-save text into one
// dual-stack snapshot, as a read of both families would build it.
func parseBothFamilies(t testing.TB, gen func(v6 bool) string) *Snapshot {
	t.Helper()
	snap := &Snapshot{Mode: ModeIPTables}
	for _, v6 := range []bool{false, true} {
		res := newIPTablesResult()
		if err := parseIPTablesSave([]byte(gen(v6)), res); err != nil {
			t.Fatal(err)
		}
		fam := FamilyIPv4
		if v6 {
			fam = FamilyIPv6
		}
		snap.addFamily(fam, res.ports)
	}
	return snap
}
