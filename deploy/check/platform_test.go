package check

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// ruleSpec is the rendered PrometheusRule's groups, each rule as a map.
func ruleSpec(t *testing.T, vals string) []map[string]any {
	t.Helper()
	pr := comparable(t, mustRenderChart(t, values(t, "prometheusRule: {enabled: true}\n"+vals)))["PrometheusRule "+namespace+"/"+appName]
	if pr == nil {
		t.Fatalf("no PrometheusRule rendered with %s", vals)
	}
	var rules []map[string]any
	for _, g := range dig(pr, "spec", "groups").([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rules = append(rules, r.(map[string]any))
		}
	}
	return rules
}

// TestChartAlertKnobs: the runbook links point at the installed version's docs (or the given base), named alerts
// are left out (an unknown name fails), and extra labels land on every rule without replacing a rule's own.
func TestChartAlertKnobs(t *testing.T) {
	chrt, err := loader.Load(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatal(err)
	}
	versioned := "https://github.com/localtraffic/localtraffic-exporter/blob/" + chrt.Metadata.AppVersion + "/docs/runbooks.md#"
	defaults := ruleSpec(t, "")
	alerts := 0
	for _, r := range defaults {
		if r["alert"] == nil {
			continue
		}
		alerts++
		url, _ := dig(r, "annotations", "runbook_url").(string)
		if want := versioned + strings.ToLower(r["alert"].(string)); url != want {
			t.Errorf("%s: runbook_url %q, want %q (the chart's appVersion, not main)", r["alert"], url, want)
		}
	}
	if alerts < 10 {
		t.Fatalf("%d alerts rendered", alerts)
	}
	for _, r := range ruleSpec(t, "prometheusRule: {enabled: true, runbookURLBase: 'https://runbooks.example/lt.md/'}") {
		if url, _ := dig(r, "annotations", "runbook_url").(string); r["alert"] != nil && !strings.HasPrefix(url, "https://runbooks.example/lt.md#localtraffic") {
			t.Errorf("%s: runbook_url %q, want the given base", r["alert"], url)
		}
	}

	disabled := ruleSpec(t, "prometheusRule: {enabled: true, disabled: {LocalTrafficExporterDown: true, LocalTrafficExporterAbsent: false}, additionalRuleLabels: {team: platform, severity: none}}")
	if len(disabled) != len(defaults)-1 {
		t.Errorf("%d rules with one alert disabled, %d without", len(disabled), len(defaults))
	}
	for _, r := range disabled {
		if r["alert"] == "LocalTrafficExporterDown" {
			t.Errorf("the disabled alert is still there")
		}
		if dig(r, "labels", "team") != "platform" {
			t.Errorf("%v%v: labels %v, want team=platform", r["alert"], r["record"], r["labels"])
		}
		if r["alert"] != nil && dig(r, "labels", "severity") == "none" {
			t.Errorf("%v: additionalRuleLabels replaced the alert's own severity", r["alert"])
		}
	}
	_, err = renderChart(t, values(t, "prometheusRule: {enabled: true, disabled: {LocalTrafficExporterDwn: true}}"))
	if err == nil || !strings.Contains(err.Error(), "prometheusRule.disabled names LocalTrafficExporterDwn") || !strings.Contains(err.Error(), "LocalTrafficExporterDown") {
		t.Errorf("an unknown alert in prometheusRule.disabled: %v, want an error naming it and the alerts there are", err)
	}
}

// TestChartDashboardNeedsItsRules: the dashboard renders with the chart's rules or with the user's word that
// they are loaded elsewhere, and otherwise fails naming the recording rules it reads.
func TestChartDashboardNeedsItsRules(t *testing.T) {
	_, err := renderChart(t, values(t, "dashboards: {enabled: true}"))
	if err == nil || !strings.Contains(err.Error(), "dashboards.enabled needs the recording rules") ||
		!strings.Contains(err.Error(), "node_namespace_service:localtraffic_verdict:max") || !strings.Contains(err.Error(), "prometheusRule.enabled=true") {
		t.Errorf("the dashboard without its rules: %v, want an error naming the rules and the two ways out", err)
	}
	for _, vals := range []string{"dashboards: {enabled: true}\nprometheusRule: {enabled: true}", "dashboards: {enabled: true, recordingRulesInstalled: true}"} {
		objs := comparable(t, mustRenderChart(t, values(t, vals)))
		if objs["ConfigMap "+namespace+"/"+appName+"-dashboards"] == nil {
			t.Errorf("%s: no dashboard ConfigMap", vals)
		}
	}
}

// TestChartMonitorOptions: the options platform teams set on every chart's monitors land in both, and the
// ServiceMonitor's discovery role can be left to the Prometheus resource.
func TestChartMonitorOptions(t *testing.T) {
	opts := `{enabled: true, interval: 1m, scrapeTimeout: 45s, additionalLabels: {release: kps}, honorLabels: false,
  namespaceSelector: {any: true}, relabelings: [{targetLabel: cluster, replacement: prod}],
  metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}], authorization: {credentials: {name: t, key: token}}}`
	objs := comparable(t, mustRenderChart(t, values(t, "podMonitor: "+opts+"\nserviceMonitor: "+opts+"\n")))
	for kind, eps := range map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"} {
		m := objs[kind+" "+namespace+"/"+appName]
		ep := dig(m, "spec", eps).([]any)[0].(map[string]any)
		got := fmt.Sprintf("%v|%v|%v|%v|%v|%v|%v", ep["interval"], ep["scrapeTimeout"], ep["honorLabels"], dig(m, "metadata", "labels", "release"),
			dig(m, "spec", "namespaceSelector"), ep["relabelings"].([]any)[2], ep["metricRelabelings"])
		want := "1m|45s|false|kps|map[any:true]|map[replacement:prod targetLabel:cluster]|[map[action:drop regex:go_.* sourceLabels:[__name__]]]"
		if got != want {
			t.Errorf("%s: %s\nwant %s", kind, got, want)
		}
	}
	if r := dig(objs["ServiceMonitor "+namespace+"/"+appName], "spec", "serviceDiscoveryRole"); r != "EndpointSlice" {
		t.Errorf("serviceDiscoveryRole %v by default, want EndpointSlice", r)
	}
	sm := comparable(t, mustRenderChart(t, values(t, `serviceMonitor: {enabled: true, serviceDiscoveryRole: ""}`)))["ServiceMonitor "+namespace+"/"+appName]
	if _, ok := dig(sm, "spec").(map[string]any)["serviceDiscoveryRole"]; ok {
		t.Errorf(`serviceDiscoveryRole "" still renders the field (an operator before v0.86.0 refuses it)`)
	}
}

// TestChartNetworkPolicy: off by default; on, the exporter's pods admit the metrics port from the given peers
// and the proxy's health port, nothing else.
func TestChartNetworkPolicy(t *testing.T) {
	for key := range comparable(t, mustRenderChart(t, nil)) {
		if strings.HasPrefix(key, "NetworkPolicy ") {
			t.Errorf("%s rendered by default", key)
		}
	}
	objs := comparable(t, mustRenderChart(t, values(t, "networkPolicy: {enabled: true, metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}")))
	np := objs["NetworkPolicy "+namespace+"/"+appName]
	if np == nil {
		t.Fatalf("no NetworkPolicy: %v", keys(objs))
	}
	ds := objs["DaemonSet "+namespace+"/"+appName]
	if !reflect.DeepEqual(dig(np, "spec", "podSelector", "matchLabels"), dig(ds, "spec", "selector", "matchLabels")) {
		t.Errorf("podSelector %v, the DaemonSet's pods are %v", dig(np, "spec", "podSelector"), dig(ds, "spec", "selector"))
	}
	b, err := sigsyaml.Marshal(dig(np, "spec"))
	if err != nil {
		t.Fatal(err)
	}
	want := `ingress:
- from:
  - namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: monitoring
  ports:
  - port: metrics
    protocol: TCP
- ports:
  - port: 9747
    protocol: TCP
podSelector:
  matchLabels:
    app.kubernetes.io/component: exporter
    app.kubernetes.io/name: localtraffic-exporter
policyTypes:
- Ingress
`
	if string(b) != want {
		t.Errorf("NetworkPolicy spec:\n%s\nwant:\n%s", b, want)
	}
}

// TestUninstallCleansTheStateDir: the cleanup DaemonSet of the chart README's "Uninstalling" removes the
// directory the chart's stateDir and deploy/base mount, runs where the exporter runs, and reports ready only
// once the directory is gone (what `rollout status` waits for).
func TestUninstallCleansTheStateDir(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- state-cleanup:start -->\n```sh\n(.*?)```\n<!-- state-cleanup:end -->").FindSubmatch(readme)
	if block == nil {
		t.Fatal("the chart README has no state-cleanup block")
	}
	manifest := regexp.MustCompile(`(?s)<<'EOF'\n(.*?)\nEOF\n`).FindSubmatch(block[1])
	if manifest == nil {
		t.Fatalf("no manifest in the cleanup block:\n%s", block[1])
	}
	var ds appsv1.DaemonSet
	if err := sigsyaml.UnmarshalStrict(manifest[1], &ds); err != nil {
		t.Fatalf("the cleanup manifest is not a DaemonSet: %v", err)
	}
	if ds.Namespace != namespace || !strings.Contains(string(block[1]), "rollout status daemonset/"+ds.Name) ||
		!strings.Contains(string(block[1]), "delete daemonset/"+ds.Name) {
		t.Errorf("the block applies DaemonSet %s/%s, and must wait for it and delete it", ds.Namespace, ds.Name)
	}
	var chartValues struct{ StateDir string }
	vals, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(vals, &chartValues); err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Volumes) != 1 || spec.Volumes[0].HostPath == nil || len(spec.Containers) != 1 || len(spec.Containers[0].VolumeMounts) != 1 {
		t.Fatalf("want one hostPath volume mounted in one container: %+v", spec)
	}
	host, mount := spec.Volumes[0].HostPath.Path, spec.Containers[0].VolumeMounts[0].MountPath
	parent, base := filepath.Split(chartValues.StateDir)
	if filepath.Clean(parent) != host {
		t.Errorf("it mounts %s, want the state directory's parent %s (the directory itself cannot be removed from inside)", host, parent)
	}
	inside := filepath.Join(mount, base)
	c := spec.Containers[0]
	if cmd := strings.Join(c.Command, " "); !strings.Contains(cmd, "rm -rf "+inside+" ") {
		t.Errorf("command %q does not remove %s (the state directory %s on the node)", cmd, inside, chartValues.StateDir)
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !strings.Contains(strings.Join(p.Exec.Command, " "), "test ! -e "+inside) {
		t.Errorf("readiness probe %+v: want ready only once %s is gone", p, inside)
	}
	exporter := render(t, "base")
	var base0 appsv1.DaemonSet
	decode(t, find(t, exporter, "DaemonSet", appName), &base0)
	if !reflect.DeepEqual(spec.Tolerations, base0.Spec.Template.Spec.Tolerations) || !reflect.DeepEqual(spec.NodeSelector, base0.Spec.Template.Spec.NodeSelector) {
		t.Errorf("tolerations %v, nodeSelector %v: want the exporter's (%v, %v), so it reaches every node the exporter wrote on",
			spec.Tolerations, spec.NodeSelector, base0.Spec.Template.Spec.Tolerations, base0.Spec.Template.Spec.NodeSelector)
	}
	found := false
	for _, v := range base0.Spec.Template.Spec.Volumes {
		found = found || (v.HostPath != nil && v.HostPath.Path == chartValues.StateDir)
	}
	if !found {
		t.Errorf("deploy/base does not mount %s: the chart's stateDir and the kustomize install differ", chartValues.StateDir)
	}
}
