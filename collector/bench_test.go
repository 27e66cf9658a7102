package collector

import (
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

// BenchmarkScrape: one scrape's gathering, deciding and rendering for n dual-stack NodePort Services with
// both families' rules read (no network: the view and the rules are fixed; kube-proxy has no address), with
// the default collectors and with every collector and series on, written as text the way the handler
// serves it (path=direct). For comparison, the same through a Registry with the node label built into the
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

// benchServices is n dual-stack NodePort Services and the rules of both families: every Service forwards over
// IPv4, every other one drops over IPv6.
func benchServices(n int) (kubeview.Snapshot, map[kernelrules.ServicePort]kernelrules.PortState, map[kernelrules.ServicePort]kernelrules.PortState) {
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
	return snap, v4rules, v6rules
}

// benchExporter is an exporter of sel's collectors over benchServices(n), without its node label, and the
// reader its rules come from; rulesAt is a read of those rules at a time, for the reader to hand out.
func benchExporter(b *testing.B, n int, sel Selection) (exp *Exporter, reader *scrapetest.Reader, rulesAt func(time.Time) *kernelrules.Snapshot) {
	snap, v4rules, v6rules := benchServices(n)
	reader = &scrapetest.Reader{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: snap}, RuleReader: reader, KubeProxyAddress: scrapetest.NoAddress, Logger: logger})
	collectors, err := sel.Collectors()
	if err != nil {
		b.Fatal(err)
	}
	rulesAt = func(at time.Time) *kernelrules.Snapshot {
		return kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, at,
			map[string]map[kernelrules.ServicePort]kernelrules.PortState{kernelrules.FamilyIPv4: v4rules, kernelrules.FamilyIPv6: v6rules})
	}
	return NewExporter(logger, g, collectors...), reader, rulesAt
}

func benchScrape(b *testing.B, n int, sel Selection, path string) {
	exp, reader, rulesAt := benchExporter(b, n, sel)
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
		reader.Snap = rulesAt(at.Add(time.Duration(i) * time.Second))
		b.StartTimer()
		if path == "direct" {
			var out io.Writer = io.Discard
			var first bytes.Buffer
			if i == 0 {
				out = &first
			}
			if err := exp.WriteText(context.Background(), out, textFormat, nil, nil); err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				b.ReportMetric(float64(bytes.Count(first.Bytes(), []byte("\n"))-2*bytes.Count(first.Bytes(), []byte("# TYPE "))), "series")
			}
			continue
		}
		reg := prometheus.NewRegistry()
		if path == "wrapped" {
			prometheus.WrapRegistererWith(prometheus.Labels{"node": "node-1"}, reg).MustRegister(exp.Bind(context.Background()))
		} else {
			reg.MustRegister(exp.Bind(context.Background()))
		}
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, textFormat)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkKeptSeries: what the exporter keeps of each Service between scrapes (kept-B/service: the live heap
// one scrape leaves behind, per Service) and what a scrape costs when every Service's series are kept, as in
// the node model between changes; the default collectors and all of them.
func BenchmarkKeptSeries(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, s := range []struct {
			name string
			sel  Selection
		}{{"default", DefaultSelection()}, {"all", allSelection()}} {
			b.Run(fmt.Sprintf("services=%d/collectors=%s", n, s.name), func(b *testing.B) {
				snap, v4rules, v6rules := benchServices(n)
				logger := slog.New(slog.DiscardHandler)
				reader := &scrapetest.Reader{Snap: kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000, 0),
					map[string]map[kernelrules.ServicePort]kernelrules.PortState{kernelrules.FamilyIPv4: v4rules, kernelrules.FamilyIPv6: v6rules})}
				g := scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: snap}, RuleReader: reader, KubeProxyAddress: scrapetest.NoAddress, Logger: logger})
				st := g.Gather(context.Background())
				// As the model publishes them: an epoch, and a revision on every result.
				st.Epoch = 1
				for _, r := range st.Services {
					r.Rev = 1
				}
				collectors, err := s.sel.Collectors()
				if err != nil {
					b.Fatal(err)
				}
				exp := NewExporter(logger, fixedState{st}, collectors...).WithNode("node-1")
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				if err := exp.WriteText(context.Background(), io.Discard, textFormat, nil, nil); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportAllocs()
				for b.Loop() {
					if err := exp.WriteText(context.Background(), io.Discard, textFormat, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				runtime.KeepAlive(exp)
				// After the loop: its first round deletes what was reported before it.
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "kept-B/service")
			})
		}
	}
}

// BenchmarkGzipScrape: compressing the text of a scrape of 1,000 Services (default collectors), written in
// GzipBlock writes as WriteText's buffer makes them, by the compressor the handler uses (Gzip: no state kept)
// and by the standard library's BestSpeed, either kept between scrapes and Reset (what the handler did before)
// or made anew per scrape. ratio is the text's size over the compressed size; kept-B the heap a compressor
// holds between two scrapes (after the collections between them, with a kept compressor still referenced),
// and B/op what a scrape allocates after those collections.
func BenchmarkGzipScrape(b *testing.B) {
	exp, reader, rulesAt := benchExporter(b, 1000, DefaultSelection())
	reader.Snap = rulesAt(time.Unix(1700000000, 0))
	var text bytes.Buffer
	if err := exp.WithNode("node-1").WriteText(context.Background(), &text, textFormat, nil, nil); err != nil {
		b.Fatal(err)
	}
	body := text.Bytes()
	type compressor interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	stdlib := func(w io.Writer) compressor {
		gz, err := stdgzip.NewWriterLevel(w, stdgzip.BestSpeed)
		if err != nil {
			b.Fatal(err)
		}
		return gz
	}
	for _, c := range []struct {
		name string
		open func(io.Writer) compressor
		kept bool
	}{
		{"compressor=stateless", func(w io.Writer) compressor { return Gzip(w) }, false},
		{"compressor=stdlib-bestspeed-kept", stdlib, true},
		{"compressor=stdlib-bestspeed-new", stdlib, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			var out bytes.Buffer
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			gz := c.open(&out)
			scrapeOnce := func() {
				out.Reset()
				if c.kept {
					gz.Reset(&out)
				} else {
					gz = c.open(&out)
				}
				for p := body; len(p) > 0; {
					n := min(len(p), GzipBlock)
					if _, err := gz.Write(p[:n]); err != nil {
						b.Fatal(err)
					}
					p = p[n:]
				}
				if err := gz.Close(); err != nil {
					b.Fatal(err)
				}
			}
			scrapeOnce()
			if !c.kept {
				gz = nil // made anew per scrape: only what it left in pools outlives the scrape
			}
			// Two collections: a sync.Pool keeps what was put in it through one.
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			kept := int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(out.Cap())
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				// As between two scrapes 15 s apart, collections empty the pools (a sync.Pool keeps what was
				// put in it through one): B/op is then what a scrape allocates on a node.
				b.StopTimer()
				runtime.GC()
				runtime.GC()
				b.StartTimer()
				scrapeOnce()
			}
			b.ReportMetric(float64(len(body))/float64(out.Len()), "ratio")
			b.ReportMetric(float64(max(kept, 0)), "kept-B")
			runtime.KeepAlive(gz)
		})
	}
}
