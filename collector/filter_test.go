package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

func TestMetricFilterLists(t *testing.T) {
	allow, err := NewMetricFilter("localtraffic_blackhole, localtraffic_rules_.*", "")
	if err != nil {
		t.Fatal(err)
	}
	deny, err := NewMetricFilter("", "localtraffic_rules_.*")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		allow, denied bool
	}{
		{"localtraffic_blackhole", true, false},
		{"localtraffic_blackhole_source_info", false, false}, // anchored: a prefix is no match
		{"localtraffic_rules_mismatch", true, true},
		{"xlocaltraffic_rules_mismatch", false, false},
	} {
		if got := allow.Keep(c.name); got != c.allow {
			t.Errorf("allowlist Keep(%s) = %v", c.name, got)
		}
		if got := deny.Keep(c.name); got == c.denied {
			t.Errorf("denylist Keep(%s) = %v", c.name, got)
		}
	}
	if f, err := NewMetricFilter("", ""); f != nil || err != nil || !f.Keep("anything") {
		t.Errorf("no lists: %v, %v", f, err)
	}
	for _, bad := range [][2]string{{"a", "b"}, {"(", ""}, {"", " , "}} {
		if _, err := NewMetricFilter(bad[0], bad[1]); err == nil {
			t.Errorf("NewMetricFilter(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// The exporter with a denylist sends and describes none of the denied metrics, and the rest unchanged: a
// pedantic registry checks that what is collected was described.
func TestExporterFilter(t *testing.T) {
	f, err := NewMetricFilter("", "localtraffic_rules_.*,localtraffic_scrape_collector_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	view := &scrapetest.View{Snap: checkoutSnapshot(0)}
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4},
		time.Unix(1700000000, 0), map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true}})}
	full := prometheus.NewPedanticRegistry()
	full.MustRegister(testExporter(view, reader).Bind(context.Background()))
	filtered := prometheus.NewPedanticRegistry()
	filtered.MustRegister(testExporter(view, reader).WithFilter(f).Bind(context.Background()))
	names := func(reg *prometheus.Registry) map[string]bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	got, want := names(filtered), names(full)
	for name := range want {
		denied := strings.HasPrefix(name, "localtraffic_rules_") || name == "localtraffic_scrape_collector_duration_seconds"
		if got[name] == denied {
			t.Errorf("%s exported=%v with the denylist", name, got[name])
		}
	}
	if !want["localtraffic_rules_mismatch"] {
		t.Fatal("the unfiltered scrape lacks localtraffic_rules_mismatch: the test proves nothing")
	}
}
