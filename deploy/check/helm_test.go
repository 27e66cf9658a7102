package check

import (
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// The chart's release as the tests install it: the release name and namespace of the kustomize install, so the
// objects' names and namespaces are the same.
const (
	releaseName = "localtraffic-exporter"
	chartDir    = "deploy/helm/localtraffic-exporter"
	kubeVersion = "v1.37.2"
)

// helmLabels are the labels Helm charts conventionally add (and deploy/base does not have): the comparison with
// kustomize ignores exactly these, on objects and pod templates. Selectors carry none of them.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// renderChart renders the chart as `helm template` does (helm's own install action, client-only), with the
// chart's values.schema.json applied. vals are the user's values (nil: the defaults).
func renderChart(t *testing.T, vals map[string]any) ([]*yaml.RNode, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = releaseName, namespace
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	objs, err := kio.FromBytes([]byte(rel.Manifest))
	if err != nil {
		t.Fatalf("the rendered chart is not YAML: %v\n%s", err, rel.Manifest)
	}
	return objs, nil
}

func mustRenderChart(t *testing.T, vals map[string]any) []*yaml.RNode {
	t.Helper()
	objs, err := renderChart(t, vals)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", vals, err)
	}
	return objs
}

// values parses a YAML document of chart values.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := sigsyaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// comparable turns rendered objects into plain maps keyed by kind/namespace/name, without Helm's labels.
func comparable(t *testing.T, objs []*yaml.RNode) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := sigsyaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		dropHelmLabels(m)
		if tmpl, ok := dig(m, "spec", "template").(map[string]any); ok {
			dropHelmLabels(tmpl)
		}
		key := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := out[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		out[key] = m
	}
	return out
}

func dropHelmLabels(obj map[string]any) {
	labels, ok := dig(obj, "metadata", "labels").(map[string]any)
	if !ok {
		return
	}
	for _, l := range helmLabels {
		delete(labels, l)
	}
}

func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// sameObjects fails the test for every object that differs, is missing or is extra, showing both as YAML.
func sameObjects(t *testing.T, what string, chart, kustomize map[string]map[string]any) {
	t.Helper()
	var keys []string
	for k := range kustomize {
		keys = append(keys, k)
	}
	for k := range chart {
		if _, ok := kustomize[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		c, inChart := chart[k]
		ku, inKustomize := kustomize[k]
		switch {
		case !inChart:
			t.Errorf("%s: the chart does not render %s", what, k)
		case !inKustomize:
			t.Errorf("%s: the chart renders %s, kustomize does not", what, k)
		case !reflect.DeepEqual(c, ku):
			cy, _ := sigsyaml.Marshal(c)
			ky, _ := sigsyaml.Marshal(ku)
			t.Errorf("%s: %s differs\n--- chart:\n%s\n--- kustomize:\n%s", what, k, cy, ky)
		}
	}
}

// TestChartEqualsKustomize: one source of truth. With its default values the chart renders the objects of
// `kustomize build deploy/base` (the Namespace only with namespace.create, as Helm stores the release in its
// namespace, which must exist first); with the prometheus-operator switches on, those of
// deploy/overlays/prometheus-operator; with webConfig.existingSecret, those of deploy/examples/tls-basic-auth.
// Object by object, field by field; only Helm's own four labels are ignored.
func TestChartEqualsKustomize(t *testing.T) {
	tests := []struct {
		name, kustomization string
		values              string
		skipNamespace       bool
	}{
		{"defaults", "base", "", true},
		{"namespace.create", "base", "namespace: {create: true}", false},
		{"prometheus-operator switches", "overlays/prometheus-operator",
			"namespace: {create: true}\npodMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ndashboards: {enabled: true}", false},
		{"web config from a Secret", "examples/tls-basic-auth",
			"namespace: {create: true}\nwebConfig: {existingSecret: localtraffic-exporter-web}", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chart := comparable(t, mustRenderChart(t, values(t, tc.values)))
			kustomize := comparable(t, render(t, tc.kustomization))
			if tc.skipNamespace {
				delete(kustomize, "Namespace /"+namespace)
			}
			sameObjects(t, tc.kustomization, chart, kustomize)
		})
	}
}

// TestChartLintStrict is `helm lint --strict` (helm's lint action, warnings are errors) with the defaults and
// with every switch on.
func TestChartLintStrict(t *testing.T) {
	for _, vals := range []map[string]any{nil, values(t, `
namespace: {create: true}
podMonitor: {enabled: true, additionalLabels: {release: kube-prometheus-stack}}
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
dashboards: {enabled: true, annotations: {grafana_folder: Kubernetes}}
webConfig: {existingSecret: web}
priorityClassName: system-node-critical
nodeSelector: {kubernetes.io/os: linux}
exporter: {extraArgs: ["--probe.timeout=3s"]}
`)} {
		lint := action.NewLint()
		lint.Strict, lint.Namespace = true, namespace
		kv, err := chartutil.ParseKubeVersion(kubeVersion)
		if err != nil {
			t.Fatal(err)
		}
		lint.KubeVersion = kv
		res := lint.Run([]string{filepath.Join(repoRoot(t), chartDir)}, vals)
		if res.TotalChartsLinted != 1 {
			t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
		}
		for _, m := range res.Messages {
			t.Logf("lint: %s", m)
		}
		for _, err := range res.Errors {
			t.Errorf("helm lint --strict with %v: %v", vals, err)
		}
	}
}

// TestChartSchemaRejectsBadValues: values.schema.json turns a bad value into an error that names the value and
// says what is allowed, before anything renders.
func TestChartSchemaRejectsBadValues(t *testing.T) {
	tests := []struct {
		values string
		says   []string
	}{
		{"exporter: {logFormat: xml}", []string{"at '/exporter/logFormat'", "must be one of", "'logfmt', 'json'"}},
		{"exporter: {rulesMode: ipvs}", []string{"at '/exporter/rulesMode'", "must be one of"}},
		{"exporter: {port: 70000}", []string{"at '/exporter/port'", "65,535"}},
		{"exporter: {telemetryPath: metrics}", []string{"at '/exporter/telemetryPath'", "pattern '^/'"}},
		{"exporter: {extraArgs: [probe.timeout=3s]}", []string{"at '/exporter/extraArgs/0'", "pattern '^--'"}},
		{"tolerationz: []", []string{"tolerationz", "not allowed"}},
		{"podMonitor: {enabled: yes-please}", []string{"at '/podMonitor/enabled'", "want boolean"}},
		{"podMonitor: {interval: 30}", []string{"at '/podMonitor/interval'", "want string"}},
		{"image: {digest: latest}", []string{"at '/image/digest'", "sha256"}},
	}
	for _, tc := range tests {
		t.Run(tc.values, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.values))
			if err == nil {
				t.Fatalf("the chart rendered with %s", tc.values)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q:\n%v", s, err)
				}
			}
		})
	}
	// And the defaults pass the schema (the equality test renders them too, but say it here).
	if _, err := renderChart(t, nil); err != nil {
		t.Errorf("default values: %v", err)
	}
}

// TestChartValues: what the values change lands where it should (beyond what kustomize has).
func TestChartValues(t *testing.T) {
	objs := mustRenderChart(t, values(t, `
image: {registry: registry.example, repository: lt, tag: v9.9.9}
priorityClassName: system-node-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 512Mi}}
exporter: {logLevel: debug, extraArgs: ["--probe.timeout=3s"]}
serviceMonitor: {enabled: true, additionalLabels: {release: kps}}
prometheusRule: {enabled: true, additionalLabels: {release: kps}}
dashboards: {enabled: true, annotations: {grafana_folder: Kubernetes}}
`))
	ds := comparable(t, objs)["DaemonSet "+namespace+"/"+appName]
	spec := dig(ds, "spec", "template", "spec").(map[string]any)
	if spec["priorityClassName"] != "system-node-critical" || !reflect.DeepEqual(spec["nodeSelector"], map[string]any{"kubernetes.io/os": "linux"}) {
		t.Errorf("pod spec: priorityClassName %v, nodeSelector %v", spec["priorityClassName"], spec["nodeSelector"])
	}
	if tol := spec["tolerations"].([]any); len(tol) != 1 || tol[0].(map[string]any)["key"] != "dedicated" {
		t.Errorf("tolerations %v", tol)
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	if c["image"] != "registry.example/lt:v9.9.9" {
		t.Errorf("image %v", c["image"])
	}
	args := fmt.Sprint(c["args"])
	if !strings.Contains(args, "--log.level=debug") || !strings.HasSuffix(args, "--probe.timeout=3s]") {
		t.Errorf("args %v: want --log.level=debug and the extra arg last", args)
	}
	if got := dig(c, "resources", "limits", "memory"); got != "512Mi" {
		t.Errorf("memory limit %v", got)
	}
	sm := comparable(t, objs)["ServiceMonitor "+namespace+"/"+appName]
	if sm == nil || dig(sm, "metadata", "labels", "release") != "kps" || dig(sm, "spec", "endpoints") == nil {
		t.Errorf("ServiceMonitor %v", sm)
	}
	if ep := dig(sm, "spec", "endpoints").([]any)[0].(map[string]any); ep["honorLabels"] != true || ep["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoint %v: want port metrics, honorLabels", ep)
	}
	pr := comparable(t, objs)["PrometheusRule "+namespace+"/"+appName]
	if dig(pr, "metadata", "labels", "release") != "kps" {
		t.Errorf("PrometheusRule labels %v", dig(pr, "metadata", "labels"))
	}
	cm := comparable(t, objs)["ConfigMap "+namespace+"/"+appName+"-dashboards"]
	if dig(cm, "metadata", "annotations", "grafana_folder") != "Kubernetes" || dig(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("dashboard ConfigMap metadata %v", dig(cm, "metadata"))
	}
	// Helm's labels are there (and are the only ones the equality test ignores).
	raw := find(t, objs, "DaemonSet", appName).GetLabels()
	for _, l := range helmLabels {
		if raw[l] == "" {
			t.Errorf("DaemonSet has no label %s: %v", l, raw)
		}
	}
	if _, err := renderChart(t, values(t, "serviceAccount: {create: false}")); err == nil || !strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("serviceAccount.create=false without a name: %v, want an error naming serviceAccount.name", err)
	}
}
