package alerts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/localtraffic/localtraffic-exporter/alerts/dashgen"
)

// Paths relative to the repository root.
const (
	DashboardDir           = "dashboards"
	PrometheusRulePath     = "deploy/prometheus-operator/prometheusrule.yaml"
	DashboardConfigMapPath = "deploy/prometheus-operator/dashboard-configmap.yaml"
	// The Helm chart cannot read files outside its directory: the generator copies the rules and dashboards in.
	HelmChartDir      = "deploy/helm/localtraffic-exporter"
	HelmRuleSpecPath  = HelmChartDir + "/files/prometheus-rule-spec.yaml"
	HelmDashboardsDir = HelmChartDir + "/files/dashboards"
	// The monitoring mixin (mixin/mixin.libsonnet) imports these JSON renderings: jsonnet-bundler vendors the
	// mixin directory alone, so it cannot reach alerts/ or dashboards/.
	MixinAlertsPath    = "mixin/generated/prometheus_alerts.json"
	MixinRulesPath     = "mixin/generated/prometheus_rules.json"
	MixinDashboardsDir = "mixin/generated/dashboards"
	// The Alertmanager route and inhibit rule (one notification per Service), and its rendering for the mixin.
	AlertmanagerConfigPath = "alerts/alertmanager.yaml"
	MixinAlertmanagerPath  = "mixin/generated/alertmanager.json"
)

// RuleFiles are the Prometheus rule files, in evaluation order (recording rules first: alerts use them).
var RuleFiles = []string{"alerts/rules.yaml", "alerts/alerts.yaml"}

// The objects' identity in the cluster: the namespace and labels of deploy/base.
const (
	deployNamespace = "localtraffic-system"
	objectName      = "localtraffic-exporter"
)

// Artefact is one generated file.
type Artefact struct {
	Path    string // relative to the repository root
	Content []byte
}

// Generate renders every generated file from the sources under root: the PrometheusRule, the dashboards (built
// from Go, package dashgen), their ConfigMap, and the Helm chart's copies of the rules and dashboards. The first
// two artefacts are the PrometheusRule and the ConfigMap.
func Generate(root string) ([]Artefact, error) {
	rule, err := PrometheusRule(root)
	if err != nil {
		return nil, err
	}
	dashboards, err := Dashboards()
	if err != nil {
		return nil, err
	}
	cm, err := DashboardConfigMap(dashboards)
	if err != nil {
		return nil, err
	}
	spec, err := HelmRuleSpec(root)
	if err != nil {
		return nil, err
	}
	out := []Artefact{{PrometheusRulePath, rule}, {DashboardConfigMapPath, cm}, {HelmRuleSpecPath, spec}}
	out = append(out, dashboards...)
	for _, d := range dashboards {
		out = append(out,
			Artefact{Path: HelmDashboardsDir + "/" + filepath.Base(d.Path), Content: d.Content},
			Artefact{Path: MixinDashboardsDir + "/" + filepath.Base(d.Path), Content: d.Content})
	}
	for _, m := range []struct{ src, dst string }{{RuleFiles[1], MixinAlertsPath}, {RuleFiles[0], MixinRulesPath}} {
		j, err := ruleFileJSON(root, m.src)
		if err != nil {
			return nil, err
		}
		out = append(out, Artefact{Path: m.dst, Content: j})
	}
	am, err := yamlFileJSON(root, AlertmanagerConfigPath)
	if err != nil {
		return nil, err
	}
	return append(out, Artefact{Path: MixinAlertmanagerPath, Content: am}), nil
}

// ruleFileJSON renders one rule file as JSON ({"groups": [...]}), the form jsonnet imports.
func ruleFileJSON(root, rel string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, fmt.Errorf("read rule file: %w", err)
	}
	if _, err := ParseRules(data); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return yamlFileJSON(root, rel)
}

// yamlFileJSON renders a YAML file as indented JSON, comments dropped.
func yamlFileJSON(root, rel string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("%s: encode JSON: %w", rel, err)
	}
	return buf.Bytes(), nil
}

// Dashboards are the generated dashboards, each at its path under DashboardDir.
func Dashboards() ([]Artefact, error) {
	lt, err := dashgen.JSON()
	if err != nil {
		return nil, err
	}
	return []Artefact{{Path: DashboardDir + "/localtraffic-exporter.json", Content: lt}}, nil
}

type metadata struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

func objectMeta(name string, extra map[string]string) metadata {
	labels := map[string]string{
		"app.kubernetes.io/name":    objectName,
		"app.kubernetes.io/part-of": objectName,
	}
	for k, v := range extra {
		labels[k] = v
	}
	return metadata{Name: name, Namespace: deployNamespace, Labels: labels}
}

// PrometheusRule renders a monitoring.coreos.com/v1 PrometheusRule holding every group of RuleFiles, in order.
// The rule files are validated with Prometheus' own parser first, so an invalid rule never reaches a cluster.
func PrometheusRule(root string) ([]byte, error) {
	groups, err := ruleGroups(root)
	if err != nil {
		return nil, err
	}
	obj := struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       struct {
			Groups *yaml.Node `yaml:"groups"`
		} `yaml:"spec"`
	}{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule", Metadata: objectMeta(objectName, nil)}
	obj.Spec.Groups = groups
	header := fmt.Sprintf("# Code generated by alerts/cmd/generate from %s. DO NOT EDIT.\n", strings.Join(RuleFiles, ", "))
	return encodeYAML(header, obj)
}

// HelmRuleSpec renders the PrometheusRule's spec alone, for the Helm chart's template to include.
func HelmRuleSpec(root string) ([]byte, error) {
	groups, err := ruleGroups(root)
	if err != nil {
		return nil, err
	}
	spec := struct {
		Groups *yaml.Node `yaml:"groups"`
	}{groups}
	header := fmt.Sprintf("# Code generated by alerts/cmd/generate from %s. DO NOT EDIT.\n", strings.Join(RuleFiles, ", "))
	return encodeYAML(header, spec)
}

// ruleGroups is every group of RuleFiles, in order, validated, without the sources' comments.
func ruleGroups(root string) (*yaml.Node, error) {
	groups := &yaml.Node{Kind: yaml.SequenceNode}
	for _, rel := range RuleFiles {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, fmt.Errorf("read rule file: %w", err)
		}
		if _, err := ParseRules(data); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		g := mappingValue(doc.Content[0], "groups")
		if g == nil || g.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("%s: no groups list", rel)
		}
		groups.Content = append(groups.Content, g.Content...)
	}
	// The sources' comments explain choices to the rule author; the generated object carries the rules only.
	stripComments(groups)
	return groups, nil
}

// DashboardConfigMap renders one ConfigMap with every dashboard as a data key, labelled for the Grafana sidecar
// (grafana_dashboard: "1", the kube-prometheus-stack default).
func DashboardConfigMap(dashboards []Artefact) ([]byte, error) {
	data := &yaml.Node{Kind: yaml.MappingNode}
	for _, d := range dashboards {
		content := d.Content
		if !json.Valid(content) {
			return nil, fmt.Errorf("%s: invalid JSON", d.Path)
		}
		data.Content = append(data.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: filepath.Base(d.Path)},
			&yaml.Node{Kind: yaml.ScalarNode, Style: yaml.LiteralStyle, Value: string(bytes.TrimRight(content, "\n"))},
		)
	}
	obj := struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   metadata   `yaml:"metadata"`
		Data       *yaml.Node `yaml:"data"`
	}{APIVersion: "v1", Kind: "ConfigMap", Metadata: objectMeta(objectName+"-dashboards", map[string]string{"grafana_dashboard": "1"}), Data: data}
	header := "# Code generated by alerts/cmd/generate from alerts/dashgen. DO NOT EDIT.\n"
	return encodeYAML(header, obj)
}

func encodeYAML(header string, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	return buf.Bytes(), nil
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func stripComments(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		stripComments(c)
	}
}
