package alerts

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// healthChecked are the metrics exported by default only for Services with a health check node port that the
// rules and dashboards may use anyway, each with why a query on it still works on the defaults.
var healthChecked = map[string]string{
	// LocalTrafficOutOfRotationNodeDropsTraffic is about nodes a load balancer's health check took out of
	// rotation: exactly the Services that have the counter by default. A NodePort Service's drops in rotation
	// are LocalTrafficBlackhole's page already; the dashboard's drop panels say they show health-checked
	// Services unless --collector.rules.per-port is on.
	"localtraffic_rules_dropped_packets_total": "out-of-rotation drops happen where a health check decides rotation",
}

// Every metric an alert, a recording rule or a dashboard query reads is exported by an exporter started with
// its default flags (docs/metrics.md's Default column, which the collector's docs test keeps equal to the
// code). An alert on an opt-in metric never fires on a default install, and a panel on one stays empty.
func TestQueriesUseDefaultMetrics(t *testing.T) {
	root := repoRoot(t)
	documented, err := DocumentedMetrics(filepath.Join(root, MetricsDocPath))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := MetricDefaults(filepath.Join(root, MetricsDocPath))
	if err != nil {
		t.Fatal(err)
	}
	queries, recorded := everyQuery(t, root)
	checked := 0
	for where, expr := range queries {
		names, err := MetricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		for _, n := range names {
			if recorded[n] || standardSeries[n] {
				continue // a recording rule is itself one of the queries checked here
			}
			base := BaseMetric(documented, n)
			checked++
			switch d, ok := defaults[base]; {
			case !ok:
				t.Errorf("%s: metric %s has no Default in %s", where, base, MetricsDocPath)
			case d == "no":
				t.Errorf("%s: metric %s is opt-in (Default no in %s): the query needs a flag a default install lacks", where, base, MetricsDocPath)
			case d == "health-checked" && healthChecked[base] == "":
				t.Errorf("%s: metric %s is on by default only for health-checked Services; say why the query works with that in healthChecked", where, base)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d metric uses", checked)
	}
	for n := range healthChecked {
		if defaults[n] != "health-checked" {
			t.Errorf("healthChecked lists %s, whose Default is %q", n, defaults[n])
		}
	}
}

func TestMetricDefaults(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "metrics.md")
	text := strings.Join([]string{
		"# Metrics",
		"| result | meaning |",
		"|---|---|",
		"| `ok` | HTTP 200 |",
		"",
		"| Metric | Type | Labels | Description | Stability | Collector | Default |",
		"|---|---|---|---|---|---|---|",
		"| `localtraffic_blackhole` | gauge | `node`, `namespace`, `service` | 1 when ... | stable | services | yes |",
		"| `localtraffic_service_info` | gauge | `node` | always 1 | stable | service_details | no |",
		"| `localtraffic_rules_dropped_packets_total` | counter | `node` | drops | stable | rules | health-checked |",
		"",
		"Text mentioning `localtraffic_other` outside a table.",
	}, "\n")
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := MetricDefaults(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"localtraffic_blackhole":                   "yes",
		"localtraffic_service_info":                "no",
		"localtraffic_rules_dropped_packets_total": "health-checked",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MetricDefaults = %v, want %v", got, want)
	}
	for name, bad := range map[string]string{
		"no Default column": "| Metric | Type | Labels | Description | Stability |\n|---|---|---|---|---|\n| `a` | gauge | | | stable |\n",
		"unknown value":     "| Metric | Type | Default |\n|---|---|---|\n| `a` | gauge | maybe |\n",
		"no table":          "# nothing\n",
	} {
		p := filepath.Join(t.TempDir(), "m.md")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := MetricDefaults(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
