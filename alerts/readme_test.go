package alerts

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// alertRow is one row of README.md's alert table: the alert, its severity and its for: (with keep_firing_for).
type alertRow struct{ severity, forText string }

// tableLines returns the body lines of the markdown table whose header line starts with header (the separator
// line left out).
func tableLines(text, header string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && !strings.HasPrefix(line, "|"):
			in = false
		case in && !strings.HasPrefix(line, "|---"):
			out = append(out, line)
		}
	}
	return out
}

// readmeAlertTable parses README.md's "| Alert | Severity | for | Fires when |" table.
func readmeAlertTable(t *testing.T, readme string) map[string]alertRow {
	t.Helper()
	row := regexp.MustCompile("^\\| `(\\w+)` \\| (\\w+) \\| ([^|]+) \\|")
	rows := map[string]alertRow{}
	for _, line := range tableLines(readme, "| Alert | Severity | for |") {
		if m := row.FindStringSubmatch(line); m != nil {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("README.md lists %s twice", m[1])
			}
			rows[m[1]] = alertRow{m[2], strings.TrimSpace(m[3])}
		}
	}
	return rows
}

// TestReadmeListsEveryAlert holds README.md's alert table to alerts.yaml: one row per alert, no row for an alert
// that does not exist, and each row's severity and for: (and keep_firing_for, "(keeps firing 5m)") the rule's.
func TestReadmeListsEveryAlert(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := readmeAlertTable(t, string(readme))
	data, err := os.ReadFile(filepath.Join("alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert         string            `yaml:"alert"`
				For           string            `yaml:"for"`
				KeepFiringFor string            `yaml:"keep_firing_for"`
				Labels        map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			row, ok := rows[r.Alert]
			if !ok {
				t.Errorf("README.md's alert table has no row for %s", r.Alert)
				continue
			}
			want := r.For
			if r.KeepFiringFor != "" {
				want += " (keeps firing " + r.KeepFiringFor + ")"
			}
			if row.severity != r.Labels["severity"] || row.forText != want {
				t.Errorf("README.md: %s | %s | %s, alerts.yaml: %s | %s", r.Alert, row.severity, row.forText, r.Labels["severity"], want)
			}
		}
	}
	for name := range rows {
		if !slices.Contains(alerts, name) {
			t.Errorf("README.md's alert table lists %s, which alerts.yaml does not define", name)
		}
	}
	if len(alerts) == 0 {
		t.Fatal("alerts.yaml defines no alert")
	}
}

// TestReadmeNamesOutsideSeries: every series of another exporter a rule reads (outsideSeries) is named in
// README.md with its exporter, so an install knows what the alert needs, and is read by some rule, so the
// allowance does not outlive the alert.
func TestReadmeNamesOutsideSeries(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	queries, _ := everyQuery(t, repoRoot(t))
	for name, exporter := range outsideSeries {
		if !strings.Contains(string(readme), "`"+name+"`") || !strings.Contains(string(readme), exporter) {
			t.Errorf("README.md does not say that an alert reads %s of %s", name, exporter)
		}
		read := false
		for where, expr := range queries {
			names, err := MetricNames(expr)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			read = read || (strings.HasPrefix(where, "rule ") && slices.Contains(names, name))
		}
		if !read {
			t.Errorf("outsideSeries allows %s, which no rule reads", name)
		}
	}
}
