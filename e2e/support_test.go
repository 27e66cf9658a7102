package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestOldestAdmittedKubernetes: the core scenarios on the oldest Kubernetes the chart admits — its kube-apiserver
// and kube-proxy (tools/kubeoldest, built by build-bins.sh --oldest), three iptables-mode nodes, the exporter of
// this repository. kube-proxy of that release writes its own rules and health answers (no /livez healthy field,
// an older /configz), and the verdicts hold to what real packets did, as on the pinned release.
func TestOldestAdmittedKubernetes(t *testing.T) {
	requireRoot(t)
	want := oldestPinned(t)
	// A cold build of the two binaries takes minutes (run-e2e.sh starts it with the suite): the test's own
	// deadline bounds it, not a guess.
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
		defer cancel()
	}
	bin, err := cluster.OldestBinDir(ctx)
	if err != nil {
		fatalln(t, err)
	}
	c, err := cluster.Up(ctx, cluster.Config{
		Name:           "oldest",
		BinDir:         bin,
		Nodes:          cluster.DefaultNodes(3),
		StartExporters: true,
		ExporterArgs:   everySeries(),
		Log:            os.Stderr,
	})
	if err != nil {
		fatalf(t, "cluster on %s: %v", want, err)
	}
	defer c.Close()

	v, err := c.Admin().Discovery().ServerVersion()
	if err != nil {
		fatalln(t, err)
	}
	if v.GitVersion != want {
		fatalf(t, "kube-apiserver reports %s, want the pinned oldest %s", v.GitVersion, want)
	}
	out, err := exec.CommandContext(ctx, c.Binaries().KubeProxy, "--version").Output()
	if err != nil {
		fatalf(t, "kube-proxy --version: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "Kubernetes "+want {
		fatalf(t, "kube-proxy --version: %q, want Kubernetes %s", got, want)
	}
	for _, n := range c.Nodes() {
		// The exporter read this kube-proxy's own /configz (its local detector and addresses), not defaults.
		eventually(t, converge, "kube-proxy's configuration on "+n.Name, func() error {
			return expectMetrics(ctx, c, n.Name, metricIs("localtraffic_kube_proxy_config_state",
				cluster.Labels{"node": n.Name, "state": "read"}, 1))
		})
	}
	t.Run("LoadBalancer", func(t *testing.T) { loadBalancerScenario(t, c) })
	t.Run("ScaleDown", func(t *testing.T) { scaleDownScenario(t, c) })
}

// oldestPinned returns the k8s.io/kubernetes version tools/kubeoldest pins.
func oldestPinned(t *testing.T) string {
	t.Helper()
	mod, err := cluster.ModuleDir()
	if err != nil {
		fatalln(t, err)
	}
	b, err := os.ReadFile(filepath.Join(mod, "tools", "kubeoldest", "go.mod"))
	if err != nil {
		fatalln(t, err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v1\.\d+\.\d+)\b`).FindSubmatch(b)
	if m == nil {
		fatalln(t, "tools/kubeoldest/go.mod requires no k8s.io/kubernetes")
	}
	return string(m[1])
}
