package kernelrules

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane/dataplanetest"
)

// The dataplane seam's fixture table (nodeprobe/dataplane/dataplanetest: one table of Service states for
// every reader), read by every reader of this package — the iptables reader (both backends; kube-proxy's
// ≤1.23, 1.24 and ≥1.25 layouts, as iptables-save prints them), the nftables reader (nft's JSON listing), and
// each as the selector picks it — through the seam (Dataplane.Read: a dataplane.Rules), which must say the
// same of every Service: per family, what each of its destinations does. The node model reads nothing else of
// a reader, so readers that agree here give the same verdicts and series. The fixtures are the table's worlds
// rendered as kube-proxy writes them (scenario and dualScenario are the worlds; the Up-to-date tests hold the
// fixtures to them); nodeprobe/ciliumsvc runs the same table on Cilium's rendering.

// The worlds, as the fixtures hold them.
const (
	worldScenario = dataplanetest.WorldScenario
	worldDual     = dataplanetest.WorldDual
)

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

func TestSeamFixtureTable(t *testing.T) {
	var reads []dataplanetest.Read
	perWorld := map[string]int{}
	for _, r := range seamReaders(t) {
		rules, err := r.dp.Read(context.Background())
		if err != nil {
			t.Fatalf("%s, %s: %v", r.world, r.name, err)
		}
		info := rules.Info()
		if info.Kind != dataplane.KindKubeProxy || info.Mode != string(r.mode) || info.Backend != string(r.backend) ||
			!slices.Equal(info.Families, []string{FamilyIPv4, FamilyIPv6}) || info.ReadAt.IsZero() {
			t.Errorf("%s, %s: the read says %+v", r.world, r.name, info)
		}
		reads = append(reads, dataplanetest.Read{Reader: r.name, World: r.world, Rules: rules})
		perWorld[r.world]++
	}
	for _, world := range dataplanetest.Worlds() {
		if perWorld[world] < 2 {
			t.Errorf("%d readers of %s: the table compares readers", perWorld[world], world)
		}
	}
	dataplanetest.RunTable(t, reads)
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
