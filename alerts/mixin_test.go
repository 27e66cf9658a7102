package alerts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-jsonnet"
	"go.yaml.in/yaml/v3"
)

// renderMixin evaluates mixin/mixin.libsonnet with go-jsonnet, plus overrides (a jsonnet object mixed in, e.g.
// `{_config+:: {...}}`), and returns its three outputs as plain JSON values.
func renderMixin(t *testing.T, overrides string) (alerts, rules, dashboards map[string]any) {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(repoRoot(t), "mixin")}})
	if overrides == "" {
		overrides = "{}"
	}
	out, err := vm.EvaluateAnonymousSnippet("render.jsonnet", `
local m = (import 'mixin.libsonnet') + `+overrides+`;
{ alerts: m.prometheusAlerts, rules: m.prometheusRules, dashboards: m.grafanaDashboards }`)
	if err != nil {
		t.Fatalf("jsonnet: %v", err)
	}
	var r struct{ Alerts, Rules, Dashboards map[string]any }
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r.Alerts, r.Rules, r.Dashboards
}

// plain reads a YAML or JSON file into the same generic form encoding/json gives.
func plain(t *testing.T, rel string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMixinEqualsSources: with the default _config the mixin renders exactly alerts/alerts.yaml,
// alerts/rules.yaml and the generated dashboard.
func TestMixinEqualsSources(t *testing.T) {
	alerts, rules, dashboards := renderMixin(t, "")
	if want := plain(t, RuleFiles[1]); !reflect.DeepEqual(alerts, want) {
		t.Errorf("prometheusAlerts differs from %s (run make generate)", RuleFiles[1])
	}
	if want := plain(t, RuleFiles[0]); !reflect.DeepEqual(rules, want) {
		t.Errorf("prometheusRules differs from %s (run make generate)", RuleFiles[0])
	}
	files, err := DashboardFiles(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(dashboards) != len(files) {
		t.Errorf("grafanaDashboards has %d dashboards, dashboards/ %d", len(dashboards), len(files))
	}
	for _, f := range files {
		got, ok := dashboards[filepath.Base(f)]
		if !ok {
			t.Errorf("grafanaDashboards has no %s", filepath.Base(f))
			continue
		}
		if want := plain(t, f); !reflect.DeepEqual(got, want) {
			t.Errorf("grafanaDashboards[%q] differs from %s", filepath.Base(f), f)
		}
	}
}

// TestMixinConfig: _config's selector reaches every query that selects the exporter's job, and nothing else
// changes; the dashboard's uid and tags follow _config too.
func TestMixinConfig(t *testing.T) {
	const sel = `job="monitoring/localtraffic"`
	alerts, rules, dashboards := renderMixin(t, `{_config+:: {localtrafficExporterSelector: '`+sel+`', grafanaDashboardUid: 'lt', grafanaDashboardTags: ['x']}}`)
	def, defRules, defDash := renderMixin(t, "")
	// One recording selects on job (the coverage alert's targets): with the selector put back, the defaults.
	gotRules, _ := json.Marshal(rules)
	wantRules, _ := json.Marshal(defRules)
	if n := strings.Count(string(gotRules), strings.ReplaceAll(sel, `"`, `\"`)); n != 1 {
		t.Errorf("the selector appears %d times in the recording rules, want the coverage alert's target recording", n)
	}
	if strings.ReplaceAll(string(gotRules), strings.ReplaceAll(sel, `"`, `\"`), `job=\"localtraffic-exporter\"`) != string(wantRules) {
		t.Error("the recording rules differ from the defaults by more than the selector")
	}
	got, _ := json.Marshal(alerts)
	if strings.Contains(string(got), `job=\"localtraffic-exporter\"`) {
		t.Error("an alert still selects job=\"localtraffic-exporter\"")
	}
	if n := strings.Count(string(got), strings.ReplaceAll(sel, `"`, `\"`)); n < 2 {
		t.Errorf("the selector appears %d times in the alerts, want the Down and Absent alerts' exprs", n)
	}
	// With the selector put back, the alerts are the defaults again: only the selector changed.
	back := strings.ReplaceAll(string(got), strings.ReplaceAll(sel, `"`, `\"`), `job=\"localtraffic-exporter\"`)
	want, _ := json.Marshal(def)
	if back != string(want) {
		t.Error("the alerts differ from the defaults by more than the selector")
	}
	d := dashboards["localtraffic-exporter.json"].(map[string]any)
	if d["uid"] != "lt" || !reflect.DeepEqual(d["tags"], []any{"x"}) {
		t.Errorf("dashboard uid %v, tags %v", d["uid"], d["tags"])
	}
	db, _ := json.Marshal(d)
	if !strings.Contains(string(db), strings.ReplaceAll(sel, `"`, `\"`)) || strings.Contains(string(db), `job=\"localtraffic-exporter\"`) {
		t.Error("the dashboard's up{} queries do not use the configured selector")
	}
	_ = defDash
}

// The entry points users render (jsonnet alerts.jsonnet, ...) evaluate to the mixin's fields.
func TestMixinEntryPoints(t *testing.T) {
	alerts, rules, dashboards := renderMixin(t, "")
	for file, want := range map[string]map[string]any{"alerts.jsonnet": alerts, "rules.jsonnet": rules, "dashboards.jsonnet": dashboards} {
		vm := jsonnet.MakeVM()
		vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(repoRoot(t), "mixin")}})
		out, err := vm.EvaluateFile(filepath.Join(repoRoot(t), "mixin", file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s does not render the mixin's field (%v)", file, err)
		}
	}
	var jb struct {
		Version      int   `json:"version"`
		Dependencies []any `json:"dependencies"`
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "mixin", "jsonnetfile.json"))
	if err != nil || json.Unmarshal(data, &jb) != nil || jb.Version != 1 {
		t.Errorf("mixin/jsonnetfile.json: %v %+v", err, jb)
	}
}

// TestMixinSharded: with _config.shardedPrometheus the alerts split into the groups a shard evaluates
// (prometheusAlerts) and the cross-node ones for a global ruler (prometheusGlobalAlerts), together exactly the
// unsharded alerts; the recording rules, which every shard evaluates, do not change.
func TestMixinSharded(t *testing.T) {
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(repoRoot(t), "mixin")}})
	render := func(sharded string) (alerts, global, rules []any) {
		out, err := vm.EvaluateAnonymousSnippet("sharded.jsonnet", `
local m = (import 'mixin.libsonnet') + {_config+:: {shardedPrometheus: `+sharded+`}};
{ alerts: m.prometheusAlerts.groups, global: m.prometheusGlobalAlerts.groups, rules: m.prometheusRules.groups }`)
		if err != nil {
			t.Fatalf("jsonnet: %v", err)
		}
		var r struct{ Alerts, Global, Rules []any }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Alerts, r.Global, r.Rules
	}
	all, noGlobal, rules := render("false")
	if len(noGlobal) != 0 {
		t.Errorf("unsharded: prometheusGlobalAlerts has %d groups, want none", len(noGlobal))
	}
	shard, global, shardRules := render("true")
	if !reflect.DeepEqual(rules, shardRules) {
		t.Error("sharded: the recording rules changed")
	}
	names := func(gs []any) (out []string) {
		for _, g := range gs {
			out = append(out, g.(map[string]any)["name"].(string))
		}
		return out
	}
	if got := names(global); !reflect.DeepEqual(got, []string{"localtraffic-exporter-cross-node"}) {
		t.Errorf("sharded: global groups %v", got)
	}
	if got, want := len(shard)+len(global), len(all); got != want || len(shard) == 0 {
		t.Errorf("sharded: %d shard + %d global groups, unsharded %d", len(shard), len(global), want)
	}
	byName := map[string]any{}
	for _, g := range append(append([]any{}, shard...), global...) {
		byName[g.(map[string]any)["name"].(string)] = g
	}
	for _, g := range all {
		if n := g.(map[string]any)["name"].(string); !reflect.DeepEqual(byName[n], g) {
			t.Errorf("sharded: group %s differs from the unsharded one", n)
		}
	}
	// The global groups hold exactly the alerts that look across nodes.
	for _, g := range global {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if a := r.(map[string]any)["alert"]; a != "LocalTrafficServiceSingleNode" && a != "LocalTrafficServiceBlackhole" &&
				a != "LocalTrafficServiceUnannounced" && a != "LocalTrafficExporterNotScraped" &&
				a != "LocalTrafficServiceRolloutLoss" && a != "LocalTrafficServiceRolloutLossCritical" {
				t.Errorf("global group has %v", a)
			}
		}
	}
}

// TestMixinDaemonSetName: _config's DaemonSet name reaches the coverage recording's kube_pod_info selector, and
// nothing else changes.
func TestMixinDaemonSetName(t *testing.T) {
	_, rules, _ := renderMixin(t, `{_config+:: {localtrafficDaemonSetName: 'lt-prod'}}`)
	_, defRules, _ := renderMixin(t, "")
	got, _ := json.Marshal(rules)
	want, _ := json.Marshal(defRules)
	const renamed, dflt = `created_by_name=\"lt-prod\"`, `created_by_name=\"localtraffic-exporter\"`
	if strings.Count(string(got), renamed) != 1 || strings.Contains(string(got), dflt) {
		t.Errorf("the recording rules select the pods of another DaemonSet than lt-prod")
	}
	if strings.ReplaceAll(string(got), renamed, dflt) != string(want) {
		t.Error("the recording rules differ from the defaults by more than the DaemonSet's name")
	}
}

// renderField evaluates one field of the mixin with overrides, as plain JSON.
func renderField(t *testing.T, overrides, field string) map[string]any {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(repoRoot(t), "mixin")}})
	out, err := vm.EvaluateAnonymousSnippet("field.jsonnet", "((import 'mixin.libsonnet') + "+overrides+")."+field)
	if err != nil {
		t.Fatalf("jsonnet %s: %v", field, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMixinAlertmanagerConfig: the mixin's alertmanagerConfig is alerts/alertmanager.yaml with the default
// _config, and groups and inhibits by _config.clusterLabel otherwise.
func TestMixinAlertmanagerConfig(t *testing.T) {
	if got, want := renderField(t, "{}", "alertmanagerConfig"), plain(t, AlertmanagerConfigPath); !reflect.DeepEqual(got, want) {
		t.Errorf("alertmanagerConfig differs from %s (run make generate)", AlertmanagerConfigPath)
	}
	got, _ := json.Marshal(renderField(t, "{_config+:: {clusterLabel: 'k8s_cluster'}}", "alertmanagerConfig"))
	if strings.Contains(string(got), `"cluster"`) || strings.Count(string(got), `"k8s_cluster"`) != 3 {
		t.Errorf("with clusterLabel k8s_cluster: %s", got)
	}
}

// TestMixinRunbookURLPattern: every alert's runbook_url follows _config.runbookURLPattern.
func TestMixinRunbookURLPattern(t *testing.T) {
	alerts := renderField(t, "{_config+:: {runbookURLPattern: 'https://runbooks.example.com/lt/%s'}}", "prometheusAlerts")
	n := 0
	for _, g := range alerts["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			want := "https://runbooks.example.com/lt/" + strings.ToLower(rule["alert"].(string))
			if got := rule["annotations"].(map[string]any)["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %v, want %s", rule["alert"], got, want)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no alerts rendered")
	}
}

// TestMixinClusterLabel: with _config.clusterLabel every expression aggregates and matches by that label and
// every template names it; with "cluster" put back everything is the default again, so nothing else changed.
func TestMixinClusterLabel(t *testing.T) {
	const l = "k8s_cluster"
	over := "{_config+:: {clusterLabel: '" + l + "'}}"
	word := regexp.MustCompile(`\bcluster\b`)
	for _, field := range []string{"prometheusAlerts", "prometheusRules"} {
		got := renderField(t, over, field)
		def := renderField(t, "{}", field)
		for _, g := range got["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				rule := r.(map[string]any)
				if word.MatchString(rule["expr"].(string)) {
					t.Errorf("%s %v%v: expr still names cluster:\n%s", field, rule["alert"], rule["record"], rule["expr"])
				}
				if a, ok := rule["annotations"].(map[string]any); ok {
					for k, v := range a {
						if s := v.(string); strings.Contains(s, "$labels.cluster") || strings.Contains(s, ",cluster=%q") {
							t.Errorf("%s %v: annotation %s still names cluster: %s", field, rule["alert"], k, s)
						}
					}
				}
			}
		}
		b, _ := json.Marshal(got)
		back := strings.NewReplacer("("+l+", ", "(cluster, ", "("+l+")", "(cluster)", "$labels."+l, "$labels.cluster", ","+l+"=%q", ",cluster=%q").Replace(string(b))
		want, _ := json.Marshal(def)
		if back != string(want) {
			t.Errorf("%s: differs from the defaults by more than the cluster label", field)
		}
		if !strings.Contains(string(b), "("+l+", ") {
			t.Errorf("%s: the label %s appears nowhere", field, l)
		}
	}
}
