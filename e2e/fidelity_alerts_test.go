package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// alertsOnLiveSeries runs the shipped rule files through `promtool test rules` (Prometheus' own rule engine)
// with one node's live scrape as its input: every sample the exporter exported, held for 20 minutes, with the
// labels the shipped scrape configuration adds. Each alert in want must fire at 15 minutes with exactly the
// given nodes (none: it must stay quiet). It says, with the real rules and the real exporter's series, which
// alerts a node in that state raises, without waiting out their for: on a real Prometheus.
func alertsOnLiveSeries(t *testing.T, ctx context.Context, m cluster.Metrics, node string, want map[string][]string) {
	t.Helper()
	repo := alertsRepoDir(t)
	var input []map[string]string
	instance := node + ":9746"
	for name, fam := range m.Families {
		if !strings.HasPrefix(name, "localtraffic_") {
			continue
		}
		for _, s := range fam.Metric {
			v := cluster.Value(s)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			labels := []string{fmt.Sprintf("instance=%q", instance), `job="localtraffic-exporter"`}
			for _, l := range s.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			input = append(input, map[string]string{
				"series": name + "{" + strings.Join(labels, ",") + "}",
				"values": strconv.FormatFloat(v, 'f', -1, 64) + "+0x20", // no exponent: promtool's series notation

			})
		}
	}
	input = append(input, map[string]string{
		"series": fmt.Sprintf(`up{instance=%q,job="localtraffic-exporter",node=%q}`, instance, node), "values": "1+0x20"})

	var tests []map[string]any
	for alert, nodes := range want {
		exp := []map[string]any{}
		for _, n := range nodes {
			labels, annotations, err := expectedAlert(repo, alert, map[string]string{"node": n})
			if err != nil {
				fatalln(t, err)
			}
			exp = append(exp, map[string]any{"exp_labels": labels, "exp_annotations": annotations})
		}
		tests = append(tests, map[string]any{"eval_time": "15m", "alertname": alert, "exp_alerts": exp})
	}
	var rules []string
	for _, f := range alertRuleFiles {
		rules = append(rules, filepath.Join(repo, f))
	}
	doc := map[string]any{
		"rule_files":          rules,
		"evaluation_interval": "1m",
		"tests":               []map[string]any{{"interval": "1m", "input_series": input, "alert_rule_test": tests}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		fatalln(t, err)
	}
	file := filepath.Join(t.TempDir(), "live.test.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		fatalln(t, err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, promtoolPath(t, ctx, repo), "test", "rules", file).CombinedOutput()
	if err != nil {
		errorf(t, "the shipped alerts on %s's live series are not what is wanted (%v):\n%s", node, err, out)
		return
	}
	t.Logf("promtool: the shipped alerts on %s's live series: %v", node, want)
}

// expectedAlert renders an alert's labels and annotations as Prometheus would for a series with labels, from
// the shipped rule file (Prometheus' template: $labels and $value; the alerts checked here use no functions).
func expectedAlert(repo, alert string, labels map[string]string) (map[string]string, map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(repo, alertRuleFiles[1]))
	if err != nil {
		return nil, nil, err
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := sigsyaml.Unmarshal(data, &rf); err != nil {
		return nil, nil, err
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			outLabels := map[string]string{}
			for k, v := range labels {
				outLabels[k] = v
			}
			for k, v := range r.Labels {
				outLabels[k] = v
			}
			ann := map[string]string{}
			for k, text := range r.Annotations {
				tmpl, err := template.New(k).Option("missingkey=zero").Parse("{{$labels := .Labels}}{{$value := .Value}}" + text)
				if err != nil {
					return nil, nil, fmt.Errorf("%s %s: %w", alert, k, err)
				}
				var b strings.Builder
				if err := tmpl.Execute(&b, map[string]any{"Labels": labels, "Value": 0.0}); err != nil {
					return nil, nil, fmt.Errorf("%s %s: %w", alert, k, err)
				}
				ann[k] = b.String()
			}
			return outLabels, ann, nil
		}
	}
	return nil, nil, fmt.Errorf("no alert %s in %s", alert, alertRuleFiles[1])
}

// promtoolPath is scripts/install-deps.sh's promtool ($PROMTOOL, else $LT_TOOLS_BIN or .tools/bin), installed
// if missing.
func promtoolPath(t *testing.T, ctx context.Context, repo string) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	bin := os.Getenv("LT_TOOLS_BIN")
	if bin == "" {
		bin = filepath.Join(repo, ".tools", "bin")
	}
	p := filepath.Join(bin, "promtool")
	if _, err := os.Stat(p); err != nil {
		if out, err := exec.CommandContext(ctx, filepath.Join(repo, "scripts", "install-deps.sh"), "promtool").CombinedOutput(); err != nil {
			fatalf(t, "scripts/install-deps.sh promtool: %v\n%s", err, out)
		}
	}
	return p
}
