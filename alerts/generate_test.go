package alerts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The committed PrometheusRule and dashboard ConfigMap must be exactly what the generator writes now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := repoRoot(t)
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(root, f.Path))
		if err != nil {
			t.Fatalf("%v (run `cd alerts && go run ./cmd/generate`)", err)
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s is out of date with alerts/ and dashboards/: run `cd alerts && go run ./cmd/generate` and commit the result", f.Path)
		}
	}
}

// dashboards/ holds only generated dashboards: a hand-written JSON file there would never be drift-checked.
func TestDashboardsAreGenerated(t *testing.T) {
	root := repoRoot(t)
	onDisk, err := DashboardFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	generated, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range generated {
		want = append(want, d.Path)
	}
	if strings.Join(onDisk, " ") != strings.Join(want, " ") {
		t.Errorf("dashboards/ has %q, the generator writes %q: add new dashboards in alerts/dashgen", onDisk, want)
	}
}

// The PrometheusRule carries every rule of the sources unchanged, and the ConfigMap every dashboard byte for
// byte, so the drift check above compares against a faithful rendering.
func TestGeneratedContent(t *testing.T) {
	root := repoRoot(t)
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Groups []map[string]any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(files[0].Content, &rule); err != nil {
		t.Fatal(err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" || rule.Metadata.Name == "" {
		t.Errorf("PrometheusRule header: %+v", rule)
	}
	var want []map[string]any
	for _, rel := range RuleFiles {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		var src struct {
			Groups []map[string]any `yaml:"groups"`
		}
		if err := yaml.Unmarshal(data, &src); err != nil {
			t.Fatal(err)
		}
		want = append(want, src.Groups...)
	}
	gotY, _ := yaml.Marshal(rule.Spec.Groups)
	wantY, _ := yaml.Marshal(want)
	if !bytes.Equal(gotY, wantY) {
		t.Errorf("PrometheusRule groups differ from the rule files:\n%s\nwant:\n%s", gotY, wantY)
	}
	// The generated rule object must itself be loadable by Prometheus (after the operator unwraps it).
	asFile, _ := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if _, err := ParseRules(asFile); err != nil {
		t.Errorf("PrometheusRule groups do not parse as a rule file: %v", err)
	}

	var cm struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(files[1].Content, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap: kind %q, labels %v; want ConfigMap with grafana_dashboard: \"1\"", cm.Kind, cm.Metadata.Labels)
	}
	dashboards, err := DashboardFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != len(dashboards) {
		t.Errorf("ConfigMap has %d dashboards, dashboards/ has %d", len(cm.Data), len(dashboards))
	}
	for _, d := range dashboards {
		src, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data[filepath.Base(d)]; got != strings.TrimRight(string(src), "\n") {
			t.Errorf("ConfigMap key %s differs from %s", filepath.Base(d), d)
		}
	}
}
