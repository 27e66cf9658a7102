package alerts

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"

	"github.com/localtraffic/localtraffic-exporter/alerts/metricset"
)

// blackholeReasons are the values of localtraffic_blackhole_reason's reason label (verdict's Reasons);
// TestReadmeReasonTable checks each against the metric's help, which the exporter's docs test keeps equal to the
// code.
var blackholeReasons = []string{"health_check_ignored", "udp_flow_pinned", "traffic_lost", "announced_here",
	"health_check_passing", "no_traffic_seen", "not_observed"}

// reasonRow is one row of README.md's reason table.
type reasonRow struct{ reason, alert, severity, action string }

// readmeReasonTable parses README.md's "| Reason | Alert | Severity | First action |" table; backticks (code
// formatting) are dropped from the first action.
func readmeReasonTable(t *testing.T, readme string) []reasonRow {
	t.Helper()
	row := regexp.MustCompile("^\\| `(\\w+)` \\| `(\\w+)` \\| (\\w+) \\| (.+) \\|$")
	var rows []reasonRow
	for _, line := range tableLines(readme, "| Reason | Alert | Severity | First action |") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("README.md's reason table: cannot read %q", line)
			continue
		}
		rows = append(rows, reasonRow{m[1], m[2], m[3], strings.ReplaceAll(m[4], "`", "")})
	}
	return rows
}

// alertReasons are the blackhole reasons an alert pages on: the values its localtraffic_blackhole_reason
// selectors match, followed through the recording rules it reads.
func alertReasons(t *testing.T, expr string, records map[string]string) []string {
	t.Helper()
	e, err := promQL().ParseExpr(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if rec, ok := records[vs.Name]; ok {
			out = append(out, alertReasons(t, rec, records)...)
			return nil
		}
		if vs.Name != "localtraffic_blackhole_reason" {
			return nil
		}
		for _, r := range blackholeReasons {
			if matchesAll(vs.LabelMatchers, labels.FromStrings(model.MetricNameLabel, vs.Name, "reason", r)) {
				out = append(out, r)
			}
		}
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out)
}

func matchesAll(ms []*labels.Matcher, l labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

// expandAnnotation expands an alert's annotation template as Prometheus' rule manager does, for an alert with
// the given labels (value 1; queries return nothing).
func expandAnnotation(t *testing.T, alert, text string, lbls map[string]string) string {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(lbls, nil, "", promql.Sample{F: 1})
	noQuery := func(context.Context, string, time.Time) (promql.Vector, error) { return nil, nil }
	out, err := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+alert, data, model.Time(0), noQuery, nil, nil).Expand()
	if err != nil {
		t.Fatalf("%s: expand %q: %v", alert, text, err)
	}
	return out
}

// TestReadmeReasonTable holds README.md's reason table to the rules: one row per blackhole reason and alert that
// pages on it, with the alert's severity and its first_action as the alert renders it for that reason (node NODE,
// Service NS/SVC), and no other row. Every reason the exporter exports is paged by exactly one per-node alert:
// one alert per misconfiguration.
func TestReadmeReasonTable(t *testing.T) {
	doc := metricset.Exporter()["localtraffic_blackhole_reason"].Doc
	for _, r := range blackholeReasons {
		if !regexp.MustCompile(`\b` + r + `\b`).MatchString(doc) {
			t.Errorf("reason %s is not in localtraffic_blackhole_reason's description (docs/metrics.md): %q", r, doc)
		}
	}
	groups, err := LoadRules(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]string{}
	var alerts []rulefmt.Rule
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = r.Expr
			} else {
				alerts = append(alerts, r)
			}
		}
	}
	want := map[reasonRow]bool{}
	perNode := map[string][]string{}
	for _, a := range alerts {
		for _, r := range alertReasons(t, a.Expr, records) {
			lbls := map[string]string{"reason": r, "node": "NODE", "namespace": "NS", "service": "SVC"}
			want[reasonRow{r, a.Alert, a.Labels["severity"], expandAnnotation(t, a.Alert, a.Annotations["first_action"], lbls)}] = true
			if strings.Contains(a.Expr, "by (cluster, node,") {
				perNode[r] = append(perNode[r], a.Alert)
			}
		}
	}
	for _, r := range blackholeReasons {
		if len(perNode[r]) != 1 {
			t.Errorf("reason %s pages through per-node alerts %v, want exactly one", r, perNode[r])
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	got := map[reasonRow]bool{}
	for _, row := range readmeReasonTable(t, string(readme)) {
		if got[row] {
			t.Errorf("README.md's reason table lists %s / %s twice", row.reason, row.alert)
		}
		got[row] = true
		if !want[row] {
			t.Errorf("README.md's reason table row %+v: not what the rules say", row)
		}
	}
	for row := range want {
		if !got[row] {
			t.Errorf("README.md's reason table has no row | `%s` | `%s` | %s | %s |", row.reason, row.alert, row.severity, row.action)
		}
	}
	if len(want) < len(blackholeReasons) {
		t.Fatalf("found %d reason rows in the rules, fewer than the %d reasons", len(want), len(blackholeReasons))
	}
}

// The table check has teeth: a row whose action differs from the rendered first_action, or a missing row,
// is caught by the same comparison (the rows are compared whole), and the parser reads a row as written.
func TestReadmeReasonTableParses(t *testing.T) {
	rows := readmeReasonTable(t, "x\n\n| Reason | Alert | Severity | First action |\n|---|---|---|---|\n| `traffic_lost` | `LocalTrafficBlackhole` | critical | Run `kubectl label node NODE a=b`. |\n\nafter\n")
	want := []reasonRow{{"traffic_lost", "LocalTrafficBlackhole", "critical", "Run kubectl label node NODE a=b."}}
	if !slices.Equal(rows, want) {
		t.Errorf("got %+v, want %+v", rows, want)
	}
	if got := expandAnnotation(t, "A", `{{ if eq $labels.reason "x" }}X on {{ $labels.node }}{{ else }}other{{ end }}`, map[string]string{"reason": "x", "node": "NODE"}); got != "X on NODE" {
		t.Errorf("expandAnnotation: %q", got)
	}
	if got := alertReasons(t, `max by (reason) (localtraffic_blackhole_reason{reason=~"traffic_lost|not_observed"}) or r:x:max`,
		map[string]string{"r:x:max": `localtraffic_blackhole_reason{reason="announced_here"}`}); !slices.Equal(got, []string{"announced_here", "not_observed", "traffic_lost"}) {
		t.Errorf("alertReasons: %v", got)
	}
}
