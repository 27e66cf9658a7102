package check

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	namespace = "localtraffic-system"
	appName   = "localtraffic-exporter"
	// announcersRole reads Cilium's L2 announcement Leases, in the Cilium agents' namespace.
	announcersRole  = appName + "-announcers"
	ciliumNamespace = "kube-system"
)

// decode converts a rendered object into its typed API struct, rejecting unknown fields: a misspelt field
// would otherwise be dropped silently by the apiserver's lenient decoding.
func decode(t *testing.T, o *yaml.RNode, into any) {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// TestBaseObjects: the base holds exactly its nine objects, all labelled, the namespaced ones in
// localtraffic-system.
func TestBaseObjects(t *testing.T) {
	objs := render(t, "base")
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if got := o.GetLabels()["app.kubernetes.io/name"]; got != appName {
			t.Errorf("%s %s: label app.kubernetes.io/name=%q, want %q", o.GetKind(), o.GetName(), got, appName)
		}
		clusterScoped := o.GetKind() == "Namespace" || strings.HasPrefix(o.GetKind(), "Cluster")
		if !clusterScoped && o.GetNamespace() != namespaceOf(o) {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	slices.Sort(kinds)
	// The exporter's ClusterRole and binding, kube-rbac-proxy's, and the metrics-reader ClusterRole.
	want := []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "DaemonSet", "Namespace",
		"Role", "RoleBinding", "Service", "ServiceAccount"}
	if !slices.Equal(kinds, want) {
		t.Errorf("base renders %v, want %v", kinds, want)
	}
	var ns corev1.Namespace
	decode(t, find(t, objs, "Namespace", namespace), &ns)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace lacks pod-security.kubernetes.io/enforce=privileged: hostNetwork+NET_ADMIN pods would be rejected under baseline")
	}
}

// namespaceOf is where o belongs: the announcers' Role and binding in the Cilium agents' namespace, everything
// else namespaced in the exporter's.
func namespaceOf(o *yaml.RNode) string {
	if o.GetName() == announcersRole {
		return ciliumNamespace
	}
	return namespace
}

// TestClusterRoleIsExactlyWhatTheExporterUses compares the ClusterRole, rule by rule, with the reads the
// exporter makes. Anything added (a verb, a resource, a wildcard) fails.
func TestClusterRoleIsExactlyWhatTheExporterUses(t *testing.T) {
	objs := render(t, "base")
	var role rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", appName), &role)
	if role.AggregationRule != nil {
		t.Error("ClusterRole must not aggregate other roles")
	}
	var got []string
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected resourceNames/nonResourceURLs in %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, g+"/"+res+":"+v)
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"/nodes:get", "/nodes:list", "/nodes:watch",
		"/services:list", "/services:watch",
		"cilium.io/ciliuml2announcementpolicies:list", "cilium.io/ciliuml2announcementpolicies:watch",
		"discovery.k8s.io/endpointslices:list", "discovery.k8s.io/endpointslices:watch",
		"metallb.io/servicebgpstatuses:list", "metallb.io/servicebgpstatuses:watch",
		"metallb.io/servicel2statuses:list", "metallb.io/servicel2statuses:watch",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ClusterRole grants %v, want exactly %v", got, want)
	}
	// Cilium's L2 announcement Leases: list and watch in kube-system only, bound to the exporter.
	var leases rbacv1.Role
	decode(t, find(t, objs, "Role", announcersRole), &leases)
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}}}
	if leases.Namespace != ciliumNamespace || !reflect.DeepEqual(leases.Rules, wantRules) {
		t.Errorf("Role %s/%s grants %+v, want exactly %+v in %s", leases.Namespace, leases.Name, leases.Rules, wantRules, ciliumNamespace)
	}
	var leasesBinding rbacv1.RoleBinding
	decode(t, find(t, objs, "RoleBinding", announcersRole), &leasesBinding)
	if leasesBinding.Namespace != ciliumNamespace || leasesBinding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: announcersRole}) ||
		!slices.Equal(leasesBinding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: appName, Namespace: namespace}}) {
		t.Errorf("RoleBinding %+v: want the announcers Role bound to the exporter's ServiceAccount in %s", leasesBinding, ciliumNamespace)
	}

	var binding rbacv1.ClusterRoleBinding
	decode(t, find(t, objs, "ClusterRoleBinding", appName), &binding)
	wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: appName, Namespace: namespace}}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: appName}) ||
		!slices.Equal(binding.Subjects, wantSubj) {
		t.Errorf("ClusterRoleBinding binds %+v to %+v, want the ClusterRole to %+v", binding.RoleRef, binding.Subjects, wantSubj)
	}
}

// daemonSet returns the rendered DaemonSet of a kustomization and its exporter container (the first).
func daemonSet(t *testing.T, dir string) (appsv1.DaemonSet, corev1.Container) {
	t.Helper()
	var ds appsv1.DaemonSet
	decode(t, find(t, render(t, dir), "DaemonSet", appName), &ds)
	if len(ds.Spec.Template.Spec.Containers) == 0 || ds.Spec.Template.Spec.Containers[0].Name != "exporter" {
		t.Fatalf("DaemonSet containers %+v: want the exporter first", ds.Spec.Template.Spec.Containers)
	}
	return ds, ds.Spec.Template.Spec.Containers[0]
}

// container returns the pod template's container of that name.
func container(t *testing.T, ds appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet has no container %s", name)
	return corev1.Container{}
}

// TestDaemonSet checks the pod's placement, identity, network and least-privilege settings.
func TestDaemonSet(t *testing.T) {
	ds, c := daemonSet(t, "base")
	pod := ds.Spec.Template.Spec

	if pod.ServiceAccountName != appName {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, appName)
	}
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork=%v dnsPolicy=%q, want true and ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v do not tolerate every taint (operator Exists, no key, no effect)", pod.Tolerations)
	}
	// Every Linux node that is a machine, and nothing else keeps it off any node (nodes_test.go).
	if !reflect.DeepEqual(pod.NodeSelector, linuxSelector) || !reflect.DeepEqual(pod.Affinity, notVirtualAffine) {
		t.Errorf("nodeSelector %v, affinity %+v: want exactly %v and the virtual-node exclusion", pod.NodeSelector, pod.Affinity, linuxSelector)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template", k, v)
		}
	}
	u := ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("updateStrategy %+v: want RollingUpdate with maxUnavailable", u)
	} else if s := u.RollingUpdate.MaxSurge; s != nil && s.String() != "0" {
		t.Errorf("maxSurge %s: a surge pod cannot bind the host port the old one holds", s)
	}

	if !regexp.MustCompile(`^ghcr\.io/localtraffic/localtraffic-exporter:v\d+\.\d+\.\d+$`).MatchString(c.Image) {
		t.Errorf("image %q: want ghcr.io/localtraffic/localtraffic-exporter:v<semver>", c.Image)
	}
	nodeName := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
	if nodeName < 0 || c.Env[nodeName].ValueFrom == nil || c.Env[nodeName].ValueFrom.FieldRef == nil ||
		c.Env[nodeName].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME must come from the downward API spec.nodeName: %+v", c.Env)
	}
	if !slices.Contains(c.Args, "--node-name=$(NODE_NAME)") {
		t.Errorf("args %v do not pass --node-name=$(NODE_NAME)", c.Args)
	}
	// The exporter is not on the node network: loopback only, no container port (kube-rbac-proxy has it;
	// TestKubeRBACProxy checks the sidecar, the probes through it and its RBAC).
	if len(c.Ports) != 0 || !slices.Contains(c.Args, "--web.listen-address=127.0.0.1:9746") {
		t.Errorf("ports %+v, args %v: want no port and --web.listen-address=127.0.0.1:9746", c.Ports, c.Args)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe %+v: want an HTTP GET", name, p)
		}
	}
	if c.LivenessProbe != nil && c.ReadinessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet != nil &&
		c.LivenessProbe.HTTPGet.Path == c.ReadinessProbe.HTTPGet.Path {
		t.Errorf("liveness and readiness probe the same path %s", c.LivenessProbe.HTTPGet.Path)
	}

	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if req.Memory().Cmp(*lim.Memory()) > 0 {
		t.Errorf("memory request %s above the limit %s", req.Memory(), lim.Memory())
	}

	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		(sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil {
		t.Fatalf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, not privileged", sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("capabilities add %v, want exactly [NET_ADMIN NET_RAW]", sc.Capabilities.Add)
	}
	if n := len(pod.Containers); n != 2 {
		t.Errorf("%d containers, want the exporter and kube-rbac-proxy", n)
	}
	// The readers need no host path (not even /run/xtables.lock). The one volume is the state file's directory:
	// a hostPath, so the file outlives the container and the pod, mounted where --state.file points.
	const stateDir = "/var/lib/localtraffic-exporter"
	wantVolume := corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: stateDir, Type: ptr(corev1.HostPathDirectoryOrCreate)}}}
	if len(pod.Volumes) != 1 || !reflect.DeepEqual(pod.Volumes[0], wantVolume) {
		t.Errorf("volumes %+v: want exactly the state directory %+v", pod.Volumes, wantVolume)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "state" || c.VolumeMounts[0].MountPath != stateDir || c.VolumeMounts[0].ReadOnly {
		t.Errorf("exporter mounts %+v: want the state directory at %s, writable", c.VolumeMounts, stateDir)
	}
	if !slices.Contains(c.Args, "--state.file="+stateDir+"/state.json") {
		t.Errorf("args %v: want --state.file inside the mounted state directory", c.Args)
	}
	for _, other := range pod.Containers[1:] {
		if len(other.VolumeMounts) > 0 {
			t.Errorf("container %s mounts %+v: only the exporter writes its state", other.Name, other.VolumeMounts)
		}
	}
	if pod.HostPID || pod.HostIPC {
		t.Error("hostPID/hostIPC are not needed")
	}
}

// TestServiceSelectsTheExporter: the metrics Service is headless and selects the DaemonSet's pods on the
// metrics port.
func TestServiceSelectsTheExporter(t *testing.T) {
	objs := render(t, "base")
	var svc corev1.Service
	decode(t, find(t, objs, "Service", appName), &svc)
	ds, _ := daemonSet(t, "base")
	proxy := container(t, ds, "kube-rbac-proxy")
	if len(proxy.Ports) == 0 || proxy.Ports[0].Name != "metrics" || proxy.Ports[0].ContainerPort != 9746 {
		t.Errorf("kube-rbac-proxy ports %+v: want metrics 9746 first (the Service's target)", proxy.Ports)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP %q, want None (each node's exporter scraped on its own)", svc.Spec.ClusterIP)
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the exporter pods", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9746 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || svc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("Service ports %+v, want metrics 9746 -> metrics", svc.Spec.Ports)
	}
}

// relabeling is the part of a monitor's relabeling the test looks at.
type relabeling struct {
	SourceLabels []string `json:"sourceLabels"`
	TargetLabel  string   `json:"targetLabel"`
	Replacement  string   `json:"replacement"`
}

// TestPrometheusOperatorOverlay: the ServiceMonitor keeps the exporter's labels, selects the headless Service,
// scrapes through kube-rbac-proxy (HTTPS, Prometheus' own token), the binding lets a Prometheus ServiceAccount GET
// /metrics, and the generated PrometheusRule and dashboard ConfigMap are part of the overlay.
func TestPrometheusOperatorOverlay(t *testing.T) {
	objs := render(t, "overlays/prometheus-operator")
	sm := find(t, objs, "ServiceMonitor", appName)
	var spec struct {
		Spec struct {
			JobLabel string `json:"jobLabel"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port            string `json:"port"`
				Path            string `json:"path"`
				Scheme          string `json:"scheme"`
				BearerTokenFile string `json:"bearerTokenFile"`
				TLSConfig       struct {
					InsecureSkipVerify bool `json:"insecureSkipVerify"`
				} `json:"tlsConfig"`
				HonorLabels bool         `json:"honorLabels"`
				Relabelings []relabeling `json:"relabelings"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	b, _ := sm.MarshalJSON()
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	decode(t, find(t, objs, "Service", appName), &svc)
	for k, v := range spec.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not match the metrics Service's labels %v", k, v, svc.Labels)
		}
	}
	if !slices.Equal(spec.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaceSelector %v, want [%s]", spec.Spec.NamespaceSelector.MatchNames, namespace)
	}
	if len(spec.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(spec.Spec.Endpoints))
	}
	ep := spec.Spec.Endpoints[0]
	if !ep.HonorLabels {
		t.Error("ServiceMonitor without honorLabels: the exporter's namespace/service labels would become exported_*")
	}
	_, c := daemonSet(t, "overlays/prometheus-operator")
	if ep.Port != svc.Spec.Ports[0].Name || !slices.Contains(c.Args, "--web.telemetry-path="+ep.Path) {
		t.Errorf("ServiceMonitor scrapes port %q path %q; the Service's port is %q, the exporter's args %v", ep.Port, ep.Path, svc.Spec.Ports[0].Name, c.Args)
	}
	if ep.Scheme != "https" || !ep.TLSConfig.InsecureSkipVerify || ep.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("ServiceMonitor endpoint scheme %q, tlsConfig %+v, bearerTokenFile %q: want https to kube-rbac-proxy's self-signed certificate with Prometheus' ServiceAccount token", ep.Scheme, ep.TLSConfig, ep.BearerTokenFile)
	}
	// alerts/alerts.yaml selects up{job="localtraffic-exporter"}: a relabeling sets it outright (after the
	// operator's own job relabeling), so renaming the objects or their labels cannot change it.
	job := ""
	for _, r := range ep.Relabelings {
		if r.TargetLabel == "job" && len(r.SourceLabels) == 0 {
			job = r.Replacement
		}
	}
	if spec.Spec.JobLabel != "" || job != appName {
		t.Errorf("jobLabel %q, job relabeled to %q: want no jobLabel and job=%q (the alerts select on it)", spec.Spec.JobLabel, job, appName)
	}
	if !slices.ContainsFunc(ep.Relabelings, func(r relabeling) bool {
		return r.TargetLabel == "node" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"})
	}) {
		t.Errorf("ServiceMonitor does not set node=<pod's node> on the target (up would not name the node): %+v", ep.Relabelings)
	}
	var binding rbacv1.ClusterRoleBinding
	decode(t, find(t, objs, "ClusterRoleBinding", appName+"-metrics-reader"), &binding)
	if binding.RoleRef.Name != appName+"-metrics-reader" || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" {
		t.Errorf("metrics-reader binding %+v: want the metrics-reader ClusterRole bound to Prometheus' ServiceAccount", binding)
	}

	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetNamespace() != "" && o.GetNamespace() != namespaceOf(o) {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	for _, k := range []string{"PrometheusRule", "ConfigMap", "ServiceMonitor", "DaemonSet"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("overlay renders no %s (has %v)", k, kinds)
		}
	}
}

// examplePassword is the password the README documents for deploy/examples/web-config.yaml.
const examplePassword = "change-me-example-only"

// webConfig is the part of exporter-toolkit's web configuration the example uses.
type webConfig struct {
	TLSServerConfig struct {
		CertFile   string `json:"cert_file"`
		KeyFile    string `json:"key_file"`
		MinVersion string `json:"min_version"`
	} `json:"tls_server_config"`
	BasicAuthUsers map[string]string `json:"basic_auth_users"`
}

// TestTLSBasicAuthExample ties the example overlay, the example web config and the README together: the
// exporter is told to read the file where the Secret is mounted, the certificate paths point into that
// mount, the documented password matches the bcrypt hash, and the probes do not need credentials.
func TestTLSBasicAuthExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "examples", "web-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wc webConfig
	if err := sigsyaml.UnmarshalStrict(raw, &wc); err != nil {
		t.Fatalf("examples/web-config.yaml: %v", err)
	}
	hash, ok := wc.BasicAuthUsers["prometheus"]
	if !ok {
		t.Fatalf("example has no user prometheus: %v", wc.BasicAuthUsers)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(examplePassword)); err != nil {
		t.Errorf("the example hash does not match the documented password %q: %v", examplePassword, err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), examplePassword) {
		t.Errorf("deploy/README.md does not document the example password")
	}

	ds, c := daemonSet(t, "examples/tls-basic-auth")
	pod := ds.Spec.Template.Spec
	// The exporter's own TLS and basic auth replace kube-rbac-proxy: the sidecar and its RBAC go, the exporter
	// serves the node's addresses on its own port.
	if len(pod.Containers) != 1 || !slices.Contains(c.Args, "--web.listen-address=:9746") ||
		len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9746 {
		t.Errorf("containers %d, args %v, ports %+v: want the exporter alone on :9746 (port metrics)", len(pod.Containers), c.Args, c.Ports)
	}
	for _, o := range render(t, "examples/tls-basic-auth") {
		if strings.HasPrefix(o.GetName(), appName+"-") && strings.HasPrefix(o.GetKind(), "ClusterRole") {
			t.Errorf("%s %s: kube-rbac-proxy's RBAC without kube-rbac-proxy", o.GetKind(), o.GetName())
		}
	}
	var configArg string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--web.config.file="); ok {
			configArg = v
		}
	}
	if configArg == "" {
		t.Fatalf("args %v lack --web.config.file", c.Args)
	}
	// The state directory (TestDaemonSet) first, then the web config's Secret.
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].Name != "state" || !c.VolumeMounts[1].ReadOnly ||
		len(pod.Volumes) != 2 || pod.Volumes[0].HostPath == nil || pod.Volumes[1].Secret == nil {
		t.Fatalf("want the state directory and one read-only mount of one Secret volume: mounts %+v volumes %+v", c.VolumeMounts, pod.Volumes)
	}
	mount := c.VolumeMounts[1].MountPath
	if path.Dir(configArg) != mount {
		t.Errorf("--web.config.file=%s is not in the Secret mount %s", configArg, mount)
	}
	for _, f := range []string{wc.TLSServerConfig.CertFile, wc.TLSServerConfig.KeyFile} {
		if path.Dir(f) != mount {
			t.Errorf("web config refers to %s, outside the Secret mount %s", f, mount)
		}
	}
	if !strings.Contains(string(readme), "secret generic "+pod.Volumes[1].Secret.SecretName) ||
		!strings.Contains(string(readme), "--from-file="+path.Base(configArg)+"=") {
		t.Errorf("deploy/README.md does not show how to create Secret %s with key %s", pod.Volumes[1].Secret.SecretName, path.Base(configArg))
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.TCPSocket == nil {
			t.Errorf("%s probe %+v: behind basic auth only a TCP probe works without credentials in the pod spec", name, p)
		}
	}
}

func ptr[T any](v T) *T { return &v }
