package eventwriter

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsDoc holds docs/metrics.md's table of the writer's metrics to the code: the same metrics, types,
// labels (with the node label the exporter adds) and help, in name order.
func TestMetricsDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- event-writer-metrics:start")
	table, _, ok2 := strings.Cut(table, "<!-- event-writer-metrics:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/metrics.md has no event writer table between its markers")
	}
	var want strings.Builder
	want.WriteString("| Metric | Type | Labels | Description |\n|---|---|---|---|\n")
	for _, m := range MetricSpecs() {
		labels := []string{"`node`"}
		for _, l := range m.Labels {
			labels = append(labels, "`"+l+"`")
		}
		want.WriteString("| `" + m.Name + "` | " + m.Type + " | " + strings.Join(labels, ", ") + " | " + m.Help + " |\n")
	}
	_, got, _ := strings.Cut(table, "\n")
	if got != want.String() {
		t.Errorf("docs/metrics.md's event writer table differs from the code:\n--- doc\n%s--- code\n%s", got, want.String())
	}
}

// The specs are what the writer registers: each metric's name and help, and a type that matches.
func TestMetricSpecsAreRegistered(t *testing.T) {
	w, err := New(testConfig(), Clients{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collectors()...)
	var names []string
	for _, m := range MetricSpecs() {
		names = append(names, m.Name)
	}
	n, err := testutil.GatherAndCount(reg, names...)
	if err != nil {
		t.Fatal(err)
	}
	// events_total has its three results from the start; every other metric one series.
	if n != len(MetricSpecs())-1+3 {
		t.Errorf("gathered %d series of %v", n, names)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range MetricSpecs() {
			if f.GetName() == m.Name && (f.GetHelp() != m.Help || !strings.EqualFold(f.GetType().String(), m.Type)) {
				t.Errorf("%s registered as %s %q, specified %s %q", m.Name, f.GetType(), f.GetHelp(), m.Type, m.Help)
			}
		}
	}
}
