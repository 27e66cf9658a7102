// Package cluster runs a real Kubernetes data path on one machine for end-to-end tests: etcd and
// kube-apiserver in a control-plane network namespace, one network namespace per worker node running a real
// kube-proxy (and the exporter, as the DaemonSet would), pod namespaces serving real HTTP, and an outside
// client namespace, all joined by a bridge in a namespace of its own. There is no kubelet, scheduler or
// controller manager: the harness plays the endpoint controller by writing EndpointSlices.
//
// Typical use:
//
//	c, err := cluster.Up(ctx, cluster.Config{StartExporters: true})
//	defer c.Close()
//	pod, _ := c.StartPod(ctx, cluster.PodConfig{Namespace: "kubelings", Name: "checkout-0", Node: "node-1"})
//	_ = c.SetEndpoints(ctx, "kubelings", "checkout", []cluster.Endpoint{{Pod: pod}})
//	res := c.Request(ctx, c.Node("node-2").IP+":30090") // res.Verdict == cluster.Blackhole
//	m, _ := c.Metrics(ctx, "node-2")                    // m.Value("localtraffic_blackhole", labels)
//
// Everything runs as root (network namespaces). Close, or the next Up after a crash, removes every namespace,
// process and file the harness created; children die with the harness process (Pdeathsig).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// Prefix starts the name of every network namespace and temporary directory the harness creates, followed by
// the owning process's pid, so Reap can tell stale ones from those of a live run.
const Prefix = "lte2e-"

// Cluster is a running cluster. Its methods are safe for concurrent use unless noted.
type Cluster struct {
	cfg    Config
	bins   Binaries
	log    io.Writer
	prefix string // Prefix + pid + "-": starts every namespace name of this run

	// WorkDir holds certificates, kubeconfigs, etcd data and every process's log (<name>.log).
	WorkDir string
	// BridgeNS, ControlPlaneNS and ClientNS name the network namespaces of the bridge, of etcd and
	// kube-apiserver, and of the outside client.
	BridgeNS, ControlPlaneNS, ClientNS string
	// APIServerURL is the apiserver's address as seen from inside the namespaces.
	APIServerURL string
	// CAFile is the CA that signed the apiserver's serving certificate.
	CAFile string

	nodes       []*Node
	admin       *kubernetes.Clientset
	adminConfig *rest.Config
	adminToken  string
	hostKubecfg string
	nsKubecfg   string
	proxyToken  string
	// apiserver is the running kube-apiserver (guarded by mu), restarted with apiserverArgs.
	apiserver     *Process
	apiserverArgs []string

	mu         sync.Mutex
	namespaces []string
	procs      []*Process
	listeners  []net.Listener
	pods       map[string]*Pod
	podSeq     int
	clientMu   sync.Mutex // serialises route changes in the client namespace (RequestVia)
	closed     bool
	agents     *agentSet // node agents when cfg.Controllers (controllers.go)
	ctrlTokens controllerTokens
	// exporterWatchers are called when a node's usual exporter starts or stops (WatchExporters); guarded by mu.
	exporterWatchers []func()
}

// Up builds (or reuses) the binaries, reaps what crashed runs left behind, and starts the cluster. On error
// everything started so far is torn down again.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: needs root for network namespaces")
	}
	cfg = cfg.withDefaults()
	if err := Reap(ctx); err != nil {
		return nil, err
	}
	pfx := fmt.Sprintf("%s%d-", Prefix, os.Getpid())
	if cfg.Name != "" {
		pfx += cfg.Name + "-"
	}
	work, err := os.MkdirTemp("", pfx)
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	// The exporter is built into the work dir unless given: concurrent test binaries (go test ./... runs
	// packages in parallel) must not overwrite each other's running executable.
	bins, err := EnsureBinaries(ctx, cfg.BinDir, cfg.ExporterBinary, filepath.Join(work, "bin"))
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	c := &Cluster{
		cfg:            cfg,
		bins:           bins,
		log:            cfg.Log,
		prefix:         pfx,
		WorkDir:        work,
		BridgeNS:       pfx + "br",
		ControlPlaneNS: pfx + "cp",
		ClientNS:       pfx + "client",
		APIServerURL:   fmt.Sprintf("https://%s:%d", controlPlaneIP, apiserverPort),
		pods:           map[string]*Pod{},
	}
	for i, nc := range cfg.Nodes {
		c.nodes = append(c.nodes, &Node{
			Name:         nc.Name,
			Index:        i + 1,
			NS:           pfx + nc.Name,
			IP:           nodeIP(i + 1),
			PodCIDR:      podCIDR(i + 1),
			ProxyMode:    nc.ProxyMode,
			ControlPlane: nc.ControlPlane,
			c:            c,
		})
	}
	if err := c.up(ctx); err != nil {
		tail := c.failureLogs()
		c.Close()
		return nil, fmt.Errorf("cluster up: %w%s", err, tail)
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context) error {
	start := time.Now()
	c.logf("network namespaces (%s*)", c.prefix)
	if err := c.setupNetwork(ctx); err != nil {
		return err
	}
	c.logf("control plane: etcd, kube-apiserver")
	if err := c.startControlPlane(ctx); err != nil {
		return err
	}
	c.logf("nodes: registering %d Node objects", len(c.nodes))
	for _, n := range c.nodes {
		if err := n.Register(ctx); err != nil {
			return err
		}
		if err := n.applyRole(ctx); err != nil {
			return err
		}
	}
	if err := c.applyExporterRBAC(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		c.logf("%s: kube-proxy (%s)", n.Name, n.ProxyMode)
		if err := n.StartKubeProxy(ctx, KubeProxyOptions{}); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := n.WaitKubeProxyHealthy(ctx, 90*time.Second); err != nil {
			return err
		}
	}
	if c.cfg.Controllers {
		if err := c.startControllers(ctx); err != nil {
			return err
		}
	}
	if c.cfg.StartExporters {
		if err := c.StartExporters(ctx); err != nil {
			return err
		}
	}
	c.logf("cluster up in %s (logs in %s)", time.Since(start).Round(100*time.Millisecond), c.WorkDir)
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.log, "[cluster %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Nodes returns the worker nodes in order.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns the named node, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Binaries returns the executables in use (kubectl for tests that shell out to it).
func (c *Cluster) Binaries() Binaries { return c.bins }

// Close stops every process (exporters, kube-proxies, apiserver, etcd), closes the pods' servers, deletes every
// network namespace and the work directory. Set LT_E2E_KEEP_LOGS=1 to keep the work directory. It is
// idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	agents := c.agents
	c.agents = nil
	c.mu.Unlock()
	// Node agents first, before the pods are collected: they would otherwise start pods for the controllers
	// while everything goes away.
	agents.stop()
	c.mu.Lock()
	procs := c.procs
	listeners := c.listeners
	var nodeProcs []*Process
	for _, n := range c.nodes {
		n.mu.Lock()
		nodeProcs = append(nodeProcs, n.exporter, n.kubeProxy)
		n.exporter, n.kubeProxy = nil, nil
		n.mu.Unlock()
	}
	for _, p := range c.pods {
		listeners = append(listeners, p.listeners...)
	}
	namespaces := c.namespaces
	c.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range nodeProcs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(5 * time.Second) }()
	}
	wg.Wait()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(10 * time.Second)
	}
	for _, l := range listeners {
		_ = l.Close()
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := len(namespaces) - 1; i >= 0; i-- {
		if err := netns.Delete(ctx, namespaces[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if os.Getenv("LT_E2E_KEEP_LOGS") == "" {
		if err := os.RemoveAll(c.WorkDir); err != nil {
			errs = append(errs, fmt.Errorf("remove work dir: %w", err))
		}
	} else {
		c.logf("kept logs in %s", c.WorkDir)
	}
	return errors.Join(errs...)
}

// Reap deletes network namespaces and work directories left by harness processes that no longer run
// (a run killed before Close). Namespaces of live runs are left alone.
func Reap(ctx context.Context) error {
	names, err := netns.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if pid, ok := netns.OwnerPID(Prefix, name); ok && !netns.Alive(pid) {
			if err := netns.Delete(ctx, name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), Prefix+"*"))
	for _, d := range dirs {
		if pid, ok := netns.OwnerPID(Prefix, filepath.Base(d)); ok && !netns.Alive(pid) {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// failureLogs returns the tails of every process log, for an error message after a failed start.
func (c *Cluster) failureLogs() string {
	var b strings.Builder
	c.mu.Lock()
	procs := append([]*Process(nil), c.procs...)
	c.mu.Unlock()
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.kubeProxy != nil {
			procs = append(procs, n.kubeProxy)
		}
		if n.exporter != nil {
			procs = append(procs, n.exporter)
		}
		n.mu.Unlock()
	}
	for _, p := range procs {
		fmt.Fprintf(&b, "\n--- %s (tail) ---\n%s", p.Name(), p.LogTail(2000))
	}
	return b.String()
}

// LogTail returns the last n bytes of a process's log: "etcd", "kube-apiserver", "kube-proxy-<node>",
// "exporter-<node>".
func (c *Cluster) LogTail(name string, n int64) string {
	return fileTail(filepath.Join(c.WorkDir, name+".log"), n)
}
