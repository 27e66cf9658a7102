package kernelrules

import (
	"context"
	"testing"
)

// BenchmarkChangeSignals: the kernel reads an nft-backend steady read makes.
// host/generation is the nf_tables generation (every read, per family) as the
// exporter reads it: ExecRunner in the process's own namespace (read-only; the
// generation's cost does not depend on the ruleset). netns/ reads the
// 10,000-Service ruleset restored into a namespace (root) through NetnsRunner:
// the generation, and the counter dump of KUBE-EXTERNAL-SERVICES with the
// generation read around it (per family while the generation holds), and that
// dump's peak heap.
func BenchmarkChangeSignals(b *testing.B) {
	requireRoot(b)
	ensureTools(b)
	ctx := context.Background()
	generation := func(cs ChangeSignals) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cs.NFTablesGeneration(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("host/generation", generation(ExecRunner{}))
	ns := newNetns(b)
	nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, BackendNFT, "restore"), "-c")
	netns := NetnsRunner{Namespace: ns}
	b.Run("netns/generation", generation(netns))
	b.Run("netns/chain-counters", func(b *testing.B) {
		b.ReportAllocs()
		var rules int
		for b.Loop() {
			_, dumped, err := netns.NFTablesChainRules(ctx, false, "filter", string(chainExternalServices))
			if err != nil {
				b.Fatal(err)
			}
			rules = len(dumped)
		}
		if rules < 2500 {
			b.Fatalf("KUBE-EXTERNAL-SERVICES: %d rules, fewer than the ruleset's 2,500 drops", rules)
		}
		b.ReportMetric(float64(rules), "rules")
	})
	// The same dump's peak heap (a GC before each dump: its time is not the
	// dump's, read the time above).
	b.Run("netns/chain-counters-peak", func(b *testing.B) {
		benchPeak(b, func() error {
			_, _, err := netns.NFTablesChainRules(ctx, false, "filter", string(chainExternalServices))
			return err
		})
	})
}
