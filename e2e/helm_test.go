package e2e

// The Helm chart (deploy/helm/localtraffic-exporter) installed on the harness's real kube-apiserver: helm's own
// install action with --dry-run=server (the chart's kubeVersion and the objects' schemas checked against the
// live server), then the manifest it renders applied with kubectl --dry-run=server --validate=strict (admission,
// defaulting and strict field validation; nothing is stored). deploy/check proves the chart equals the
// kustomize manifests; this proves the server accepts what the chart renders, with every switch on.

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

const (
	helmNamespace = "lt-helm-e2e"
	helmRelease   = "lt-helm"
)

// helmInstallServerDryRun is `helm install --dry-run=server <release> deploy/helm/localtraffic-exporter -n
// <helmNamespace> -f <values>` through helm's SDK, with the harness's admin kubeconfig. It returns the rendered
// manifest.
func helmInstallServerDryRun(t *testing.T, c *cluster.Cluster, values string) (string, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(repoDir(t), "deploy", "helm", "localtraffic-exporter"))
	if err != nil {
		fatalf(t, "load chart: %v", err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		fatalln(t, err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := c.AdminKubeconfig(), helmNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, helmNamespace, "secret", t.Logf); err != nil {
		fatalf(t, "helm configuration: %v", err)
	}
	install := action.NewInstall(cfg)
	install.DryRun, install.DryRunOption = true, "server"
	install.ReleaseName, install.Namespace = helmRelease, helmNamespace
	rel, err := install.RunWithContext(testContext(t), chrt, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

func TestHelmChartServerDryRun(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	installPrometheusOperatorCRDs(t, c)
	// The release namespace, labelled as the chart's NOTES say (Helm stores the release there: it must exist).
	if err := c.EnsureNamespace(ctx, helmNamespace); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().CoreV1().Namespaces().Delete(testContext(t), helmNamespace, metav1.DeleteOptions{})
	})
	if _, err := kubectl(ctx, c, nil, "label", "--overwrite", "namespace", helmNamespace,
		"pod-security.kubernetes.io/enforce=privileged"); err != nil {
		fatalln(t, err)
	}

	for _, tc := range []struct{ name, values string }{
		{"defaults", ""},
		{"every switch on", `
podMonitor: {enabled: true, additionalLabels: {release: kube-prometheus-stack}, sampleLimit: 20000,
  relabelings: [{targetLabel: cluster, replacement: prod}],
  metricRelabelings: [{sourceLabels: [__name__], regex: "go_.*", action: drop}]}
serviceMonitor: {enabled: true, sampleLimit: 20000, relabelings: [{targetLabel: cluster, replacement: prod}],
  namespaceSelector: {any: true}}
prometheusRule: {enabled: true, disabled: {LocalTrafficExporterDown: true}, additionalRuleLabels: {team: platform}}
dashboards: {enabled: true, annotations: {grafana_folder: Kubernetes}}
networkPolicy: {enabled: true, metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}
webConfig: {existingSecret: localtraffic-exporter-web}
kubeRBACProxy: {enabled: false}
priorityClassName: system-node-critical
nodeSelector: {kubernetes.io/os: linux}
exporter: {extraArgs: ["--probe.timeout=3s"], extraEnv: [{name: GODEBUG, value: "madvdontneed=1"}]}
nameOverride: lt
fullnameOverride: lt-prod
commonLabels: {team: sre}
global: {imageRegistry: mirror.example}
extraVolumes: [{name: scratch, emptyDir: {}}]
extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
extraContainers: [{name: sidecar, image: registry.k8s.io/pause:3.10}]
`},
		{"kube-rbac-proxy with its options", `
podMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: scrape-token, key: token}}}
serviceMonitor: {enabled: true}
kubeRBACProxy: {metricsReaders: [{namespace: monitoring, name: prometheus-k8s}], extraArgs: ["--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"],
  extraVolumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]}
extraVolumes: [{name: tls, secret: {secretName: kube-rbac-proxy-tls}}]
exporter: {port: 9800}
`},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			manifest, err := helmInstallServerDryRun(t, c, tc.values)
			if err != nil {
				fatalf(t, "helm install --dry-run=server: %v", err)
			}
			objs := countObjects(t, manifest)
			// Every object names its namespace: the release's, and the Cilium lease Role's (kube-system).
			out, err := kubectl(ctx, c, []byte(manifest), "apply", "-f", "-", "--dry-run=server", "--validate=strict")
			if err != nil {
				fatalln(t, err)
			}
			if n := strings.Count(out, "(server dry run)"); n != objs || objs < 5 {
				errorf(t, "server dry run reported %d objects, the chart renders %d:\n%s", n, objs, out)
			}
			t.Logf("%d objects accepted by the apiserver:\n%s", objs, out)
		})
	}

	// The check has teeth: an env entry with a misspelt field passes the chart's schema (env entries are free
	// objects there) but the server refuses it.
	t.Run("misspelt_field_is_refused", func(t *testing.T) {
		manifest, err := helmInstallServerDryRun(t, c, `exporter: {extraEnv: [{name: X, valueFrm: {}}]}`)
		if err != nil {
			fatalf(t, "helm install --dry-run=server: %v", err)
		}
		_, err = kubectl(ctx, c, []byte(manifest), "apply", "-n", helmNamespace, "-f", "-", "--dry-run=server", "--validate=strict")
		if err == nil || !strings.Contains(err.Error(), "valueFrm") {
			errorf(t, "server dry run accepted an unknown field: %v", err)
		}
	})
}

// countObjects counts the YAML documents of a manifest that hold an object.
func countObjects(t *testing.T, manifest string) int {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	n := 0
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if len(m) > 0 {
			n++
		}
	}
	return n
}
