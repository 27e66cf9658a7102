package check

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// flagValue is the value of the last --name=value in args ("" and false when absent).
func flagValue(args []string, name string) (string, bool) {
	v, ok := "", false
	for _, a := range args {
		if rest, found := strings.CutPrefix(a, "--"+name+"="); found {
			v, ok = rest, true
		}
	}
	return v, ok
}

// checkKubeRBACProxy holds a rendering (kustomize or Helm) to the metrics endpoint's gate: the exporter on
// 127.0.0.1 only, kube-rbac-proxy on the node's address in front of it, the probes passing through it without a
// token on exactly the exporter's health paths (never the telemetry path), the proxy's own liveness, least
// privilege for the sidecar, and its RBAC: TokenReviews and SubjectAccessReviews for the pod's ServiceAccount and a
// metrics-reader ClusterRole with GET on the telemetry path only.
// kubeRBACProxyPin is the kube-rbac-proxy version e2e builds from the Go module proxy and runs in front of the
// exporter (e2e/tools/rbacproxy/go.mod): the one version deploy/base, the chart and their READMEs may ship.
func kubeRBACProxyPin(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(repoRoot(t), "e2e", "tools", "rbacproxy", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require github\.com/brancz/kube-rbac-proxy (v\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("e2e/tools/rbacproxy/go.mod requires no github.com/brancz/kube-rbac-proxy")
	}
	return string(m[1])
}

// TestKubeRBACProxyPinnedOnce: every place that names kube-rbac-proxy's image version names the one e2e tests.
func TestKubeRBACProxyPinnedOnce(t *testing.T) {
	pin := kubeRBACProxyPin(t)
	// image:, a README's `registry`, `repository`, `tag` cells, values.yaml's repository and tag lines.
	version := regexp.MustCompile("kube-rbac-proxy(?::|`, `|\\n\\s+tag: )(v\\d+\\.\\d+\\.\\d+)")
	for _, f := range []string{"deploy/base/daemonset.yaml", "deploy/README.md", chartDir + "/values.yaml", chartDir + "/README.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), f))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range version.FindAllSubmatch(b, -1) {
			found = true
			if string(m[1]) != pin {
				t.Errorf("%s names kube-rbac-proxy %s, e2e tests %s", f, m[1], pin)
			}
		}
		if !found {
			t.Errorf("%s does not name kube-rbac-proxy's version %s", f, pin)
		}
	}
}

func checkKubeRBACProxy(t *testing.T, what string, objs []*yaml.RNode) {
	t.Helper()
	var ds appsv1.DaemonSet
	decode(t, find(t, objs, "DaemonSet", appName), &ds)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 2 || pod.Containers[0].Name != "exporter" || pod.Containers[1].Name != "kube-rbac-proxy" {
		t.Fatalf("%s: containers %d: want exporter and kube-rbac-proxy", what, len(pod.Containers))
	}
	exp, proxy := pod.Containers[0], pod.Containers[1]

	listen, _ := flagValue(exp.Args, "web.listen-address")
	host, port, err := splitHostPort(listen)
	if err != nil || host != "127.0.0.1" {
		t.Errorf("%s: exporter --web.listen-address=%q: want 127.0.0.1:<port> (loopback only)", what, listen)
	}
	if len(exp.Ports) != 0 {
		t.Errorf("%s: exporter declares ports %+v: the node's port is kube-rbac-proxy's", what, exp.Ports)
	}
	telemetry, _ := flagValue(exp.Args, "web.telemetry-path")

	if want := "quay.io/brancz/kube-rbac-proxy:" + kubeRBACProxyPin(t); proxy.Image != want {
		t.Errorf("%s: kube-rbac-proxy image %q: want %s, the version e2e builds and tests (e2e/tools/rbacproxy/go.mod)", what, proxy.Image, want)
	}
	if v, _ := flagValue(proxy.Args, "upstream"); v != "http://127.0.0.1:"+strconv.Itoa(port)+"/" {
		t.Errorf("%s: --upstream=%q: want the exporter's http://127.0.0.1:%d/", what, v, port)
	}
	secure, _ := flagValue(proxy.Args, "secure-listen-address")
	if secure != "[$(NODE_IP)]:"+strconv.Itoa(port) {
		t.Errorf("%s: --secure-listen-address=%q: want [$(NODE_IP)]:%d (the node's address, the exporter's port number)", what, secure, port)
	}
	nodeIP := slices.IndexFunc(proxy.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_IP" })
	if nodeIP < 0 || proxy.Env[nodeIP].ValueFrom == nil || proxy.Env[nodeIP].ValueFrom.FieldRef == nil ||
		proxy.Env[nodeIP].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("%s: NODE_IP must be the pod's IP (hostNetwork: the node's): %+v", what, proxy.Env)
	}
	if len(proxy.Ports) == 0 || proxy.Ports[0].Name != "metrics" || int(proxy.Ports[0].ContainerPort) != port {
		t.Errorf("%s: kube-rbac-proxy ports %+v: want metrics %d first", what, proxy.Ports, port)
	}
	if _, ok := flagValue(proxy.Args, "allow-paths"); ok {
		t.Errorf("%s: --allow-paths cannot be combined with --ignore-paths", what)
	}
	ignoreFlag, _ := flagValue(proxy.Args, "ignore-paths")
	ignored := strings.Split(ignoreFlag, ",")
	passes := func(p string) bool {
		return slices.ContainsFunc(ignored, func(pattern string) bool { ok, _ := path.Match(pattern, p); return ok })
	}
	if telemetry == "" || passes(telemetry) || passes("/") {
		t.Errorf("%s: --ignore-paths=%s lets %q or the landing page through without a token", what, ignoreFlag, telemetry)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": exp.LivenessProbe, "readiness": exp.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port.IntValue() != port || !passes(p.HTTPGet.Path) {
			t.Errorf("%s: exporter %s probe %+v: want HTTPS GET on port %d, a path kube-rbac-proxy passes without a token (%s)", what, name, p, port, ignoreFlag)
		}
	}
	health, _ := flagValue(proxy.Args, "proxy-endpoints-port")
	lp := proxy.LivenessProbe
	if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" || lp.HTTPGet.Scheme != corev1.URISchemeHTTPS ||
		!slices.ContainsFunc(proxy.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == lp.HTTPGet.Port.String() && strconv.Itoa(int(p.ContainerPort)) == health
		}) {
		t.Errorf("%s: kube-rbac-proxy liveness %+v: want HTTPS /healthz on its --proxy-endpoints-port=%s", what, lp, health)
	}
	sc := proxy.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s: kube-rbac-proxy securityContext %+v: want non-root, read-only root, no escalation, no capabilities", what, sc)
	}
	if proxy.Resources.Requests.Memory().IsZero() || proxy.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: kube-rbac-proxy resources %+v: want a memory request and limit", what, proxy.Resources)
	}

	var role rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", appName+"-kube-rbac-proxy"), &role)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !slices.EqualFunc(role.Rules, want, policyRuleEqual) {
		t.Errorf("%s: kube-rbac-proxy ClusterRole %+v, want exactly %+v", what, role.Rules, want)
	}
	var binding rbacv1.ClusterRoleBinding
	decode(t, find(t, objs, "ClusterRoleBinding", appName+"-kube-rbac-proxy"), &binding)
	wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: pod.ServiceAccountName, Namespace: ds.Namespace}}
	if binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "ClusterRole" || !slices.Equal(binding.Subjects, wantSubj) {
		t.Errorf("%s: kube-rbac-proxy binding %+v to %+v: want its ClusterRole to %+v", what, binding.RoleRef, binding.Subjects, wantSubj)
	}
	var reader rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", appName+"-metrics-reader"), &reader)
	wantReader := []rbacv1.PolicyRule{{NonResourceURLs: []string{telemetry}, Verbs: []string{"get"}}}
	if !slices.EqualFunc(reader.Rules, wantReader, policyRuleEqual) {
		t.Errorf("%s: metrics-reader ClusterRole %+v, want exactly %+v", what, reader.Rules, wantReader)
	}
}

func policyRuleEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
		slices.Equal(a.NonResourceURLs, b.NonResourceURLs) && len(a.ResourceNames) == 0 && len(b.ResourceNames) == 0
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", 0, strconv.ErrSyntax
	}
	p, err := strconv.Atoi(addr[i+1:])
	return addr[:i], p, err
}

// TestKubeRBACProxy: the metrics endpoint is not open to the node network by default, in both renderings: deploy/base
// and the chart's defaults (and the chart with another port and telemetry path, which must move everything with it).
func TestKubeRBACProxy(t *testing.T) {
	checkKubeRBACProxy(t, "deploy/base", render(t, "base"))
	checkKubeRBACProxy(t, "overlays/prometheus-operator", render(t, "overlays/prometheus-operator"))
	checkKubeRBACProxy(t, "chart defaults", mustRenderChart(t, nil))
	checkKubeRBACProxy(t, "chart, port 9800 and /m", mustRenderChart(t, values(t, "exporter: {port: 9800, telemetryPath: /m}")))
}

// TestChartKubeRBACProxySwitch: kubeRBACProxy.enabled=false gives the exporter its port back on every address with
// HTTP probes and no proxy RBAC; the monitors follow the switch (HTTPS and Prometheus' token by default behind the
// proxy, nothing without); a PodMonitor behind the proxy needs a token from a Secret; the exporter's web config and
// the proxy exclude each other; metricsReaders binds ServiceAccounts to the metrics-reader ClusterRole.
func TestChartKubeRBACProxySwitch(t *testing.T) {
	off := comparable(t, mustRenderChart(t, values(t, "kubeRBACProxy: {enabled: false}\nserviceMonitor: {enabled: true}")))
	pod := dig(off["DaemonSet "+namespace+"/"+appName], "spec", "template", "spec").(map[string]any)
	containers := pod["containers"].([]any)
	exp := containers[0].(map[string]any)
	if len(containers) != 1 || !slices.Contains(exp["args"].([]any), any("--web.listen-address=:9746")) ||
		dig(exp, "livenessProbe", "httpGet", "port") != "metrics" || dig(exp, "livenessProbe", "httpGet", "scheme") != nil {
		t.Errorf("kubeRBACProxy off: containers %d, exporter %v: want the exporter alone on :9746 with HTTP probes on its port", len(containers), exp)
	}
	for key := range off {
		if strings.Contains(key, "-kube-rbac-proxy") || strings.Contains(key, "-metrics-reader") {
			t.Errorf("kubeRBACProxy off renders %s", key)
		}
	}
	ep := dig(off["ServiceMonitor "+namespace+"/"+appName], "spec", "endpoints").([]any)[0].(map[string]any)
	if ep["scheme"] != nil || ep["tlsConfig"] != nil || ep["bearerTokenFile"] != nil {
		t.Errorf("kubeRBACProxy off: ServiceMonitor endpoint %v: want plain HTTP without a token", ep)
	}

	on := comparable(t, mustRenderChart(t, values(t, `
serviceMonitor: {enabled: true}
podMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: scrape-token, key: token}}}
kubeRBACProxy: {metricsReaders: [{namespace: monitoring, name: prometheus-k8s}, {namespace: obs, name: agent}]}
`)))
	ep = dig(on["ServiceMonitor "+namespace+"/"+appName], "spec", "endpoints").([]any)[0].(map[string]any)
	if ep["scheme"] != "https" || dig(ep, "tlsConfig", "insecureSkipVerify") != true || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("ServiceMonitor endpoint %v: want https, insecureSkipVerify and Prometheus' token", ep)
	}
	pep := dig(on["PodMonitor "+namespace+"/"+appName], "spec", "podMetricsEndpoints").([]any)[0].(map[string]any)
	if pep["scheme"] != "https" || dig(pep, "authorization", "credentials", "name") != "scrape-token" || pep["bearerTokenFile"] != nil {
		t.Errorf("PodMonitor endpoint %v: want https with the Secret's token", pep)
	}
	rb := on["ClusterRoleBinding /"+appName+"-metrics-reader"]
	if dig(rb, "roleRef", "name") != appName+"-metrics-reader" || len(rb["subjects"].([]any)) != 2 {
		t.Errorf("metrics-reader binding %v: want both ServiceAccounts bound to the metrics-reader ClusterRole", rb)
	}

	for vals, says := range map[string]string{
		"podMonitor: {enabled: true}":                  "podMonitor.authorization",
		"webConfig: {existingSecret: web}":             "kubeRBACProxy.enabled=false",
		"kubeRBACProxy: {image: {tag: ''}}":            "at '/kubeRBACProxy/image/tag'",
		"kubeRBACProxy: {metricsReaders: [{name: p}]}": "namespace",
	} {
		if _, err := renderChart(t, values(t, vals)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want an error saying %q", vals, err, says)
		}
	}
}
