package alerts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/scale.md stays true to the rules and the mixin: every alert and recording rule it names exists, every
// mixin field and _config key it names exists, and it keeps the sections the lead fills in from other work.
func TestScaleDoc(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, ScaleDocPath))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	groupNames := map[string]bool{}
	for _, g := range groups {
		groupNames[g.Name] = true
		for _, r := range g.Rules {
			names[r.Alert+r.Record] = true
		}
	}
	text := string(doc)
	cited := 0
	for _, m := range regexp.MustCompile(`\bLocalTraffic[A-Z][A-Za-z]+\b`).FindAllString(text, -1) {
		cited++
		if !names[m] {
			t.Errorf("%s names alert %s, which alerts/alerts.yaml does not have", ScaleDocPath, m)
		}
	}
	for _, m := range regexp.MustCompile(`\b[a-z_]+:localtraffic_[a-z0-9_]+:[a-z0-9_]+\b`).FindAllString(text, -1) {
		cited++
		if !names[m] {
			t.Errorf("%s names recording rule %s, which alerts/rules.yaml does not have", ScaleDocPath, m)
		}
	}
	for _, m := range regexp.MustCompile("`(localtraffic-exporter[a-z-]*)`").FindAllStringSubmatch(text, -1) {
		if !groupNames[m[1]] {
			t.Errorf("%s names rule group %s, which the rule files do not have", ScaleDocPath, m[1])
		}
	}
	if cited < 10 {
		t.Errorf("%s cites only %d alerts and recording rules", ScaleDocPath, cited)
	}
	mixin, err := os.ReadFile(filepath.Join(root, "mixin", "mixin.libsonnet"))
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(root, "mixin", "config.libsonnet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"prometheusAlerts", "prometheusGlobalAlerts", "prometheusRules"} {
		if strings.Contains(text, field) && !strings.Contains(string(mixin), field+"+::") {
			t.Errorf("%s names mixin field %s, which mixin/mixin.libsonnet does not define", ScaleDocPath, field)
		}
	}
	for _, m := range regexp.MustCompile(`_config\+:: \{ ([a-zA-Z]+):`).FindAllStringSubmatch(text, -1) {
		if !strings.Contains(string(config), m[1]+":") {
			t.Errorf("%s sets _config.%s, which mixin/config.libsonnet does not have", ScaleDocPath, m[1])
		}
	}
	for _, h := range []string{"## Series", "## Prometheus memory", "## Exporter memory", "## API server load",
		"## CPU per scrape", "## Sharding", "## Remote-write", "## Recording rules that aggregate per Service"} {
		if !strings.Contains(text, "\n"+h) {
			t.Errorf("%s has no section %q", ScaleDocPath, h)
		}
	}
}
