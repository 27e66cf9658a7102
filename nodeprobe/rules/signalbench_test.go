package rules

import (
	"context"
	"errors"
	"testing"
)

// BenchmarkChangeSignals: the kernel reads an nft-backend steady read makes, on
// the 10,000-Service ruleset restored into a namespace (root): the nf_tables
// generation (every read, per family) and the counter dump of
// KUBE-EXTERNAL-SERVICES with the generation read around it (per family while
// the generation holds). exec/ is ExecRunner on a thread inside the namespace:
// the exporter's own path, which lives in the namespace it reads; netns/ is
// NetnsRunner, which enters the namespace for every read.
func BenchmarkChangeSignals(b *testing.B) {
	requireRoot(b)
	ensureTools(b)
	ns := newNetns(b)
	nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, BackendNFT, "restore"), "-c")
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cs   ChangeSignals
		// run runs the loop where cs reads the namespace.
		run func(func() error) error
	}{
		{"exec", ExecRunner{}, func(fn func() error) error { return inNetns(ns, fn) }},
		{"netns", NetnsRunner{Namespace: ns}, func(fn func() error) error { return fn() }},
	} {
		// b.Loop runs on the namespace's thread for exec/; errors end the loop
		// and fail the benchmark on its own goroutine.
		b.Run(c.name+"/generation", func(b *testing.B) {
			b.ReportAllocs()
			err := c.run(func() error {
				for b.Loop() {
					if _, err := c.cs.NFTablesGeneration(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
		b.Run(c.name+"/chain-counters", func(b *testing.B) {
			b.ReportAllocs()
			var rules int
			err := c.run(func() error {
				for b.Loop() {
					_, packets, err := c.cs.NFTablesChainCounters(ctx, false, "filter", string(chainExternalServices))
					if err != nil {
						return err
					}
					rules = len(packets)
				}
				return nil
			})
			if err == nil && rules < 2500 {
				err = errors.New("KUBE-EXTERNAL-SERVICES: fewer rules than the ruleset's 2,500 drops")
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(rules), "rules")
		})
	}
}
