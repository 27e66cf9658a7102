package alerts

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/alerts/dashquery"
	"github.com/localtraffic/localtraffic-exporter/alerts/metricset"
)

// standardSeries are series Prometheus itself attaches to every target; rules may use them.
var standardSeries = map[string]bool{"up": true}

// outsideSeries are another exporter's series a rule may read, each with the exporter that exports it; README.md
// states each dependency (TestReadmeNamesOutsideSeries).
var outsideSeries = map[string]string{
	// LocalTrafficExporterNotScraped: which nodes run an exporter pod. Nothing the exporter exports can say
	// which node has no scrape target: a node without one exports nothing.
	"kube_pod_info": "kube-state-metrics",
}

// allowedOutside reports whether the query at where may read name, another exporter's series: rules only, not the
// dashboards (a panel would be empty without kube-state-metrics).
func allowedOutside(where, name string) bool {
	return outsideSeries[name] != "" && strings.HasPrefix(where, "rule ")
}

// everyQuery returns every PromQL expression of the rules and dashboards, keyed by where it is.
func everyQuery(t *testing.T, root string) (queries map[string]string, recorded map[string]bool) {
	t.Helper()
	groups, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	queries = map[string]string{}
	recorded = map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded[r.Record] = true
			}
			queries["rule "+g.Name+"/"+name] = r.Expr
		}
	}
	dashboards, err := DashboardFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dashboards {
		data, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashquery.Queries(data)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		for _, q := range qs {
			queries[d+" "+q.Where] = dashquery.Expand(q.Expr)
		}
	}
	return queries, recorded
}

// Every metric an alert, a recording rule or a dashboard query names must be one the exporter exports (package
// metricset, which the exporter's own tests keep equal to the code), a recording rule's output, or a series
// Prometheus adds itself. A typo or a renamed metric otherwise gives an alert that can never fire and a panel
// that is silently empty.
func TestQueriesUseExportedMetrics(t *testing.T) {
	queries, recorded := everyQuery(t, repoRoot(t))
	if len(queries) < 20 {
		t.Fatalf("found only %d queries; the rule files or dashboards were not read", len(queries))
	}
	for _, p := range unexportedMetrics(queries, recorded, metricset.Exporter()) {
		t.Error(p)
	}
}

// The check above fails on a rule naming a metric the exporter does not export.
func TestUnexportedMetricCaught(t *testing.T) {
	queries := map[string]string{
		"rule g/Typo":    `localtraffic_blackhole == 1 and on (node) localtraffic_blackholes == 1`,
		"rule g/Renamed": `localtraffic_blackhole_source == 1`,
		"rule g/Record":  `max by (node) (node:localtraffic_blackhole:max) or up == 0`,
		"rule g/Empty":   `vector(1)`,
	}
	got := unexportedMetrics(queries, map[string]bool{"node:localtraffic_blackhole:max": true}, metricset.Exporter())
	sort.Strings(got)
	want := []string{
		`rule g/Empty: "vector(1)" selects no metric`,
		"rule g/Renamed: metric localtraffic_blackhole_source is neither exported nor recorded by a rule",
		"rule g/Typo: metric localtraffic_blackholes is neither exported nor recorded by a rule",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// unexportedMetrics lists the queries that select no metric, and each metric a query names that is neither in
// exported, recorded by a rule nor a standard series.
func unexportedMetrics(queries map[string]string, recorded map[string]bool, exported metricset.Set) []string {
	var out []string
	for where, expr := range queries {
		names, err := MetricNames(expr)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if len(names) == 0 {
			out = append(out, fmt.Sprintf("%s: %q selects no metric", where, expr))
		}
		for _, n := range names {
			if _, ok := exported.ForSeries(n); !ok && !recorded[n] && !standardSeries[n] && !allowedOutside(where, n) {
				out = append(out, fmt.Sprintf("%s: metric %s is neither exported nor recorded by a rule", where, n))
			}
		}
	}
	return out
}

// A recording rule nothing reads is dead weight in every Prometheus that loads it.
func TestRecordingRulesAreUsed(t *testing.T) {
	queries, recorded := everyQuery(t, repoRoot(t))
	used := map[string]bool{}
	for where, expr := range queries {
		names, err := MetricNames(expr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, n := range names {
			used[n] = true
		}
	}
	for r := range recorded {
		if !used[r] {
			t.Errorf("recording rule %s is used by no alert, rule or dashboard", r)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		want    []string
		wantErr bool
	}{
		{expr: `up{job="x"} == 0`, want: []string{"up"}},
		{expr: `max by (node) (a) == 1 and on (node) (b{c="d"} or c_total)`, want: []string{"a", "b", "c_total"}},
		{expr: `sum(rate(x_total[5m])) / count({__name__="y", k="v"})`, want: []string{"x_total", "y"}},
		{expr: `absent(up{job="localtraffic-exporter"})`, want: []string{"up"}},
		{expr: `time() - vector(1)`, want: []string{}},
		{expr: `{__name__=~"localtraffic_.*"}`, wantErr: true},
		{expr: `sum(`, wantErr: true},
	} {
		got, err := MetricNames(tc.expr)
		if (err != nil) != tc.wantErr {
			t.Errorf("MetricNames(%q) error = %v, want error %v", tc.expr, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("MetricNames(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}
