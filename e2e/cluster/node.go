package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// Node is a worker node: a network namespace with its own kube-proxy and exporter.
type Node struct {
	// Name is the Node object's name.
	Name string
	// Index is the node's 1-based position; it picks the node's addresses.
	Index int
	// NS is the node's network namespace.
	NS string
	// IP is the node's InternalIP on the bridge.
	IP string
	// PodCIDR is the node's pod network (10.244.<Index>.0/24).
	PodCIDR string
	// IP6 is the node's IPv6 InternalIP on the bridge (fd00:250::<10+Index>); empty unless Config.DualStack.
	IP6 string
	// PodCIDR6 is the node's IPv6 pod network (fd00:244:<Index>::/64); empty unless Config.DualStack.
	PodCIDR6 string
	// ProxyMode is the mode kube-proxy was last started in.
	ProxyMode ProxyMode
	// ControlPlane marks the tainted control-plane node (NodeConfig.ControlPlane).
	ControlPlane bool

	c         *Cluster
	mu        sync.Mutex
	kubeProxy *Process
	// kubeProxyArgs is kube-proxy's last command line (its mirror pod shows it).
	kubeProxyArgs []string
	exporter      *Process
	podSeq        int
	// extraExporters are exporters beside the usual one, by listen port (StartExporterOn).
	extraExporters map[int]*Process
}

// IPs returns the node's InternalIPs, IPv4 first (the primary family, as kube-proxy reads it).
func (n *Node) IPs() []string {
	if n.IP6 == "" {
		return []string{n.IP}
	}
	return []string{n.IP, n.IP6}
}

// IPOf returns the node's address of family f ("" when it has none).
func (n *Node) IPOf(f corev1.IPFamily) string {
	if f == corev1.IPv6Protocol {
		return n.IP6
	}
	return n.IP
}

// podCIDRs is spec.podCIDRs: one per family, IPv4 first.
func (n *Node) podCIDRs() []string {
	if n.PodCIDR6 == "" {
		return []string{n.PodCIDR}
	}
	return []string{n.PodCIDR, n.PodCIDR6}
}

// Register creates (or re-creates) the Node object with its InternalIPs (both families on a dual-stack
// cluster) and a Ready condition, through the status subresource as a kubelet would.
func (n *Node) Register(ctx context.Context) error {
	nodes := n.c.admin.CoreV1().Nodes()
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			"kubernetes.io/hostname": n.Name,
			"kubernetes.io/os":       "linux",
		}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR, PodCIDRs: n.podCIDRs()},
	}
	created, err := nodes.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, n.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	var addrs []corev1.NodeAddress
	for _, ip := range n.IPs() {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	created.Status = corev1.NodeStatus{
		Addresses: append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name}),
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "e2e harness node", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update node %s status: %w", n.Name, err)
	}
	return nil
}

// KubeProxyOptions change how StartKubeProxy runs kube-proxy.
type KubeProxyOptions struct {
	// Mode overrides the node's proxy mode (and becomes it).
	Mode ProxyMode
	// HostnameOverride replaces the node name given to kube-proxy (to reproduce a node-name mismatch).
	HostnameOverride string
	// ExtraArgs are appended to kube-proxy's command line.
	ExtraArgs []string
	// NoClusterCIDR leaves --cluster-cidr out (kube-proxy refuses an empty one): in its default ClusterCIDR
	// local-detect mode kube-proxy then has no local detector and does not short-circuit pod traffic.
	NoClusterCIDR bool
	// IPTablesBackend, "legacy" or "nft", makes the `iptables`, `iptables-save` and `iptables-restore` (and
	// ip6tables) kube-proxy runs that backend's: kube-proxy runs whatever `iptables` PATH finds (in the
	// kube-proxy image a wrapper picks the backend; here the host's alternatives, nft on Debian). "" leaves
	// PATH alone.
	IPTablesBackend string
}

// StartKubeProxy starts kube-proxy in the node's namespace with the flags known to work in a network namespace
// (no conntrack sysctl writes). It does not wait for health; see WaitKubeProxyHealthy.
func (n *Node) StartKubeProxy(ctx context.Context, opts KubeProxyOptions) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubeProxy != nil {
		if done, _ := n.kubeProxy.Exited(); !done {
			return fmt.Errorf("kube-proxy on %s already runs", n.Name)
		}
	}
	if opts.Mode != "" {
		n.ProxyMode = opts.Mode
	}
	hostname := n.Name
	if opts.HostnameOverride != "" {
		hostname = opts.HostnameOverride
	}
	kubeconfig := filepath.Join(n.c.WorkDir, "kube-proxy.kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		ca, err := os.ReadFile(n.c.CAFile)
		if err != nil {
			return fmt.Errorf("read CA: %w", err)
		}
		if err := writeKubeconfig(kubeconfig, n.c.APIServerURL, ca, "kube-proxy", n.c.proxyToken); err != nil {
			return err
		}
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + hostname,
		"--proxy-mode=" + string(n.ProxyMode),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		fmt.Sprintf("--healthz-bind-address=0.0.0.0:%d", KubeProxyHealthzPort),
		"--metrics-bind-address=127.0.0.1:10249",
		"--v=2",
	}
	if !opts.NoClusterCIDR {
		args = append(args, "--cluster-cidr="+n.c.clusterCIDRs())
	}
	args = append(args, opts.ExtraArgs...)
	bin, argv := n.c.bins.KubeProxy, args
	if opts.IPTablesBackend != "" {
		path, err := n.iptablesShim(opts.IPTablesBackend)
		if err != nil {
			return err
		}
		// env(1) sets PATH and execs kube-proxy in place (the same pid, so Stop and Pdeathsig reach it).
		bin, argv = "env", append([]string{"PATH=" + path, n.c.bins.KubeProxy}, args...)
	}
	p, err := n.c.startProcess("kube-proxy-"+n.Name, n.NS, bin, argv...)
	if err != nil {
		return err
	}
	n.kubeProxy = p
	n.kubeProxyArgs = args
	return nil
}

// iptablesShim writes a directory of iptables, iptables-save, iptables-restore (and ip6tables) scripts that
// exec backend's commands, and returns a PATH that finds them first.
func (n *Node) iptablesShim(backend string) (string, error) {
	if backend != "legacy" && backend != "nft" {
		return "", fmt.Errorf("iptables backend %q: want legacy or nft", backend)
	}
	shim := filepath.Join(n.c.WorkDir, "iptables-"+backend)
	if err := os.MkdirAll(shim, 0o755); err != nil {
		return "", fmt.Errorf("iptables shim: %w", err)
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			script := fmt.Sprintf("#!/bin/sh\nexec %s-%s%s \"$@\"\n", fam, backend, suffix)
			if err := os.WriteFile(filepath.Join(shim, fam+suffix), []byte(script), 0o755); err != nil {
				return "", fmt.Errorf("iptables shim: %w", err)
			}
		}
	}
	return shim + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", nil
}

// StopKubeProxy stops kube-proxy and leaves its rules in place (as a crashed kube-proxy would).
func (n *Node) StopKubeProxy() { n.stopProcess(&n.kubeProxy, 10*time.Second) }

// stopProcess takes the node's process *proc out (under the node's lock) and stops it with grace.
func (n *Node) stopProcess(proc **Process, grace time.Duration) {
	n.mu.Lock()
	p := *proc
	*proc = nil
	n.mu.Unlock()
	p.Stop(grace)
}

// FreezeKubeProxy stops kube-proxy's process group with SIGSTOP: its sockets stay open and accept connections,
// but nothing answers — a hung kube-proxy. ThawKubeProxy resumes it.
func (n *Node) FreezeKubeProxy() error { return n.signalKubeProxy(syscall.SIGSTOP) }

// ThawKubeProxy resumes a frozen kube-proxy with SIGCONT.
func (n *Node) ThawKubeProxy() error { return n.signalKubeProxy(syscall.SIGCONT) }

func (n *Node) signalKubeProxy(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.kubeProxy
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kube-proxy on %s is not running", n.Name)
	}
	return p.Signal(sig)
}

// CleanupRules removes every rule kube-proxy programmed on the node (iptables and nftables); run it after
// StopKubeProxy before starting kube-proxy in another mode.
func (n *Node) CleanupRules(ctx context.Context) error {
	if _, err := netns.Output(ctx, n.NS, n.c.bins.KubeProxy, "--cleanup", "--v=0"); err != nil {
		return fmt.Errorf("kube-proxy --cleanup on %s: %w", n.Name, err)
	}
	for _, family := range []string{"ip", "ip6"} {
		// Absent tables are fine: the cleanup above may have removed them already.
		_, _ = netns.Output(ctx, n.NS, "nft", "delete", "table", family, "kube-proxy")
	}
	return nil
}

// KubeProxyRunning reports whether kube-proxy is running on the node.
func (n *Node) KubeProxyRunning() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubeProxy == nil {
		return false
	}
	done, _ := n.kubeProxy.Exited()
	return !done
}

// WaitKubeProxyHealthy waits until kube-proxy's /livez answers 200 on the node's IP.
func (n *Node) WaitKubeProxyHealthy(ctx context.Context, timeout time.Duration) error {
	return n.awaitHTTP(ctx, timeout, "kube-proxy", &n.kubeProxy, fmt.Sprintf("http://%s:%d/livez", n.IP, KubeProxyHealthzPort))
}

// awaitHTTP waits until the node's process *proc (read under the node's lock) answers url with 200 from the
// node's namespace; what names it in the error when none was started.
func (n *Node) awaitHTTP(ctx context.Context, timeout time.Duration, what string, proc **Process, url string) error {
	n.mu.Lock()
	p := *proc
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s on %s not started", what, n.Name)
	}
	return p.Await(ctx, timeout, pollInterval, func() error {
		return httpGetOK(ctx, netns.Dialer{NS: n.NS}, url)
	})
}

// Exec runs a command inside the node's namespace and returns its stdout (iptables-save, nft, curl …).
func (n *Node) Exec(ctx context.Context, name string, args ...string) (string, error) {
	return netns.Output(ctx, n.NS, name, args...)
}

// Dialer returns a dialer that connects from inside the node's namespace.
func (n *Node) Dialer() netns.Dialer { return netns.Dialer{NS: n.NS} }

// SetLabel sets a label on the Node object (a merge patch; value may be empty, as kubeadm's
// node.kubernetes.io/exclude-from-external-load-balancers is).
func (n *Node) SetLabel(ctx context.Context, key, value string) error {
	return n.patchLabel(ctx, key, value)
}

// RemoveLabel removes a label from the Node object; an absent label is not an error.
func (n *Node) RemoveLabel(ctx context.Context, key string) error {
	return n.patchLabel(ctx, key, nil)
}

func (n *Node) patchLabel(ctx context.Context, key string, value any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
	if err != nil {
		return fmt.Errorf("label patch: %w", err)
	}
	if _, err := n.c.admin.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s (%s=%v): %w", n.Name, key, value, err)
	}
	return nil
}

// AddAddress assigns ip (IPv4 or IPv6) to the node's uplink (eth0) as a host address, as keepalived or kube-vip
// in ARP mode hold a VIP on the interface of the node that owns it. It is not a Node address.
func (n *Node) AddAddress(ctx context.Context, ip string) error {
	prefix, err := hostPrefix(ip)
	if err != nil {
		return err
	}
	args := []string{"-n", n.NS, "addr", "add", prefix, "dev", "eth0"}
	if IsIPv6(ip) {
		args = append(args, "nodad")
	}
	if err := netns.IP(ctx, args...); err != nil {
		return fmt.Errorf("add %s to %s: %w", ip, n.Name, err)
	}
	return nil
}

// DelAddress removes an address AddAddress assigned; an absent address is not an error.
func (n *Node) DelAddress(ctx context.Context, ip string) error {
	prefix, err := hostPrefix(ip)
	if err != nil {
		return err
	}
	out, err := netns.Output(ctx, n.NS, "ip", "-o", "addr", "show", "dev", "eth0", "to", prefix)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", n.Name, err)
	}
	if strings.TrimSpace(out) == "" {
		return nil
	}
	if err := netns.IP(ctx, "-n", n.NS, "addr", "del", prefix, "dev", "eth0"); err != nil {
		return fmt.Errorf("remove %s from %s: %w", ip, n.Name, err)
	}
	return nil
}

// hostPrefix is ip/32 or ip/128.
func hostPrefix(ip string) (string, error) {
	_, prefix, err := hostRoute(ip)
	return prefix, err
}
