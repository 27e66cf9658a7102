package check

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
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
	return renderChartOn(t, vals, kubeVersion)
}

// renderChartOn is renderChart for a cluster reporting version (helm checks it against the chart's kubeVersion).
func renderChartOn(t *testing.T, vals map[string]any, version string) ([]*yaml.RNode, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = releaseName, namespace
	kv, err := chartutil.ParseKubeVersion(version)
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
		// The generated PrometheusRule of deploy/prometheus-operator links the runbooks of the checkout (main); the
		// chart links its appVersion's unless told otherwise.
		{"prometheus-operator switches", "overlays/prometheus-operator",
			"namespace: {create: true}\nserviceMonitor: {enabled: true}\ndashboards: {enabled: true}\n" +
				"prometheusRule: {enabled: true, runbookURLBase: 'https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/runbooks.md'}\n" +
				"kubeRBACProxy: {metricsReaders: [{namespace: monitoring, name: prometheus-k8s}]}", false},
		{"Cilium's agent socket", "overlays/cilium", "cilium: {socketDir: /var/run/cilium}", true},
		{"Events per exposure episode", "overlays/events", "events: {enabled: true}", true},
		{"web config from a Secret", "examples/tls-basic-auth",
			"namespace: {create: true}\nwebConfig: {existingSecret: localtraffic-exporter-web}\nkubeRBACProxy: {enabled: false}", false},
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
kubeRBACProxy: {enabled: false}
priorityClassName: system-node-critical
nodeSelector: {kubernetes.io/os: linux}
exporter: {extraArgs: ["--probe.timeout=3s"]}
nameOverride: lt
fullnameOverride: lt-prod
commonLabels: {team: sre}
global: {imageRegistry: mirror.example}
extraVolumes: [{name: tmp, emptyDir: {}}]
extraVolumeMounts: [{name: tmp, mountPath: /tmp}]
extraContainers: [{name: sidecar, image: busybox}]
`), values(t, `
kubeRBACProxy: {metricsReaders: [{namespace: monitoring, name: prometheus-k8s}], extraArgs: ["--tls-cert-file=/tls/tls.crt"], extraVolumeMounts: [{name: tls, mountPath: /tls}]}
extraVolumes: [{name: tls, secret: {secretName: tls}}]
podMonitor: {enabled: true, authorization: {credentials: {name: scrape-token, key: token}}, namespace: monitoring, sampleLimit: 20000, relabelings: [{targetLabel: cluster, replacement: prod}], metricRelabelings: [{action: drop, regex: go_.*, sourceLabels: [__name__]}]}
serviceMonitor: {enabled: true, namespace: monitoring, sampleLimit: 20000}
prometheusRule: {enabled: true, namespace: monitoring}
dashboards: {enabled: true, namespace: grafana}
metricsJob: lt-prod
events: {enabled: true}
`), values(t, `
serviceMonitor: {enabled: true, serviceDiscoveryRole: "", honorLabels: false, namespaceSelector: {any: true}}
prometheusRule: {enabled: true, runbookURLBase: "https://runbooks.example/lt.md", disabled: {LocalTrafficExporterDown: true}, additionalRuleLabels: {team: platform}}
dashboards: {enabled: true}
networkPolicy: {enabled: true, metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}
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
		{"podMonitor: {sampleLimit: -1}", []string{"at '/podMonitor/sampleLimit'", "minimum"}},
		{"serviceMonitor: {namespace: Monitoring}", []string{"at '/serviceMonitor/namespace'", "pattern"}},
		{`metricsJob: 'a"b'`, []string{"at '/metricsJob'", "pattern"}},
		{"commonLabels: {team: 1}", []string{"at '/commonLabels/team'", "want string"}},
		{"extraContainers: {name: x}", []string{"at '/extraContainers'", "want array"}},
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

// TestChartNameOverridesKeepTheAlerts: nameOverride and fullnameOverride rename every object, but the job the
// alerts select (LocalTrafficExporterDown/Absent: up{job=...}) is metricsJob, set by the monitors' relabelings
// and selected by the chart's PrometheusRule, so ExporterAbsent does not fire forever on a renamed release.
// LocalTrafficExporterNotScraped finds the exporter's pods by their DaemonSet's name: the renamed one.
func TestChartNameOverridesKeepTheAlerts(t *testing.T) {
	for _, tc := range []struct{ values, job string }{
		{"nameOverride: lt\nfullnameOverride: lt-prod", "localtraffic-exporter"},
		{"nameOverride: lt", "localtraffic-exporter"},
		{"fullnameOverride: lt-prod\nmetricsJob: lt-prod", "lt-prod"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			objs := comparable(t, mustRenderChart(t, values(t, tc.values+"\npodMonitor: {enabled: true, authorization: {credentials: {name: t, key: token}}}\nserviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}")))
			var rule map[string]any
			monitors := 0
			for key, o := range objs {
				// What used to set the job (jobLabel: app.kubernetes.io/name) and the names did change.
				if strings.Contains(tc.values, "fullnameOverride: lt-prod") && !strings.HasSuffix(key, "/lt-prod") &&
					!strings.HasSuffix(key, "/lt-prod-kube-rbac-proxy") && !strings.HasSuffix(key, "/lt-prod-metrics-reader") &&
					!strings.HasSuffix(key, "/lt-prod-announcers") {
					t.Errorf("%s: fullnameOverride not applied", key)
				}
				if strings.Contains(tc.values, "nameOverride: lt\n") && dig(o, "metadata", "labels", "app.kubernetes.io/name") != "lt" {
					t.Errorf("%s: nameOverride not applied to app.kubernetes.io/name", key)
				}
				switch o["kind"] {
				case "PrometheusRule":
					rule = o
				case "PodMonitor", "ServiceMonitor":
					monitors++
					if dig(o, "spec", "jobLabel") != nil {
						t.Errorf("%s: jobLabel makes the job follow a label's value", key)
					}
					eps, _ := dig(o, "spec", "podMetricsEndpoints").([]any)
					if eps == nil {
						eps, _ = dig(o, "spec", "endpoints").([]any)
					}
					if job := lastJobRelabeling(eps[0].(map[string]any)); job != tc.job {
						t.Errorf("%s: the targets' job is %q, want %q", key, job, tc.job)
					}
				}
			}
			if monitors != 2 || rule == nil {
				t.Fatalf("rendered %d monitors and rule %v", monitors, rule != nil)
			}
			b, err := sigsyaml.Marshal(rule["spec"])
			if err != nil {
				t.Fatal(err)
			}
			jobs := regexp.MustCompile(`job="([^"]*)"`).FindAllStringSubmatch(string(b), -1)
			if len(jobs) < 2 {
				t.Fatalf("the rules select no job:\n%s", b)
			}
			for _, m := range jobs {
				if m[1] != tc.job {
					t.Errorf("a rule selects job=%q, the monitors set %q", m[1], tc.job)
				}
			}
			// The coverage alert finds the exporter's pods by their DaemonSet's name: the renamed one.
			var ds string
			for _, o := range objs {
				if o["kind"] == "DaemonSet" {
					ds, _ = dig(o, "metadata", "name").(string)
				}
			}
			owners := regexp.MustCompile(`created_by_name="([^"]*)"`).FindAllStringSubmatch(string(b), -1)
			if len(owners) == 0 || ds == "" {
				t.Fatalf("the rules select no DaemonSet's pods (DaemonSet %q):\n%s", ds, b)
			}
			for _, m := range owners {
				if m[1] != ds {
					t.Errorf("a rule selects the pods of DaemonSet %q, the chart's is %q", m[1], ds)
				}
			}
		})
	}
}

// lastJobRelabeling is the job the endpoint's relabelings leave (the operator's own job relabeling comes first).
func lastJobRelabeling(ep map[string]any) string {
	job := ""
	rl, _ := ep["relabelings"].([]any)
	for _, r := range rl {
		r := r.(map[string]any)
		if r["targetLabel"] == "job" && r["sourceLabels"] == nil {
			job, _ = r["replacement"].(string)
		}
	}
	return job
}

// TestChartAsPeopleUseCharts: commonLabels on every object and pod but no selector, the registry override, extra
// volumes, mounts and containers, and the monitors' relabelings (after the chart's), metricRelabelings,
// sampleLimit and namespace (rule and dashboards too).
func TestChartAsPeopleUseCharts(t *testing.T) {
	objs := comparable(t, mustRenderChart(t, values(t, `
commonLabels: {team: sre, cost-center: "42"}
global: {imageRegistry: mirror.example:5000}
image: {tag: v9.9.9}
extraVolumes: [{name: scratch, emptyDir: {}}]
extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
extraContainers: [{name: sidecar, image: busybox, args: [sleep, infinity]}]
webConfig: {existingSecret: web}
kubeRBACProxy: {enabled: false}
podMonitor: {enabled: true, namespace: monitoring, sampleLimit: 20000, relabelings: [{targetLabel: cluster, replacement: prod}], metricRelabelings: [{action: drop, regex: go_.*, sourceLabels: [__name__]}]}
serviceMonitor: {enabled: true, namespace: monitoring, sampleLimit: 30000}
prometheusRule: {enabled: true, namespace: monitoring}
dashboards: {enabled: true, namespace: grafana}
`)))
	for key, o := range objs {
		if dig(o, "metadata", "labels", "team") != "sre" || dig(o, "metadata", "labels", "cost-center") != "42" {
			t.Errorf("%s: labels %v lack commonLabels", key, dig(o, "metadata", "labels"))
		}
		for _, sel := range [][]string{{"spec", "selector", "matchLabels"}, {"spec", "selector"}} {
			if m, ok := dig(o, sel...).(map[string]any); ok && m["team"] != nil {
				t.Errorf("%s: commonLabels in the selector %v (selectors are immutable)", key, m)
			}
		}
	}
	ds := objs["DaemonSet "+namespace+"/"+appName]
	if dig(ds, "spec", "template", "metadata", "labels", "team") != "sre" {
		t.Errorf("pod labels %v lack commonLabels", dig(ds, "spec", "template", "metadata", "labels"))
	}
	pod := dig(ds, "spec", "template", "spec").(map[string]any)
	containers := pod["containers"].([]any)
	exporter := containers[0].(map[string]any)
	if exporter["image"] != "mirror.example:5000/localtraffic/localtraffic-exporter:v9.9.9" {
		t.Errorf("image %v", exporter["image"])
	}
	if len(containers) != 2 || containers[1].(map[string]any)["name"] != "sidecar" {
		t.Errorf("containers %v: want the exporter and the sidecar", containers)
	}
	if m := fmt.Sprint(exporter["volumeMounts"]); !strings.Contains(m, "/etc/localtraffic-exporter/web") || !strings.Contains(m, "/scratch") {
		t.Errorf("volumeMounts %s: want the web config's and the extra one", m)
	}
	if v := fmt.Sprint(pod["volumes"]); !strings.Contains(v, "secretName:web") || !strings.Contains(v, "name:scratch") {
		t.Errorf("volumes %s: want the web config's and the extra one", v)
	}
	pm := objs["PodMonitor monitoring/"+appName]
	if pm == nil {
		t.Fatalf("no PodMonitor in monitoring: %v", keys(objs))
	}
	if dig(pm, "spec", "sampleLimit") != float64(20000) || !reflect.DeepEqual(dig(pm, "spec", "namespaceSelector", "matchNames"), []any{namespace}) {
		t.Errorf("PodMonitor spec %v: want sampleLimit 20000, still scraping namespace %s", dig(pm, "spec"), namespace)
	}
	ep := dig(pm, "spec", "podMetricsEndpoints").([]any)[0].(map[string]any)
	rl := ep["relabelings"].([]any)
	if len(rl) != 3 || rl[2].(map[string]any)["targetLabel"] != "cluster" || lastJobRelabeling(ep) != "localtraffic-exporter" {
		t.Errorf("relabelings %v: want node, job, then the user's", rl)
	}
	if mr := fmt.Sprint(ep["metricRelabelings"]); !strings.Contains(mr, "go_.*") {
		t.Errorf("metricRelabelings %s", mr)
	}
	sm := objs["ServiceMonitor monitoring/"+appName]
	if dig(sm, "spec", "sampleLimit") != float64(30000) {
		t.Errorf("ServiceMonitor spec %v", dig(sm, "spec"))
	}
	if objs["PrometheusRule monitoring/"+appName] == nil || objs["ConfigMap grafana/"+appName+"-dashboards"] == nil {
		t.Errorf("rule or dashboards not in their namespaces: %v", keys(objs))
	}
	// Without global.imageRegistry, image.registry; an empty registry leaves the repository whole.
	for vals, want := range map[string]string{
		"image: {registry: registry.example, tag: v1.0.0}":           "registry.example/localtraffic/localtraffic-exporter:v1.0.0",
		"image: {registry: '', repository: lt/lt, tag: v1.0.0}":      "lt/lt:v1.0.0",
		"image: {digest: 'sha256:" + strings.Repeat("ab", 32) + "'}": "ghcr.io/localtraffic/localtraffic-exporter@sha256:" + strings.Repeat("ab", 32),
	} {
		ds := comparable(t, mustRenderChart(t, values(t, vals)))["DaemonSet "+namespace+"/"+appName]
		if got := dig(ds, "spec", "template", "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)["image"]; got != want {
			t.Errorf("%s: image %v, want %s", vals, got, want)
		}
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
