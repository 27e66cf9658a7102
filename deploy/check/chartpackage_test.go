package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestChartPackage: what `make chart` (helm package) makes and the release pushes as an OCI artifact: a package
// named for the chart's version, the release's version without the v (the README installs it with --version),
// that holds the chart as it is here (values, schema, README, the generated files) and renders.
func TestChartPackage(t *testing.T) {
	pkg := action.NewPackage()
	pkg.Destination = t.TempDir()
	path, err := pkg.Run(filepath.Join(repoRoot(t), chartDir), nil)
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	meta := readYAML[struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}](t, chartDir+"/Chart.yaml")
	if meta.Version != strings.TrimPrefix(meta.AppVersion, "v") {
		t.Errorf("Chart.yaml version %s, appVersion %s: the chart is released with the exporter, one version", meta.Version, meta.AppVersion)
	}
	if want := "localtraffic-exporter-" + meta.Version + ".tgz"; filepath.Base(path) != want {
		t.Errorf("helm package wrote %s, want %s", filepath.Base(path), want)
	}
	chrt, err := loader.Load(path)
	if err != nil {
		t.Fatalf("loading the package: %v", err)
	}
	values, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range chrt.Raw {
		got[f.Name] = true
		if f.Name == "values.yaml" && string(f.Data) != string(values) {
			t.Error("the package's values.yaml differs from the chart's")
		}
	}
	for _, want := range []string{"values.yaml", "values.schema.json", "README.md", "files/prometheus-rule-spec.yaml", "files/dashboards/localtraffic-exporter.json", "templates/daemonset.yaml"} {
		if !got[want] {
			t.Errorf("the package lacks %s", want)
		}
	}
	if chrt.Schema == nil {
		t.Error("the package carries no values schema")
	}
}

// TestChartServiceMonitorSecretToken: with serviceMonitor.authorization (OpenShift's Prometheus refuses token
// files), the ServiceMonitor sends the Secret's token and no bearerTokenFile, still over HTTPS to kube-rbac-proxy,
// with the README's OpenShift values.
func TestChartServiceMonitorSecretToken(t *testing.T) {
	objs := mustRenderChart(t, values(t, `
serviceMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: localtraffic-scrape-token, key: token}}}
kubeRBACProxy: {metricsReaders: [{namespace: localtraffic-system, name: localtraffic-scrape}]}
`))
	sm, err := find(t, objs, "ServiceMonitor", appName).Map()
	if err != nil {
		t.Fatal(err)
	}
	eps, _ := dig(sm, "spec", "endpoints").([]any)
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["bearerTokenFile"] != nil || dig(ep, "authorization", "credentials", "name") != "localtraffic-scrape-token" ||
		dig(ep, "authorization", "credentials", "key") != "token" || ep["scheme"] != "https" {
		t.Errorf("ServiceMonitor endpoint %v: want the Secret's token, no bearerTokenFile, https", ep)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"serviceMonitor.authorization.credentials.name=localtraffic-scrape-token", "oc adm policy add-scc-to-user privileged -z localtraffic-exporter"} {
		if !strings.Contains(string(readme), line) {
			t.Errorf("the chart README's OpenShift lines lack %s", line)
		}
	}
}
