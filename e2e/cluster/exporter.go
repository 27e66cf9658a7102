package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// The ServiceAccount the shipped DaemonSet runs as.
const (
	ExporterNamespace      = "localtraffic-system"
	ExporterServiceAccount = "localtraffic-exporter"
)

// ServiceAccountKubeconfig requests a token for the ServiceAccount namespace/name (TokenRequest API, as the
// kubelet would project it) and writes a kubeconfig with it that works from inside the namespaces. The token
// carries exactly the ServiceAccount's RBAC rights.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	exp := int64(24 * 3600)
	tr, err := c.admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return "", fmt.Errorf("read CA: %w", err)
	}
	path := filepath.Join(c.WorkDir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := writeKubeconfig(path, c.APIServerURL, ca, namespace+"-"+name, tr.Status.Token); err != nil {
		return "", err
	}
	return path, nil
}

// ExporterKubeconfig returns a kubeconfig for the shipped exporter ServiceAccount (see ServiceAccountKubeconfig).
func (c *Cluster) ExporterKubeconfig(ctx context.Context) (string, error) {
	return c.ServiceAccountKubeconfig(ctx, ExporterNamespace, ExporterServiceAccount)
}

// MetricsURL is the exporter's /metrics URL on the node's address (reachable from the harness namespaces; use
// Cluster.Forward for a host address).
func (n *Node) MetricsURL() string {
	return fmt.Sprintf("http://%s:%d/metrics", n.IP, ExporterPort)
}

// StartExporters starts an exporter on every node and waits until each serves /metrics.
func (c *Cluster) StartExporters(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := n.StartExporter(ctx); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := n.WaitExporter(ctx, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// StartExporter runs the exporter in the node's namespace as the DaemonSet would (host network, NODE_NAME,
// the ServiceAccount's token), with extraArgs appended. It does not wait; see WaitExporter.
func (n *Node) StartExporter(ctx context.Context, extraArgs ...string) error {
	return n.StartExporterEnv(ctx, nil, extraArgs...)
}

// StartExporterEnv is StartExporter with env ("NAME=value") added to the DaemonSet's runtime settings.
func (n *Node) StartExporterEnv(ctx context.Context, env []string, extraArgs ...string) error {
	kubeconfig, err := n.c.ExporterKubeconfig(ctx)
	if err != nil {
		return err
	}
	if err := n.startUsualExporter(kubeconfig, env, extraArgs); err != nil {
		return err
	}
	// Outside the node's lock: a watcher asks the nodes which exporters run.
	n.c.exportersChanged()
	return nil
}

func (n *Node) startUsualExporter(kubeconfig string, env, extraArgs []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exporter != nil {
		if done, _ := n.exporter.Exited(); !done {
			return fmt.Errorf("exporter on %s already runs", n.Name)
		}
	}
	args := append(append([]string{}, n.c.cfg.ExporterArgs...), extraArgs...)
	p, err := n.c.startProcess("exporter-"+n.Name, n.NS, "env", append(slices.Clone(env), n.exporterCommand(kubeconfig, ExporterPort, args)...)...)
	if err != nil {
		return err
	}
	n.exporter = p
	return nil
}

// ExporterRuntimeEnv is the Go runtime's settings deploy/base/daemonset.yaml gives the exporter
// (TestExporterRuntimeEnvIsTheDaemonSets keeps them equal): memory figures measured here are the deployed ones.
func ExporterRuntimeEnv() []string { return []string{"GOMEMLIMIT=230MiB", "GOGC=25"} }

// exporterCommand is env(1)'s arguments that run the exporter with the DaemonSet's runtime settings and
// command line.
func (n *Node) exporterCommand(kubeconfig string, port int, extra []string) []string {
	return n.exporterCommandOn(kubeconfig, "", port, extra)
}

func (n *Node) exporterCommandOn(kubeconfig, host string, port int, extra []string) []string {
	cmd := append(ExporterRuntimeEnv(), n.c.bins.Exporter)
	return append(cmd, n.exporterArgs(kubeconfig, host, port, extra)...)
}

// exporterArgs is the exporter's command line as the DaemonSet gives it, listening on host:port (host "": every
// address), with extra appended. Every node's exporters share the host's filesystem here, so each gets its own
// state file (ExporterStateFile), as each node's pod has its own hostPath; extra may name another
// (--state.file=: none) and another log level than debug.
func (n *Node) exporterArgs(kubeconfig, host string, port int, extra []string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--node-name=" + n.Name,
		fmt.Sprintf("--web.listen-address=%s", net.JoinHostPort(host, strconv.Itoa(port))),
		"--log.format=logfmt",
	}
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--log.level") }) {
		args = append(args, "--log.level=debug")
	}
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--state.file") }) {
		args = append(args, "--state.file="+n.ExporterStateFile(port))
	}
	return append(args, extra...)
}

// ExporterStateFile is the state file of the node's exporter listening on port: it outlives the exporter's
// restarts (StopExporter, StartExporter), as the DaemonSet's hostPath outlives its pods.
func (n *Node) ExporterStateFile(port int) string {
	return filepath.Join(n.c.WorkDir, fmt.Sprintf("exporter-state-%s-%d.json", n.Name, port))
}

// StopExporter stops the node's exporter.
func (n *Node) StopExporter() {
	n.stopProcess(&n.exporter, 5*time.Second)
	n.c.exportersChanged()
}

// KillExporter kills the node's exporter with SIGKILL, as the kernel's OOM killer does: no shutdown path runs.
func (n *Node) KillExporter() {
	n.stopProcess(&n.exporter, 0)
	n.c.exportersChanged()
}

// ExporterRunning tells whether the node's usual exporter (StartExporter, on ExporterPort) runs: started and
// neither stopped nor exited.
func (n *Node) ExporterRunning() bool {
	n.mu.Lock()
	p := n.exporter
	n.mu.Unlock()
	if p == nil {
		return false
	}
	done, _ := p.Exited()
	return !done
}

// WatchExporters calls fn after every start and stop of a node's usual exporter (StartExporter, StopExporter,
// KillExporter): a scraper outside the harness keeps its targets current with it. fn runs on the caller's
// goroutine, outside the node's lock, and must not start or stop exporters itself.
func (c *Cluster) WatchExporters(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exporterWatchers = append(c.exporterWatchers, fn)
}

// exportersChanged tells the watchers (WatchExporters) that a usual exporter started or stopped.
func (c *Cluster) exportersChanged() {
	c.mu.Lock()
	watchers := slices.Clone(c.exporterWatchers)
	c.mu.Unlock()
	for _, fn := range watchers {
		fn()
	}
}

// WaitExporter waits until the node's exporter answers /metrics with 200.
func (n *Node) WaitExporter(ctx context.Context, timeout time.Duration) error {
	return n.awaitHTTP(ctx, timeout, "exporter", &n.exporter, n.MetricsURL())
}

// EnsureNamespace creates a Kubernetes namespace if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	_, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// MetricsURLOn is the /metrics URL of an exporter listening on port on the node's address.
func (n *Node) MetricsURLOn(port int) string {
	return fmt.Sprintf("http://%s:%d/metrics", n.IP, port)
}

// StartExporterOn starts an additional exporter in the node's namespace listening on port (not ExporterPort),
// beside the node's usual one, with extraArgs appended (e.g. --rules.mode=none), and waits until it serves
// /metrics. Scrape it with Cluster.MetricsOn; StopExporterOn stops it, and Close stops it too.
func (n *Node) StartExporterOn(ctx context.Context, port int, extraArgs ...string) error {
	return n.startExtraExporter(ctx, "", port, extraArgs)
}

// StartExporterOnLoopback is StartExporterOn with the exporter listening on 127.0.0.1:port only, as the shipped
// DaemonSet runs it behind kube-rbac-proxy (StartKubeRBACProxy puts the proxy on the node's address).
func (n *Node) StartExporterOnLoopback(ctx context.Context, port int, extraArgs ...string) error {
	return n.startExtraExporter(ctx, "127.0.0.1", port, extraArgs)
}

func (n *Node) startExtraExporter(ctx context.Context, host string, port int, extraArgs []string) error {
	if port == ExporterPort {
		// The usual exporter holds the port on every address: only a stopped one gives it up (the loopback
		// exporter behind kube-rbac-proxy, as the shipped pod has it).
		n.mu.Lock()
		usual := n.exporter
		n.mu.Unlock()
		if host == "" || usual != nil {
			return fmt.Errorf("exporter on %s: port %d is the node's usual exporter (StartExporter; StopExporter first for a loopback one)", n.Name, port)
		}
	}
	kubeconfig, err := n.c.ExporterKubeconfig(ctx)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if p := n.extraExporters[port]; p != nil {
		if done, _ := p.Exited(); !done {
			n.mu.Unlock()
			return fmt.Errorf("exporter on %s:%d already runs", n.Name, port)
		}
	}
	p, err := n.c.startProcess(fmt.Sprintf("exporter-%s-%d", n.Name, port), n.NS, "env", n.exporterCommandOn(kubeconfig, host, port, extraArgs)...)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	if n.extraExporters == nil {
		n.extraExporters = map[int]*Process{}
	}
	n.extraExporters[port] = p
	n.mu.Unlock()
	// Tracked by the cluster as well, so Close stops it with the control plane's processes.
	n.c.track(p)
	url := n.MetricsURLOn(port)
	if host != "" {
		url = fmt.Sprintf("http://%s/metrics", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return p.Await(ctx, time.Minute, pollInterval, func() error {
		return httpGetOK(ctx, netns.Dialer{NS: n.NS}, url)
	})
}

// StopExporterOn stops the exporter StartExporterOn started on port; none running is not an error.
func (n *Node) StopExporterOn(port int) {
	n.mu.Lock()
	p := n.extraExporters[port]
	delete(n.extraExporters, port)
	n.mu.Unlock()
	p.Stop(5 * time.Second)
}

// StartKubeRBACProxy runs kube-rbac-proxy (Binaries.KubeRBACProxy) in the node's network namespace with args, as
// the DaemonSet's sidecar: authenticated as the exporter's ServiceAccount (the pod's), through a kubeconfig instead
// of the in-cluster files. name tells its log apart. It does not wait (the caller knows the address to wait for);
// the returned function stops it, and Close stops it too.
func (n *Node) StartKubeRBACProxy(ctx context.Context, name string, args ...string) (stop func(), err error) {
	bin := n.c.bins.KubeRBACProxy
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-rbac-proxy (e2e/build-bins.sh builds it from e2e/tools/rbacproxy): %w", err)
	}
	kubeconfig, err := n.c.ExporterKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	p, err := n.c.startProcess(fmt.Sprintf("kube-rbac-proxy-%s-%s", n.Name, name), n.NS, bin,
		append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	if err != nil {
		return nil, err
	}
	n.c.track(p)
	return func() { p.Stop(5 * time.Second) }, nil
}

// KubeRBACProxyLog is the tail of a proxy's log StartKubeRBACProxy started under name.
func (n *Node) KubeRBACProxyLog(name string, bytes int64) string {
	return n.c.LogTail(fmt.Sprintf("kube-rbac-proxy-%s-%s", n.Name, name), bytes)
}
