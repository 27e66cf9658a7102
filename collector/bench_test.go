package collector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/collector/scrape"
	"github.com/localtraffic/localtraffic-exporter/collector/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

// BenchmarkScrape: one scrape's gathering, deciding and rendering for n dual-stack NodePort Services with
// both families' rules read (no network: the view and the rules are fixed; kube-proxy has no address), with
// the default collectors and with every collector and series on, through the direct exposition the handler
// serves (path=direct). For comparison, the same through a Registry with the node label built into the
// descriptors (path=registry) and with the registry wrapped to add it (path=wrapped: a descriptor per series
// per scrape, what the handler did before).
func BenchmarkScrape(b *testing.B) {
	selections := []struct {
		name string
		sel  Selection
	}{{"default", DefaultSelection()}, {"all", allSelection()}}
	for _, n := range []int{100, 1000, 2000} {
		for _, s := range selections {
			b.Run(fmt.Sprintf("services=%d/collectors=%s/path=direct", n, s.name), func(b *testing.B) { benchScrape(b, n, s.sel, "direct") })
		}
		for _, path := range []string{"registry", "wrapped"} {
			b.Run(fmt.Sprintf("services=%d/collectors=default/path=%s", n, path), func(b *testing.B) { benchScrape(b, n, DefaultSelection(), path) })
		}
	}
}

func benchScrape(b *testing.B, n int, sel Selection, path string) {
	snap := kubeview.Snapshot{Node: scrapetest.DualStackNode()}
	v4rules, v6rules := map[kernelrules.ServicePort]kernelrules.PortState{}, map[kernelrules.ServicePort]kernelrules.PortState{}
	for i := range n {
		svc := scrapetest.NodePortService(i%2, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, i%2, true))
		svc.Name = fmt.Sprintf("svc-%d", i)
		snap.Services = append(snap.Services, svc)
		sp := kernelrules.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: "http", Protocol: "TCP"}
		v4rules[sp] = kernelrules.PortState{Programmed: true, LocalEndpoints: 1}
		if i%2 == 0 {
			v6rules[sp] = kernelrules.PortState{Programmed: true, Drop: true, DropPackets: uint64(i),
				Drops: []kernelrules.DropRule{{Port: 30090, Packets: uint64(i), Counted: true}}}
		} else {
			v6rules[sp] = kernelrules.PortState{Programmed: true, LocalEndpoints: 1}
		}
	}
	reader := &scrapetest.Reader{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: snap}, RuleReader: reader, KubeProxyAddress: scrapetest.NoAddress, Logger: logger})
	collectors, err := sel.Collectors()
	if err != nil {
		b.Fatal(err)
	}
	exp := NewExporter(logger, g, collectors...)
	if path != "wrapped" {
		exp = exp.WithNode("node-1")
	}
	at := time.Unix(1700000000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// A new read each scrape, as after every cache expiry: the counters are folded each time. Building
		// it is the reader's cost (its own benchmarks), not timed here.
		b.StopTimer()
		reader.Snap = kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, at.Add(time.Duration(i)*time.Second),
			map[string]map[kernelrules.ServicePort]kernelrules.PortState{kernelrules.FamilyIPv4: v4rules, kernelrules.FamilyIPv6: v6rules})
		b.StartTimer()
		var exposition prometheus.Gatherer = exp.Exposition(context.Background())
		if path != "direct" {
			reg := prometheus.NewRegistry()
			exposition = reg
			if path == "wrapped" {
				prometheus.WrapRegistererWith(prometheus.Labels{"node": "node-1"}, reg).MustRegister(exp.Bind(context.Background()))
			} else {
				reg.MustRegister(exp.Bind(context.Background()))
			}
		}
		mfs, err := exposition.Gather()
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			series := 0
			for _, mf := range mfs {
				series += len(mf.GetMetric())
			}
			b.ReportMetric(float64(series), "series")
		}
	}
}
