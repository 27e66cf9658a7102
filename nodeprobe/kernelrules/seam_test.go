package kernelrules

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// The dataplane seam's fixture table: one table of Service states, read by every reader of this package — the
// iptables reader (both backends; kube-proxy's ≤1.23, 1.24 and ≥1.25 layouts, as iptables-save prints them),
// the nftables reader (nft's JSON listing), and each as auto-detection picks it — through the seam
// (Dataplane.Read: a dataplane.Rules), which must say the same of every Service: per family, what each of its
// destinations does. The node model reads nothing else of a reader, so readers that agree here give the same
// verdicts and series. A reader of another dataplane joins the table with its fixtures of the same Services.

// A world is one node's Services, as fixtures hold them: the scenario (scenario_test.go) and a dual-stack
// node whose families disagree (dualScenario).
const (
	worldScenario = "scenario"
	worldDual     = "dual-stack"
)

func worldServices(world string, v6 bool) []genService {
	if world == worldDual {
		return dualScenario(v6)
	}
	return scenario(v6)
}

// dualRestoreFixture, dualSaveFixture, dualNFTInputFixture and dualNFTJSONFixture hold the dual-stack node's
// rules as the scenario's fixtures hold the scenario's (TestSeamFixturesUpToDate writes them).
func dualRestoreFixture(v6 bool) string {
	return filepath.Join("testdata", "iptables-dual-"+famName(v6)+".restore")
}

func dualSaveFixture(v6 bool, backend Backend) string {
	return filepath.Join("testdata", "iptables-dual-"+famName(v6)+"-"+string(backend)+".save")
}

func dualNFTInputFixture(v6 bool) string {
	return filepath.Join("testdata", "nft-dual-"+famName(v6)+".nft")
}

func dualNFTJSONFixture(v6 bool) string {
	return filepath.Join("testdata", "nft-dual-"+famName(v6)+".json")
}

// seamReader is one reader of one world, as main would wire it.
type seamReader struct {
	name, world string
	dp          *Dataplane
	// mode and backend are what the read must say of itself.
	mode    Mode
	backend Backend
}

func seamReaders(t *testing.T) []seamReader {
	read := func(mode Mode, runner Runner, proxyMode string) *Dataplane {
		return NewDataplane(Options{Mode: mode, Runner: runner, LookPath: anyPath, ProxyModeURL: proxyMode, CacheTTL: -1})
	}
	var out []seamReader
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		for _, l := range layouts {
			runner := iptablesNodeOf(t, backend, func(v6 bool) string { return saveFixture(l, v6, backend) })
			out = append(out, seamReader{name: fmt.Sprintf("iptables %s %s", backend, l), world: worldScenario,
				dp: read(ModeIPTables, runner, ""), mode: ModeIPTables, backend: backend})
		}
		runner := iptablesNodeOf(t, backend, func(v6 bool) string { return dualSaveFixture(v6, backend) })
		out = append(out, seamReader{name: "iptables " + string(backend), world: worldDual,
			dp: read(ModeIPTables, runner, ""), mode: ModeIPTables, backend: backend})
	}
	out = append(out,
		seamReader{name: "nftables", world: worldScenario, dp: read(ModeNFTables, nftNode(t), ""), mode: ModeNFTables},
		seamReader{name: "nftables", world: worldDual, dp: read(ModeNFTables, nftNodeOf(t, dualNFTJSONFixture), ""), mode: ModeNFTables},
		// Detection picks the reader: kube-proxy's /proxyMode says which.
		seamReader{name: "auto: iptables", world: worldScenario, mode: ModeIPTables, backend: BackendNFT,
			dp: read(ModeAuto, iptablesNode(t, BackendNFT), proxyModeServer(t, "iptables", http.StatusOK))},
		seamReader{name: "auto: nftables", world: worldScenario, mode: ModeNFTables,
			dp: read(ModeAuto, nftNode(t), proxyModeServer(t, "nftables", http.StatusOK))},
	)
	return out
}

// seamDest is one external destination of a Service port: the NodePort (address ""), or a load balancer IP
// or externalIP with the Service port.
type seamDest struct {
	address string
	port    int32
}

func (d seamDest) String() string {
	if d.address == "" {
		return fmt.Sprintf("NodePort %d", d.port)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(d.address), uint16(d.port)).String()
}

// destinations are sp's external destinations in one family of world (none for a Service the world lacks).
func destinations(world string, sp ServicePort, v6 bool) []seamDest {
	for _, s := range worldServices(world, v6) {
		if s.servicePort() != sp {
			continue
		}
		var out []seamDest
		if s.nodePort != 0 {
			out = append(out, seamDest{port: int32(s.nodePort)})
		}
		for _, a := range slices.Concat(s.lbIPs, s.externalIPs) {
			out = append(out, seamDest{address: a, port: int32(s.svcPort)})
		}
		return out
	}
	return nil
}

// seamSays is what a port's state says its destinations get: "absent" (nothing programmed), "reject", "drop"
// and the destinations dropped, or "forward" to its local endpoints (how many, and which).
func seamSays(st dataplane.PortState, dests []seamDest) string {
	if !st.Programmed {
		return "absent"
	}
	var says []string
	if st.Reject {
		says = append(says, "reject")
	}
	var dropped []string
	for _, d := range dests {
		if st.DropsTo(d.address, d.port) {
			dropped = append(dropped, d.String())
		}
	}
	if st.Drop || len(dropped) > 0 {
		says = append(says, "drop "+strings.Join(dropped, ", "))
	}
	if st.LocalEndpoints > 0 || len(says) == 0 {
		eps := make([]string, len(st.Endpoints))
		for i, e := range st.Endpoints {
			eps[i] = e.String()
		}
		says = append(says, fmt.Sprintf("forward to %d local [%s]", st.LocalEndpoints, strings.Join(eps, " ")))
	}
	return strings.Join(says, "; ")
}

// seamTable is the Service states every reader must tell the same, per family.
var seamTable = []struct {
	state string
	world string
	sp    ServicePort
	want  map[string]string // family -> seamSays
}{
	{"forwarding to local endpoints", worldScenario, ServicePort{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "forward to 2 local [10.244.1.5:8080 10.244.1.6:8080]",
		FamilyIPv6: "forward to 2 local [[fd00:10:244:1::5]:8080 [fd00:10:244:1::6]:8080]",
	}},
	{"no local endpoint: every destination dropped", worldScenario, ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "drop NodePort 30090, 192.0.2.10:80, 192.0.2.20:80",
		FamilyIPv6: "drop NodePort 30090, [2001:db8::10]:80, [2001:db8::20]:80",
	}},
	{"no endpoint anywhere: rejected (unnamed port)", worldScenario, ServicePort{Namespace: "kubelings", Name: "gone", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "reject",
		FamilyIPv6: "reject",
	}},
	{"session affinity, one local endpoint", worldScenario, ServicePort{Namespace: "kubelings", Name: "sticky", Port: "https", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "forward to 1 local [10.244.1.8:8443]",
		FamilyIPv6: "forward to 1 local [[fd00:10:244:1::8]:8443]",
	}},
	{"SCTP, one local endpoint", worldScenario, ServicePort{Namespace: "telco", Name: "sig", Port: "sctp", Protocol: "SCTP"}, map[string]string{
		FamilyIPv4: "forward to 1 local [10.244.1.10:3868]",
		FamilyIPv6: "forward to 1 local [[fd00:10:244:1::a]:3868]",
	}},
	{"Cluster policy: programmed, nothing local counted", worldScenario, ServicePort{Namespace: "kube-system", Name: "kube-dns", Port: "dns", Protocol: "UDP"}, map[string]string{
		FamilyIPv4: "forward to 0 local []",
		FamilyIPv6: "forward to 0 local []",
	}},
	{"internalTrafficPolicy Local without local endpoints: external traffic not dropped", worldScenario, ServicePort{Namespace: "kubelings", Name: "internal", Port: "http", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "forward to 0 local []",
		FamilyIPv6: "forward to 0 local []",
	}},
	{"not programmed: absent", worldScenario, ServicePort{Namespace: "kubelings", Name: "nothere", Port: "http", Protocol: "TCP"}, map[string]string{
		FamilyIPv4: "absent",
		FamilyIPv6: "absent",
	}},
	{"not programmed under that protocol: absent", worldScenario, ServicePort{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "UDP"}, map[string]string{
		FamilyIPv4: "absent",
		FamilyIPv6: "absent",
	}},
	{"dual-stack: IPv4 forwards, IPv6 drops", worldDual, dualLB, map[string]string{
		FamilyIPv4: "forward to 1 local [10.244.1.40:8080]",
		FamilyIPv6: "drop NodePort 30140, [2001:db8::40]:80",
	}},
	{"dual-stack: IPv4 drops, IPv6 forwards", worldDual, dualNP, map[string]string{
		FamilyIPv4: "drop NodePort 30141",
		FamilyIPv6: "forward to 1 local [[fd00:10:244:1::41]:8080]",
	}},
}

func TestSeamFixtureTable(t *testing.T) {
	readers := seamReaders(t)
	reads := map[string]dataplane.Rules{}
	for _, r := range readers {
		rules, err := r.dp.Read(context.Background())
		if err != nil {
			t.Fatalf("%s, %s: %v", r.world, r.name, err)
		}
		info := rules.Info()
		if info.Kind != dataplane.KindKubeProxy || info.Mode != string(r.mode) || info.Backend != string(r.backend) ||
			!slices.Equal(info.Families, []string{FamilyIPv4, FamilyIPv6}) || info.ReadAt.IsZero() {
			t.Errorf("%s, %s: the read says %+v", r.world, r.name, info)
		}
		for _, f := range []string{FamilyIPv4, FamilyIPv6} {
			if !rules.HasFamily(f) {
				t.Errorf("%s, %s: %s not read", r.world, r.name, f)
			}
		}
		reads[r.world+"/"+r.name] = rules
	}
	worlds := map[string]int{}
	for _, row := range seamTable {
		worlds[row.world]++
		t.Run(row.state, func(t *testing.T) {
			n := 0
			for _, r := range readers {
				if r.world != row.world {
					continue
				}
				n++
				rules := reads[r.world+"/"+r.name]
				for _, f := range []string{FamilyIPv4, FamilyIPv6} {
					got := seamSays(rules.Family(row.sp, f), destinations(row.world, row.sp, f == FamilyIPv6))
					if got != row.want[f] {
						t.Errorf("%s, %s: %v: %q, want %q", r.name, f, row.sp, got, row.want[f])
					}
				}
			}
			if n < 2 {
				t.Fatalf("%d readers of %s: the table compares readers", n, row.world)
			}
		})
	}
	// Every Service of each world is in the table.
	for _, world := range []string{worldScenario, worldDual} {
		if want := len(worldServices(world, false)); worlds[world] < want {
			t.Errorf("%s: %d rows for its %d Services", world, worlds[world], want)
		}
	}
}

// TestSeamFixturesUpToDate: the dual-stack node's fixtures are its generator's rules, as iptables-save (both
// backends) and nft's JSON listing print them. -update rewrites them (root: it loads them into network
// namespaces).
func TestSeamFixturesUpToDate(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		ipt := genRules(layout125, v6, dualScenario(v6))
		nft := genNFT(v6, dualScenario(v6))
		if *update {
			writeFixture(t, dualRestoreFixture(v6), []byte(ipt))
			for _, backend := range []Backend{BackendLegacy, BackendNFT} {
				writeFixture(t, dualSaveFixture(v6, backend), savedBy(t, ipt, v6, backend))
			}
			writeFixture(t, dualNFTInputFixture(v6), []byte(nft))
			ns := newNetns(t)
			nsRun(t, ns, []byte(nft), "nft", "-f", "-")
			fam := "ip"
			if v6 {
				fam = "ip6"
			}
			writeFixture(t, dualNFTJSONFixture(v6), nsRun(t, ns, nil, "nft", "-j", "list", "table", fam, "kube-proxy"))
			continue
		}
		for path, gen := range map[string]string{dualRestoreFixture(v6): ipt, dualNFTInputFixture(v6): nft} {
			have, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(have) != gen {
				t.Errorf("%s differs from the generator; run go test -run TestSeamFixturesUpToDate -update as root", path)
			}
		}
	}
}

func writeFixture(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
