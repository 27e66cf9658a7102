package collector

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

func encode(t *testing.T, mfs []*dto.MetricFamily) string {
	t.Helper()
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// The direct exposition the handler serves is, byte for byte, what a pedantic Registry makes of the same
// exporter's Collector: dual-stack Services of both types, rules with drops and counters, every collector,
// the node label, with and without a metric list. (The clock-dependent duration series are dropped.)
func TestDirectExpositionEqualsRegistry(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 503, Local: 0})
	lb := scrapetest.LBService(scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true))
	lb.Name, lb.HealthCheckNodePort = "shop", hcnp
	np := scrapetest.NodePortService(0, scrapetest.Family(v4, 0, true), scrapetest.Family(v6, 1, true))
	snap := kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{np, lb}}
	drop := kernelrules.PortState{Programmed: true, Drop: true, DropPackets: 5, Drops: []kernelrules.DropRule{{Port: 30090, Packets: 5, Counted: true}}}
	serve := kernelrules.PortState{Programmed: true, LocalEndpoints: 1}
	ports := func(name string) kernelrules.ServicePort {
		return kernelrules.ServicePort{Namespace: "kubelings", Name: name, Port: "http", Protocol: "TCP"}
	}
	reader := &scrapetest.Reader{Snap: kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000, 0),
		map[string]map[kernelrules.ServicePort]kernelrules.PortState{
			kernelrules.FamilyIPv4: {ports("checkout"): drop, ports("shop"): serve},
			kernelrules.FamilyIPv6: {ports("checkout"): serve, ports("shop"): drop},
		})}
	noDurations, err := NewMetricFilter("", ".*_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	onlySome, err := NewMetricFilter("localtraffic_blackhole,localtraffic_rules_.*", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*MetricFilter{noDurations, onlySome} {
		exp := NewExporter(discard(), scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: snap}, RuleReader: reader,
			Addrs: scrapetest.Addrs{"127.0.0.1", "::1"}, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: 2 * time.Second,
			ExternalIPWindow: time.Minute, Logger: discard()}), everyCollector()...).WithNode("node-1").WithFilter(f)
		got := sameViaRegistry(t, exp)
		if !bytes.Contains([]byte(got), []byte(`localtraffic_blackhole{namespace="kubelings",node="node-1",service="checkout"} 1`)) {
			t.Errorf("the scenario lost its blackhole: the comparison proves little\n%s", got)
		}
	}
}

// textFormat is the format the handler negotiates for a Prometheus without special wishes.
var textFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

// sameViaRegistry scrapes exp through a pedantic registry and through the direct exposition, fails the test
// where the two differ, and returns the direct one's text.
func sameViaRegistry(t *testing.T, exp *Exporter) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp.Bind(context.Background()))
	viaRegistry, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want, got := encode(t, viaRegistry), encode(t, gatherText(t, exp))
	if got != want {
		t.Errorf("direct exposition differs from the registry's\n--- registry\n%s\n--- direct\n%s", want, got)
	}
	return got
}

// gatherText is e's scrape as the handler writes it, read back into client_model objects with every family's
// series in label order (the writer keeps each Service's series together, not in one order per family).
func gatherText(t testing.TB, e *Exporter) []*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	if err := e.WriteText(context.Background(), &b, textFormat, nil, nil); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	byName, err := parser.TextToMetricFamilies(&b)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, b.String())
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		sortSeries(mf.Metric)
		mfs = append(mfs, mf)
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
