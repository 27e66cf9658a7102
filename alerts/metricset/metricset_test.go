package metricset

import (
	"slices"
	"testing"
)

func TestForSeries(t *testing.T) {
	set := NewSet([]Metric{
		{Name: "localtraffic_blackhole", Type: Gauge},
		{Name: "localtraffic_probe_duration_seconds", Type: Histogram},
		{Name: "localtraffic_read_seconds", Type: Summary},
	})
	for series, want := range map[string]string{
		"localtraffic_blackhole":                     "localtraffic_blackhole",
		"localtraffic_blackhole_count":               "",
		"localtraffic_probe_duration_seconds_bucket": "localtraffic_probe_duration_seconds",
		"localtraffic_probe_duration_seconds_count":  "localtraffic_probe_duration_seconds",
		"localtraffic_read_seconds_sum":              "localtraffic_read_seconds",
		"localtraffic_read_seconds_bucket":           "",
		"localtraffic_other":                         "",
		"localtraffic_blackholes":                    "",
	} {
		m, ok := set.ForSeries(series)
		if ok != (want != "") || m.Name != want {
			t.Errorf("ForSeries(%s) = %q, %v; want %q", series, m.Name, ok, want)
		}
	}
}

// The generated table holds the exporter's metrics, each once, with its type and default set, and node first
// among its labels.
func TestAll(t *testing.T) {
	all := All()
	if len(all) < 20 {
		t.Fatalf("only %d metrics", len(all))
	}
	if set := Exporter(); len(set) != len(all) {
		t.Errorf("%d metrics, %d names", len(all), len(set))
	}
	for _, m := range all {
		if m.Type == "" || m.Default == "" || m.Collector == "" || m.Help == "" || len(m.Labels) == 0 || m.Labels[0] != "node" {
			t.Errorf("incomplete: %+v", m)
		}
	}
	optIn := OptIn()
	for _, want := range []string{"localtraffic_service_info", "localtraffic_has_local_endpoint", "localtraffic_health_check_result"} {
		if !slices.Contains(optIn, want) {
			t.Errorf("OptIn() = %v lacks %s", optIn, want)
		}
	}
	if slices.Contains(optIn, "localtraffic_blackhole") {
		t.Errorf("OptIn() = %v holds the default localtraffic_blackhole", optIn)
	}
}
