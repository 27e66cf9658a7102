package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

func testExporter(view scrape.APIView, reader scrape.DataplaneReader) *Exporter {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, RuleReader: reader, KubeProxyAddress: scrapetest.NoAddress,
		ProbeTimeout: time.Second, Logger: logger})
	return NewExporter(logger, g, everyCollector()...)
}

// scrapeSetup is a scrape's inputs, for the tests that render what a gatherer gathered from fakes (what the
// gatherer decides is tested in scrape).
type scrapeSetup struct {
	view      scrape.APIView
	reader    scrape.DataplaneReader
	addrs     scrapetest.Addrs
	selection *Selection // nil: every collector, every series
}

// scrape registers an exporter over a fresh gatherer of the setup's inputs.
func (s scrapeSetup) scrape(t *testing.T) *prometheus.Registry {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: s.view, RuleReader: s.reader, Addrs: s.addrs, KubeProxyAddress: scrapetest.NoAddress,
		ProbeTimeout: 2 * time.Second, ExternalIPWindow: 10 * time.Minute, Logger: logger})
	collectors := everyCollector()
	if s.selection != nil {
		var err error
		if collectors, err = s.selection.Collectors(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(logger, g, collectors...).Bind(context.Background()))
	return reg
}

func checkoutSnapshot(local int) kubeview.Snapshot {
	return kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(local)}}
}

// One scrape takes one API snapshot and one rules read, and every collector renders them: blackhole and
// rules_mismatch speak of the same read.
func TestOneStatePerScrape(t *testing.T) {
	view := &scrapetest.View{Snap: checkoutSnapshot(1)}
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4},
		time.Unix(1700000000, 0), map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, DropPackets: 3,
			Drops: []kernelrules.DropRule{{Port: 30090, Packets: 3, Counted: true}}}})}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(testExporter(view, reader).Bind(context.Background()))
	want := `localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 1`
	if got := series(t, reg, "localtraffic_blackhole", "localtraffic_rules_mismatch"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if n, m := view.Snapshots.Load(), reader.Reads.Load(); n != 1 || m != 1 {
		t.Errorf("one scrape took %d API snapshots and %d rules reads, want 1 and 1", n, m)
	}
}

// A failed input counts against the collectors that render it, and only those.
func TestInputFailureCountsAgainstItsCollectors(t *testing.T) {
	view := &scrapetest.View{Snap: checkoutSnapshot(0), Err: kubeview.ErrNotSynced}
	reader := &scrapetest.Reader{Err: errors.New("iptables-save: exit status 1")}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(testExporter(view, reader).Bind(context.Background()))
	want := `localtraffic_scrape_collector_success{collector="announcers"} 0
localtraffic_scrape_collector_success{collector="arrivals"} 1
localtraffic_scrape_collector_success{collector="dataplane"} 1
localtraffic_scrape_collector_success{collector="exposure"} 1
localtraffic_scrape_collector_success{collector="informers"} 1
localtraffic_scrape_collector_success{collector="kube_proxy"} 0
localtraffic_scrape_collector_success{collector="node"} 1
localtraffic_scrape_collector_success{collector="rules"} 0
localtraffic_scrape_collector_success{collector="service_arrivals"} 0
localtraffic_scrape_collector_success{collector="service_details"} 0
localtraffic_scrape_collector_success{collector="service_exposure"} 1
localtraffic_scrape_collector_success{collector="services"} 0
localtraffic_scrape_collector_success{collector="state_file"} 1`
	if got := series(t, reg, "localtraffic_scrape_collector_success"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// series gathers reg and returns `name{l="v",...} value` for every sample of the named metrics, sorted.
func series(t *testing.T, reg *prometheus.Registry, names ...string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []string
	for _, mf := range mfs {
		if !want[mf.GetName()] {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			if len(ls) == 0 {
				out = append(out, fmt.Sprintf("%s %g", mf.GetName(), v))
				continue
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(ls, ","), v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func expectSeries(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(want), "\n")
	sort.Strings(lines)
	if got, want := series(t, reg, names...), strings.Join(lines, "\n"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func expectContains(t *testing.T, reg *prometheus.Registry, name, line string) {
	t.Helper()
	if got := series(t, reg, name); !strings.Contains(got+"\n", line+"\n") {
		t.Errorf("missing %s in\n%s", line, got)
	}
}
