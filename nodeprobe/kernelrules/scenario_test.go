package kernelrules

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane/dataplanetest"
)

// equalState compares states, Drops and Endpoints included (nil and empty alike).
func equalState(a, b PortState) bool {
	if len(a.Drops) == 0 && len(b.Drops) == 0 {
		a.Drops, b.Drops = nil, nil
	}
	if len(a.Endpoints) == 0 && len(b.Endpoints) == 0 {
		a.Endpoints, b.Endpoints = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// checkFamily checks one family's states against want, and that the merged
// view of a one-family snapshot is the same.
func checkFamily(t *testing.T, snap *Snapshot, family string, want map[ServicePort]PortState) {
	t.Helper()
	for sp, w := range want {
		if got := snap.Family(sp, family); !equalState(got, w) {
			t.Errorf("%s %v: got %+v, want %+v", family, sp, got, w)
		}
		if len(snap.Families) == 1 {
			if got := snap.Port(sp); !equalState(got, w) {
				t.Errorf("merged %v: got %+v, want %+v", sp, got, w)
			}
		}
	}
}

var update = flag.Bool("update", false, "regenerate testdata fixtures (captures real iptables-save output; needs root)")

// scenario is a small cluster seen from one node, covering every case the reader
// must tell apart: the seam's fixture world (dataplanetest.WorldScenario), with
// the counter kube-proxy's rules put on the blackholed Service's drop rules.
func scenario(ipv6 bool) []genService {
	return genOf(dataplanetest.Services(dataplanetest.WorldScenario, ipv6), map[string]uint64{"checkout": 7})
}

// genOf is the generator's Services of a world of the seam's fixture table;
// dropPkts is the counter on each drop rule, by Service name.
func genOf(svcs []dataplanetest.Service, dropPkts map[string]uint64) []genService {
	out := make([]genService, len(svcs))
	for i, s := range svcs {
		g := genService{ns: s.Namespace, name: s.Name, port: s.PortName, proto: strings.ToLower(s.Protocol),
			clusterIP: s.ClusterIP, svcPort: s.Port, nodePort: s.NodePort, hcNodePort: s.HealthCheckNodePort,
			lbIPs: s.LoadBalancerIPs, externalIPs: s.ExternalIPs, etpLocal: s.ExternalLocal, itpLocal: s.InternalLocal,
			affinity: s.Affinity, dropPkts: dropPkts[s.Name]}
		for _, ep := range s.Endpoints {
			g.eps = append(g.eps, genEndpoint{ip: ep.IP, port: ep.Port, local: ep.Local})
		}
		out[i] = g
	}
	return out
}

// checkoutDrops are the drop rules of kubelings/checkout:http in scenario(): in
// ≥1.25 one per destination (NodePort, LB IP, external IP), each with the
// scenario's counter pkts; ≤1.24 one KUBE-MARK-DROP rule for all of them.
func checkoutDrops(l layout, ipv6 bool, pkts uint64, counted bool) []DropRule {
	if l != layout125 {
		return []DropRule{{AllDestinations: true, Packets: pkts, Counted: counted}}
	}
	lb, ext := "192.0.2.10", "192.0.2.20"
	if ipv6 {
		lb, ext = "2001:db8::10", "2001:db8::20"
	}
	return []DropRule{
		{Port: 30090, Packets: pkts, Counted: counted},
		{Address: lb, Port: 80, Packets: pkts, Counted: counted},
		{Address: ext, Port: 80, Packets: pkts, Counted: counted},
	}
}

// scenarioWant is what each layout must yield for scenario() in one family.
func scenarioWant(l layout, ipv6 bool) map[ServicePort]PortState {
	return scenarioWantCounted(l, ipv6, 7, true)
}

// scenarioWantCounted: the same with each drop rule's counter pkts (and whether
// counters were read at all).
func scenarioWantCounted(l layout, ipv6 bool, pkts uint64, counted bool) map[ServicePort]PortState {
	drops := checkoutDrops(l, ipv6, pkts, counted)
	var sum uint64
	for _, d := range drops {
		sum += d.Packets
	}
	svcs := scenario(ipv6)
	return map[ServicePort]PortState{
		{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}:  {Programmed: true, Drop: true, DropPackets: sum, Drops: drops},
		{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "TCP"}:       {Programmed: true, LocalEndpoints: 2, Endpoints: localEndpointsOf(svcs[1])},
		{Namespace: "kubelings", Name: "gone", Protocol: "TCP"}:                    {Programmed: true, Reject: true},
		{Namespace: "kube-system", Name: "kube-dns", Port: "dns", Protocol: "UDP"}: {Programmed: true},
		{Namespace: "kubelings", Name: "sticky", Port: "https", Protocol: "TCP"}:   {Programmed: true, LocalEndpoints: 1, Endpoints: localEndpointsOf(svcs[4])},
		{Namespace: "kubelings", Name: "internal", Port: "http", Protocol: "TCP"}:  {Programmed: true},
		{Namespace: "telco", Name: "sig", Port: "sctp", Protocol: "SCTP"}:          {Programmed: true, LocalEndpoints: 1, Endpoints: localEndpointsOf(svcs[6])},
		// Not a Service at all, and a real one under the wrong protocol.
		{Namespace: "kubelings", Name: "nothere", Port: "http", Protocol: "TCP"}: {},
		{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "UDP"}:     {},
	}
}

// localEndpointsOf is what the reader must name as s's local endpoints: each
// local endpoint's address and port, sorted (every generated layout writes
// kube-proxy's "ns/name:port -> ip:port" jump comments, as nftables' names do).
func localEndpointsOf(s genService) []Endpoint {
	var out []Endpoint
	for _, ep := range s.eps {
		if ep.local {
			out = append(out, Endpoint{Addr: netip.MustParseAddrPort(epAddr(ep))})
		}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

var layouts = []layout{layout125, layout124, layout123}

func famName(ipv6 bool) string {
	if ipv6 {
		return "ipv6"
	}
	return "ipv4"
}

func restoreFixture(l layout, ipv6 bool) string {
	return filepath.Join("testdata", fmt.Sprintf("iptables-%s-%s.restore", l, famName(ipv6)))
}

func saveFixture(l layout, ipv6 bool, backend Backend) string {
	return filepath.Join("testdata", fmt.Sprintf("iptables-%s-%s-%s.save", l, famName(ipv6), backend))
}

// saveBinary names the save/restore command for a family and backend.
func xtablesCmd(ipv6 bool, backend Backend, verb string) string {
	p := "iptables"
	if ipv6 {
		p = "ip6tables"
	}
	return p + "-" + string(backend) + "-" + verb
}

// savedBy loads restore input (with counters) into a new network namespace with backend's tools and returns
// what iptables-save -c prints of its filter and nat tables.
func savedBy(t *testing.T, restore string, v6 bool, backend Backend) []byte {
	t.Helper()
	ns := newNetns(t)
	nsRun(t, ns, []byte(restore), xtablesCmd(v6, backend, "restore"), "-c")
	var out []byte
	for _, table := range []string{"filter", "nat"} {
		out = append(out, nsRun(t, ns, nil, xtablesCmd(v6, backend, "save"), "-c", "-t", table)...)
	}
	return out
}

func TestFixturesUpToDate(t *testing.T) {
	for _, l := range layouts {
		for _, v6 := range []bool{false, true} {
			gen := genRules(l, v6, scenario(v6))
			path := restoreFixture(l, v6)
			if *update {
				if err := os.WriteFile(path, []byte(gen), 0o644); err != nil {
					t.Fatal(err)
				}
				for _, backend := range []Backend{BackendLegacy, BackendNFT} {
					if err := os.WriteFile(saveFixture(l, v6, backend), savedBy(t, gen, v6, backend), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			have, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(have) != gen {
				t.Errorf("%s differs from the generator; run go test -run TestFixturesUpToDate -update as root", path)
			}
		}
	}
}

func TestParseIPTablesFixtures(t *testing.T) {
	for _, l := range layouts {
		for _, v6 := range []bool{false, true} {
			files := []string{restoreFixture(l, v6), saveFixture(l, v6, BackendLegacy), saveFixture(l, v6, BackendNFT)}
			for _, file := range files {
				t.Run(file, func(t *testing.T) {
					data, err := os.ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					res := newIPTablesResult()
					if err := parseIPTablesSave(data, res); err != nil {
						t.Fatal(err)
					}
					if !res.kubeServices || !res.hintChains || res.ipvsChains {
						t.Errorf("kubeServices=%v hintChains=%v ipvsChains=%v, want true true false", res.kubeServices, res.hintChains, res.ipvsChains)
					}
					fam := FamilyIPv4
					if v6 {
						fam = FamilyIPv6
					}
					snap := &Snapshot{}
					snap.addFamily(fam, res.ports)
					want := scenarioWant(l, v6)
					if v6 && strings.HasSuffix(file, "-nft.save") {
						// ip6tables-nft-restore 1.8.9 ignores -c: the captured
						// save has zero counters (still printed: Counted).
						want = scenarioWantCounted(l, v6, 0, true)
					}
					checkFamily(t, snap, fam, want)
					other := FamilyIPv6
					if v6 {
						other = FamilyIPv4
					}
					if snap.HasFamily(other) || !snap.HasFamily(fam) {
						t.Errorf("HasFamily: %s %v, %s %v", fam, snap.HasFamily(fam), other, snap.HasFamily(other))
					}
					for sp := range want {
						if got := snap.Family(sp, other); !equalState(got, PortState{}) {
							t.Errorf("%v in %s (not read): %+v", sp, other, got)
						}
					}
				})
			}
		}
	}
}
