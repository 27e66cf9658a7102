package alerts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var (
	alertName   = regexp.MustCompile(`^LocalTraffic(?:[A-Z][a-z0-9]*)+$`)
	recordName  = regexp.MustCompile(`^[a-z_]+:localtraffic_[a-z0-9_]+:[a-z0-9_]+$`)
	runbookHead = regexp.MustCompile(`(?m)^## (\S+)\s*$`)
)

// The house style (kubernetes-mixin): CamelCase names, a for: on every alert, a severity of critical, warning
// or info, a static summary (a blackhole alert's names its reason), a templated description naming the node,
// and a runbook_url pointing at the alert's own runbook entry; recording rules named level:metric:operations.
func TestAlertStyle(t *testing.T) {
	root := repoRoot(t)
	groups, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile(filepath.Join(root, RunbooksPath))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range runbookHead.FindAllStringSubmatch(string(runbooks), -1) {
		headings[m[1]] = true
	}
	alerts := map[string]bool{}
	severities := map[string]int{}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				if !recordName.MatchString(r.Record) {
					t.Errorf("recording rule %s: want level:localtraffic_metric:operations", r.Record)
				}
				continue
			}
			name := r.Alert
			if alerts[name] {
				t.Errorf("alert %s defined twice", name)
			}
			alerts[name] = true
			if !alertName.MatchString(name) {
				t.Errorf("alert %s: want a CamelCase name starting with LocalTraffic", name)
			}
			if time.Duration(r.For) <= 0 {
				t.Errorf("alert %s: no for:", name)
			}
			sev := r.Labels["severity"]
			switch sev {
			case "critical", "warning", "info":
				severities[sev]++
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", name, sev)
			}
			a := r.Annotations
			// A blackhole alert keeps the reason its page rests on (by ..., reason) and names it in its summary,
			// the one templated part a summary may have; its first_action follows the reason (README.md's
			// reason table, TestReadmeReasonTable).
			blackhole := strings.Contains(r.Expr, "localtraffic_blackhole_reason") || strings.Contains(r.Expr, "localtraffic_blackhole_critical")
			const reasonRef = "{{ $labels.reason }}"
			summary := a["summary"]
			if blackhole {
				if !regexp.MustCompile(`\bby \([^)]*\breason\)`).MatchString(r.Expr) || !strings.Contains(summary, reasonRef) || a["first_action"] == "" {
					t.Errorf("alert %s: a blackhole alert keeps the reason label, names it in its summary and has a first_action: %q", name, summary)
				}
				summary = strings.ReplaceAll(summary, reasonRef, "")
			}
			if summary == "" || strings.Contains(summary, "{{") {
				t.Errorf("alert %s: summary must be static (but for a blackhole alert's reason) and non-empty: %q", name, a["summary"])
			}
			// absent() has no labels to name; a per-Service alert (by cluster, namespace and Service, no node) names
			// the Service and its nodes from a query; every other alert is about a node.
			expr := strings.TrimSpace(r.Expr)
			perService := strings.HasPrefix(expr, "sum by (cluster, namespace, service") || strings.HasPrefix(expr, "count by (cluster, namespace, service")
			switch {
			case strings.Contains(r.Expr, "absent("):
			case perService:
				if !strings.Contains(a["description"], "$labels.namespace") || !strings.Contains(a["description"], "$labels.service") ||
					!strings.Contains(a["description"], ".Labels.node") {
					t.Errorf("alert %s: a per-Service alert whose description does not name the Service and its nodes: %q", name, a["description"])
				}
			case !strings.Contains(a["description"], "$labels.node"):
				t.Errorf("alert %s: description does not name the node: %q", name, a["description"])
			}
			if strings.Contains(r.Expr, "service") && !strings.Contains(r.Expr, "absent(") &&
				strings.Contains(r.Expr, "by (cluster, node, namespace, service)") &&
				(!strings.Contains(a["description"], "$labels.namespace") || !strings.Contains(a["description"], "$labels.service")) {
				t.Errorf("alert %s: a per-Service alert whose description does not name namespace and Service", name)
			}
			if want := RunbookBaseURL + "#" + strings.ToLower(name); a["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", name, a["runbook_url"], want)
			}
			if !headings[name] {
				t.Errorf("alert %s: no heading \"## %s\" in %s", name, name, RunbooksPath)
			}
			for k := range a {
				if k != "summary" && k != "description" && k != "runbook_url" && (k != "first_action" || !blackhole) {
					t.Errorf("alert %s: unexpected annotation %s", name, k)
				}
			}
		}
	}
	for h := range headings {
		if !alerts[h] {
			t.Errorf("%s has an entry %q for no alert", RunbooksPath, h)
		}
	}
	if severities["critical"] == 0 || severities["warning"] == 0 {
		t.Errorf("severities %v: want critical pages and warning tickets", severities)
	}
}

type ruleTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert has promtool cases where it fires — with its exact labels and all its annotations — and where
// it must not fire yet; and every test file loads all rule files (alerts use the recording rules).
func TestEveryAlertHasFiringAndPendingCases(t *testing.T) {
	root := repoRoot(t)
	groups, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, RuleTestGlob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule test files %s: %v", RuleTestGlob, err)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rt ruleTestFile
		if err := yaml.Unmarshal(data, &rt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(rt.RuleFiles) != len(RuleFiles) {
			t.Errorf("%s: rule_files %v, want all of %v", f, rt.RuleFiles, RuleFiles)
		}
		for _, tc := range rt.Tests {
			for _, art := range tc.AlertRuleTests {
				if len(art.ExpAlerts) == 0 {
					quiet[art.Alertname]++
					continue
				}
				firing[art.Alertname]++
				for _, a := range art.ExpAlerts {
					if a.ExpLabels["severity"] == "" {
						t.Errorf("%s: %s: expected alert without its severity label", f, art.Alertname)
					}
					for _, k := range []string{"summary", "description", "runbook_url"} {
						if a.ExpAnnotations[k] == "" {
							t.Errorf("%s: %s: expected alert without annotation %s", f, art.Alertname, k)
						}
					}
					if a.ExpLabels["reason"] != "" && a.ExpAnnotations["first_action"] == "" {
						t.Errorf("%s: %s: expected blackhole alert (reason %s) without its first_action", f, art.Alertname, a.ExpLabels["reason"])
					}
				}
			}
		}
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if firing[r.Alert] == 0 {
				t.Errorf("alert %s: no promtool case where it fires", r.Alert)
			}
			if quiet[r.Alert] == 0 {
				t.Errorf("alert %s: no promtool case where it must not fire (yet)", r.Alert)
			}
		}
	}
}
