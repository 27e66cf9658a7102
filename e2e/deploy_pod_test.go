package e2e

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// podSandbox is the shell wrapper that gives the exporter what the kubelet gives the DaemonSet's container,
// inside the node's network namespace (hostNetwork): `ip netns exec` already runs it in a private mount
// namespace, where it bind-mounts the host's root read-only (readOnlyRootFilesystem), puts a tmpfs on /run
// with the projected ServiceAccount token, CA and namespace (in-cluster config, no --kubeconfig), chroots into
// that view and drops to the manifest's capabilities with no_new_privs (allowPrivilegeEscalation: false),
// keeping UID 0 (runAsUser: 0). The manifest's hostPath volumes come as "<host dir>:<mount path>" words in
// $SANDBOX_HOSTPATHS, each bound writable at its mount path; the mount point is made in a tmpfs over its
// parent, so nothing is created on the host's own filesystem.
const podSandbox = `set -eu
root=$1 secrets=$2; shift 2
mount --rbind / "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o size=1m,mode=0755 tmpfs "$root/run"
sa="$root/run/secrets/kubernetes.io/serviceaccount"
mkdir -p "$sa"
cp "$secrets/token" "$secrets/ca.crt" "$secrets/namespace" "$sa/"
for b in ${SANDBOX_HOSTPATHS:-}; do
	src=${b%%:*} dst=${b#*:}
	mount -t tmpfs -o size=1m,mode=0755 tmpfs "$root$(dirname "$dst")"
	mkdir -p "$root$dst"
	mount --bind "$src" "$root$dst"
done
unset SANDBOX_HOSTPATHS
exec chroot "$root" setpriv "$@"
`

// podProcess is an exporter running as the shipped DaemonSet's container would.
type podProcess struct {
	*cluster.Process
	logs *lockedBuffer // its stdout and stderr, which the tests read whole
	// hostPaths are the node's directories behind the manifest's hostPath volumes, by mount path.
	hostPaths map[string]string
}

// expandKubeletVars applies the kubelet's $(VAR) expansion of container args: defined variables are
// replaced, $$ escapes a dollar, anything else stays as written.
func expandKubeletVars(s string, env map[string]string) string {
	re := regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	return re.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// containerEnv resolves the container's env the way the kubelet would for ds's pod on node (hostNetwork: the
// pod's IP is the node's; the pod's name is shippedPodName's).
func containerEnv(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, node *cluster.Node) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expandKubeletVars(e.Value, env)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = node.Name
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = shippedPodName(ds, node)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = ds.Namespace
		case e.ValueFrom.FieldRef != nil && (e.ValueFrom.FieldRef.FieldPath == "status.podIP" || e.ValueFrom.FieldRef.FieldPath == "status.hostIP"):
			env[e.Name] = node.IP
		case e.ValueFrom.ResourceFieldRef != nil:
			rf := e.ValueFrom.ResourceFieldRef
			q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(rf.Resource, "limits."))]
			if !ok || !strings.HasPrefix(rf.Resource, "limits.") {
				fatalf(t, "env %s: resourceFieldRef %s not simulated", e.Name, rf.Resource)
			}
			div := int64(1)
			if !rf.Divisor.IsZero() {
				div = rf.Divisor.Value()
			}
			env[e.Name] = strconv.FormatInt(q.Value()/div, 10)
		default:
			fatalf(t, "env %s: valueFrom %+v not simulated", e.Name, e.ValueFrom)
		}
	}
	return env
}

// shippedPodName is the name the tests give ds's pod on node (the DaemonSet controller's would end in a random
// suffix): the pod's metadata.name in its env, and the name of its Pod object where a test creates one.
func shippedPodName(ds *appsv1.DaemonSet, node *cluster.Node) string {
	return ds.Name + "-" + node.Name
}

// startAsPod starts the exporter binary in node's network namespace with the DaemonSet's args, env and
// security context, authenticating with a projected token of the shipped ServiceAccount. caps overrides the
// manifest's capability set when non-nil (to show what happens without one).
func startAsPod(t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, node *cluster.Node, caps []corev1.Capability) *podProcess {
	t.Helper()
	ctx := testContext(t)
	spec := ds.Spec.Template.Spec
	ctr := spec.Containers[0]
	sc := ctr.SecurityContext
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsUser == nil || *spec.SecurityContext.RunAsUser != 0 {
		fatalf(t, "the sandbox simulates runAsUser 0 only; the manifest says %+v", spec.SecurityContext)
	}
	if caps == nil {
		caps = sc.Capabilities.Add
	}
	// drop: [ALL] plus add: caps. The bounding set limits what UID 0 gets on exec; inheritable and ambient
	// are emptied as the container runtime does.
	if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		fatalf(t, "the sandbox simulates capabilities drop [ALL] only; the manifest says %+v", sc)
	}
	bounding := "-all"
	for _, cp := range caps {
		bounding += ",+" + strings.ToLower(string(cp))
	}
	setpriv := []string{"--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=" + bounding}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		setpriv = append(setpriv, "--no-new-privs")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fatalln(t, "the sandbox always mounts the root read-only; the manifest no longer asks for it")
	}

	// The projected ServiceAccount volume.
	secrets := t.TempDir()
	exp := int64(3600)
	tr, err := c.Admin().CoreV1().ServiceAccounts(ds.Namespace).CreateToken(ctx, spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "token for %s/%s: %v", ds.Namespace, spec.ServiceAccountName, err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		fatalln(t, err)
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(ds.Namespace)} {
		if err := os.WriteFile(filepath.Join(secrets, name), data, 0o600); err != nil {
			fatalln(t, err)
		}
	}

	api, err := url.Parse(c.APIServerURL)
	if err != nil {
		fatalln(t, err)
	}
	ctrEnv := containerEnv(t, ds, ctr, node)
	var args []string
	for _, a := range ctr.Args {
		args = append(args, expandKubeletVars(a, ctrEnv))
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		fatalln(t, err)
	}
	shArgs := append([]string{"-c", podSandbox, "sandbox", root, secrets}, setpriv...)
	shArgs = append(append(shArgs, "--", c.Binaries().Exporter), args...)
	// The container's environment: the image's PATH, the manifest's env, the in-cluster service variables.
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + node.Name,
		"KUBERNETES_SERVICE_HOST=" + api.Hostname(),
		"KUBERNETES_SERVICE_PORT=" + api.Port(),
	}
	for k, v := range ctrEnv {
		env = append(env, k+"="+v)
	}
	// The hostPath volumes (the state file's directory): a directory of this test stands for the node's own.
	hostPaths := map[string]string{}
	var binds []string
	for _, vm := range ctr.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.HostPath == nil {
				continue
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate || vm.ReadOnly || vm.SubPath != "" {
				fatalf(t, "the sandbox simulates writable DirectoryOrCreate hostPath mounts only; the manifest says %+v, %+v", v, vm)
			}
			dir := t.TempDir()
			hostPaths[vm.MountPath] = dir
			binds = append(binds, dir+":"+vm.MountPath)
		}
	}
	env = append(env, "SANDBOX_HOSTPATHS="+strings.Join(binds, " "))
	p := &podProcess{logs: &lockedBuffer{}, hostPaths: hostPaths}
	p.Process, err = cluster.StartProcess(cluster.ProcessSpec{Name: "exporter-pod-" + node.Name, LogDir: t.TempDir(), NS: node.NS,
		Bin: "sh", Args: shArgs, Env: env, Stdout: p.logs, Stderr: p.logs})
	if err != nil {
		fatalf(t, "start exporter sandbox: %v", err)
	}
	t.Cleanup(func() {
		// SIGTERM first, as the kubelet does; the exporter must stop within the grace period.
		grace := 10 * time.Second
		if ds.Spec.Template.Spec.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
		}
		if !p.Stop(grace) {
			errorf(t, "exporter did not stop within terminationGracePeriodSeconds (%s) of SIGTERM", grace)
		}
		if t.Failed() {
			t.Logf("exporter output:\n%s", tail(p.logs.String(), 4000))
		}
	})
	return p
}

// scrapeAsPod gives node's port to the pod started by startAsPod and startSidecarAsPod (stopping the harness's
// exporter there, which holds it through hostNetwork, and restarting it afterwards), waits for the DaemonSet's
// readiness probe, checks the liveness probes, and returns one scrape of the telemetry path — through
// kube-rbac-proxy with the token of a ServiceAccount bound to the shipped metrics-reader ClusterRole, as
// Prometheus scrapes — and the exporter's output so far.
func scrapeAsPod(t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, node *cluster.Node, caps []corev1.Capability) (cluster.Metrics, string) {
	t.Helper()
	ctx := testContext(t)
	p := runPodAsShipped(t, c, ds, node, caps)
	telemetry := "/metrics"
	for _, a := range p.exporter.Args {
		if v, ok := strings.CutPrefix(a, "--web.telemetry-path="); ok {
			telemetry = v
		}
	}
	code, body, err := getAs(ctx, node, p.metricsBase+telemetry, metricsReaderToken(t, c))
	if err != nil || code != http.StatusOK {
		fatalf(t, "scrape %s: %d %v %s\nkube-rbac-proxy:\n%s", telemetry, code, err, tail(body, 500), node.KubeRBACProxyLog("pod", 3000))
	}
	m, err := cluster.ParseMetrics(body)
	if err != nil {
		fatalln(t, err)
	}
	// For sizing the DaemonSet's memory request/limit: the exporter's resident set after a full scrape (the shell
	// and chroot/setpriv exec'd in place, so the pid is the exporter's).
	if st, err := cluster.ReadProcStatus(p.proc.Pid()); err == nil {
		t.Logf("exporter on %s: VmRSS %.1f MiB, VmHWM %.1f MiB", node.Name, float64(st.VmRSS)/(1<<20), float64(st.VmHWM)/(1<<20))
	} else {
		t.Logf("exporter on %s: %v", node.Name, err)
	}
	return m, p.proc.logs.String()
}

// TestDeployExporterRunsAsThePod runs the real exporter exactly as the shipped DaemonSet configures it — its
// args and env, in-cluster config with a projected token of the shipped ServiceAccount (so only the shipped RBAC
// applies), host network, read-only root, UID 0 with only the manifest's capabilities and no_new_privs — on an
// iptables node and on an nftables node: the kubelet's probes pass, the informers sync without an RBAC denial,
// and kube-proxy's rules are read. Without NET_ADMIN the same pod still serves but cannot read the rules.
func TestDeployExporterRunsAsThePod(t *testing.T) {
	c := sharedCluster(t)
	ds := renderedDaemonSet(t, c, "base")
	byMode := map[cluster.ProxyMode]*cluster.Node{}
	for _, n := range c.Nodes() {
		if byMode[n.ProxyMode] == nil {
			byMode[n.ProxyMode] = n
		}
	}
	for _, mode := range []cluster.ProxyMode{cluster.IPTables, cluster.NFTables} {
		node := byMode[mode]
		if node == nil {
			fatalf(t, "the shared cluster has no %s node", mode)
		}
		t.Run(string(mode), func(t *testing.T) {
			m, logs := scrapeAsPod(t, c, ds, node, nil)
			if len(m.Series("localtraffic_build_info", nil)) != 1 {
				errorf(t, "no localtraffic_build_info in the scrape")
			}
			synced := m.Series("localtraffic_informer_synced", nil)
			if len(synced) == 0 {
				errorf(t, "no localtraffic_informer_synced series")
			}
			for _, s := range synced {
				if s.GetGauge().GetValue() != 1 {
					errorf(t, "informer not synced with the shipped RBAC: %v", s)
				}
			}
			if strings.Contains(strings.ToLower(logs), "forbidden") {
				errorf(t, "the exporter hit an RBAC denial with the shipped ClusterRole:\n%s", tail(logs, 4000))
			}
			if err := m.Expect("localtraffic_rules_read_success", cluster.Labels{"node": node.Name}, 1); err != nil {
				errorf(t, "rules not read with the shipped capabilities: %v\n%s", err, tail(logs, 4000))
			}
			if len(m.Series("localtraffic_rules_info", cluster.Labels{"node": node.Name, "mode": string(mode)})) != 1 {
				errorf(t, "rules_info does not say mode=%s:\n%s", mode, m.Grep("localtraffic_rules_info"))
			}
			// The state file is written into the mounted hostPath: with the read-only root, no
			// CAP_DAC_OVERRIDE and UID 0, the only writable place, and enough.
			if err := m.Expect("localtraffic_state_file_state", cluster.Labels{"node": node.Name, "state": "new"}, 1); err != nil {
				errorf(t, "the shipped pod did not write its state file: %v\n%s", err, m.Grep("localtraffic_state_file_state"))
			}
		})
	}

	t.Run("without_NET_ADMIN", func(t *testing.T) {
		node := byMode[cluster.IPTables]
		fewer := []corev1.Capability{} // non-nil: nil would mean "as the manifest says"
		for _, cp := range ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add {
			if cp != "NET_ADMIN" {
				fewer = append(fewer, cp)
			}
		}
		m, _ := scrapeAsPod(t, c, ds, node, fewer)
		if err := m.Expect("localtraffic_rules_read_success", cluster.Labels{"node": node.Name}, 0); err != nil {
			errorf(t, "rules read without NET_ADMIN, so the sandbox does not restrict capabilities: %v", err)
		}
	})
}
