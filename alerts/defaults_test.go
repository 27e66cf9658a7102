package alerts

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/alerts/metricset"
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

// serviceExposureSLO are the opt-in service_exposure collector's metrics the rollout and drain SLO reads (its
// recording rules, LocalTrafficServiceRolloutLoss and its critical twin, the dashboard's exposure panels), each
// with why. The SLO is per Service by nature: the node's default exposure totals cannot say which Service lost
// what, and nothing exported by default counts the attempts a Service's windows saw. Without the collector the
// rules record nothing and the alerts stay silent; README.md and the runbook say it needs
// --collector.service_exposure.
var serviceExposureSLO = map[string]string{
	"localtraffic_service_exposure_attempts_total": "the SLO's numerator: the Service's lost attempts by cause",
	"localtraffic_service_window_attempts_total":   "the SLO's denominator: the attempts its windows saw, served or dropped",
	"localtraffic_service_exposure_seconds_total":  "the dashboard's exposure over time per Service",
	"localtraffic_service_lb_drain_seconds":        "the dashboard's measured drain per Service",
	"localtraffic_service_lb_check_window_seconds": "the dashboard's configured drain beside the measured one",
}

// Every metric an alert, a recording rule or a dashboard query reads is exported by an exporter started with
// its default flags (package metricset's Default, which the collector's docs test keeps equal to the code). An
// alert on an opt-in metric never fires on a default install, and a panel on one stays empty.
func TestQueriesUseDefaultMetrics(t *testing.T) {
	queries, recorded := everyQuery(t, repoRoot(t))
	exported := metricset.Exporter()
	problems, checked := nonDefaultMetrics(queries, recorded, exported, healthChecked, serviceExposureSLO)
	for _, p := range problems {
		t.Error(p)
	}
	if checked < 20 {
		t.Fatalf("checked only %d metric uses", checked)
	}
	for n := range healthChecked {
		if d := exported[n].Default; d != metricset.DefaultHealthChecked {
			t.Errorf("healthChecked lists %s, whose Default is %q", n, d)
		}
	}
	for n := range serviceExposureSLO {
		if m := exported[n]; m.Default != metricset.DefaultNo || m.Collector != "service_exposure" {
			t.Errorf("serviceExposureSLO lists %s, whose Default is %q and collector %q: want an opt-in service_exposure metric", n, m.Default, m.Collector)
		}
	}
}

// The check above fails on a query reading an opt-in metric, or a health-checked one healthChecked does not
// vouch for.
func TestNonDefaultMetricCaught(t *testing.T) {
	queries := map[string]string{
		"rule g/OptIn":         `localtraffic_service_info == 1`,
		"rule g/HealthChecked": `rate(localtraffic_rules_dropped_packets_total[5m]) > 0`,
		"rule g/Default":       `localtraffic_blackhole == 1 and on (node) node:x:max`,
	}
	got, checked := nonDefaultMetrics(queries, map[string]bool{"node:x:max": true}, metricset.Exporter(), nil, serviceExposureSLO)
	sort.Strings(got)
	want := []string{
		"rule g/HealthChecked: metric localtraffic_rules_dropped_packets_total is on by default only for health-checked Services; say why the query works with that in healthChecked",
		"rule g/OptIn: metric localtraffic_service_info is opt-in (Default no): the query needs a flag a default install lacks",
	}
	if !reflect.DeepEqual(got, want) || checked != 3 {
		t.Errorf("checked %d, got\n%s\nwant 3,\n%s", checked, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// nonDefaultMetrics lists each metric a query reads that a default install does not export for every Service it
// applies to (unless vouched for in healthChecked), and counts the metric uses it checked. Recording rules'
// outputs and standard series are skipped: their own expressions are among the queries.
func nonDefaultMetrics(queries map[string]string, recorded map[string]bool, exported metricset.Set, healthChecked, optIn map[string]string) (problems []string, checked int) {
	for where, expr := range queries {
		names, err := MetricNames(expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		for _, n := range names {
			if recorded[n] || standardSeries[n] || allowedOutside(where, n) {
				continue
			}
			checked++
			switch m, ok := exported.ForSeries(n); {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", where, n))
			case m.Default == metricset.DefaultNo && optIn[m.Name] == "":
				problems = append(problems, fmt.Sprintf("%s: metric %s is opt-in (Default no): the query needs a flag a default install lacks", where, m.Name))
			case m.Default == metricset.DefaultHealthChecked && healthChecked[m.Name] == "":
				problems = append(problems, fmt.Sprintf("%s: metric %s is on by default only for health-checked Services; say why the query works with that in healthChecked", where, m.Name))
			}
		}
	}
	return problems, checked
}
