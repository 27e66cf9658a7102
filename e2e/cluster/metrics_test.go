package cluster

import (
	"strings"
	"testing"
)

const sample = `# HELP localtraffic_blackhole x
# TYPE localtraffic_blackhole gauge
localtraffic_blackhole{namespace="kubelings",node="node-2",service="checkout"} 1
localtraffic_blackhole{namespace="kubelings",node="node-2",service="web"} 0
# TYPE localtraffic_rules_dropped_packets_total counter
localtraffic_rules_dropped_packets_total{namespace="kubelings",node="node-2",port="http",service="checkout"} 7
`

func TestMetricsValueAndExpect(t *testing.T) {
	m, err := ParseMetrics(sample)
	if err != nil {
		t.Fatal(err)
	}
	v, ok, err := m.Value("localtraffic_blackhole", Labels{"service": "checkout"})
	if err != nil || !ok || v != 1 {
		t.Errorf("Value(checkout) = %v, %v, %v; want 1, true, nil", v, ok, err)
	}
	if _, _, err := m.Value("localtraffic_blackhole", Labels{"node": "node-2"}); err == nil {
		t.Error("Value with a selector matching two series: want an error")
	}
	if _, ok, _ := m.Value("localtraffic_blackhole", Labels{"service": "nope"}); ok {
		t.Error("Value(nope): want not found")
	}
	if _, ok, _ := m.Value("localtraffic_blackhole", Labels{"service": "checkout", "missing": "x"}); ok {
		t.Error("a selector label the series lacks must not match")
	}
	if err := m.Expect("localtraffic_rules_dropped_packets_total", Labels{"port": "http"}, 7); err != nil {
		t.Error(err)
	}
	if err := m.Expect("localtraffic_blackhole", Labels{"service": "web"}, 1); err == nil {
		t.Error("Expect with the wrong value: want an error")
	}
	if err := m.ExpectAbsent("localtraffic_blackhole", Labels{"service": "web"}); err == nil {
		t.Error("ExpectAbsent of a present series: want an error")
	}
	if err := m.ExpectAbsent("localtraffic_service_info", nil); err != nil {
		t.Error(err)
	}
	if got := m.Grep("checkout", "blackhole"); !strings.Contains(got, `service="checkout"} 1`) || strings.Contains(got, "web") {
		t.Errorf("Grep = %q", got)
	}
}

func TestParseMetricsRejectsGarbage(t *testing.T) {
	if _, err := ParseMetrics("localtraffic_blackhole{ 1\n"); err == nil {
		t.Error("want a parse error")
	}
}

// TestMetricsRecordingNotesLookups: a recording Metrics notes every selection its checks make, through Value,
// Expect, ExpectAbsent and Series, passed or failed, and its copies note into the same log; a plain one notes none.
func TestMetricsRecordingNotesLookups(t *testing.T) {
	plain, err := ParseMetrics(sample)
	if err != nil {
		t.Fatal(err)
	}
	m := plain.Recording()
	_ = m.Expect("localtraffic_blackhole", Labels{"service": "checkout"}, 0) // fails: still noted
	cp := m
	_ = cp.ExpectAbsent("localtraffic_blackhole_reason", Labels{"service": "web", "node": "node-2"})
	_, _, _ = m.Value("localtraffic_rules_dropped_packets_total", Labels{"port": "http"})
	got := m.Lookups()
	want := []Lookup{
		{"localtraffic_blackhole", Labels{"service": "checkout"}},
		{"localtraffic_blackhole_reason", Labels{"service": "web", "node": "node-2"}},
		{"localtraffic_rules_dropped_packets_total", Labels{"port": "http"}},
	}
	if len(got) != len(want) {
		t.Fatalf("Lookups() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || len(got[i].Labels) != len(want[i].Labels) {
			t.Errorf("lookup %d = %v, want %v", i, got[i], want[i])
		}
		for k, v := range want[i].Labels {
			if got[i].Labels[k] != v {
				t.Errorf("lookup %d = %v, want %v", i, got[i], want[i])
			}
		}
	}
	_ = plain.Expect("localtraffic_blackhole", Labels{"service": "web"}, 0)
	if l := plain.Lookups(); len(l) != 0 {
		t.Errorf("a Metrics not recording noted %v", l)
	}
}
