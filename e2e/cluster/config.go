package cluster

import (
	"fmt"
	"io"
)

// ProxyMode is a kube-proxy --proxy-mode value.
type ProxyMode string

// The kube-proxy modes the harness runs.
const (
	IPTables ProxyMode = "iptables"
	NFTables ProxyMode = "nftables"
)

// Config describes the cluster Up creates. The zero value means three iptables-mode nodes.
type Config struct {
	// Nodes lists the worker nodes; empty means DefaultNodes(3).
	Nodes []NodeConfig
	// BinDir holds etcd, kube-apiserver, kube-proxy and kubectl; empty means build them with build-bins.sh
	// (or take $LT_E2E_BIN_DIR when set).
	BinDir string
	// ExporterBinary is the localtraffic-exporter binary; empty means build it from the repository root into
	// the cache (or take $LT_E2E_EXPORTER when set).
	ExporterBinary string
	// StartExporters starts one exporter per node at the end of Up (as the DaemonSet would).
	StartExporters bool
	// ExporterArgs go on the command line of every node's usual exporter (StartExporter), before a test's
	// own extra flags; exporters started with StartExporterOn get only theirs. Tests that check the opt-in
	// series pass the collector flags here; nil runs the exporters with their defaults, as the DaemonSet does.
	ExporterArgs []string
	// DualStack gives the cluster IPv6 as well: addresses on the bridge, nodes, client and pods (see
	// addresses.go), both families in the apiserver's --service-cluster-ip-range and kube-proxy's
	// --cluster-cidr, both InternalIPs and pod CIDRs on the Node objects, and an EndpointSlice per family for
	// Services that have both. Services stay single-stack IPv4 unless they ask for more (spec.ipFamilyPolicy).
	DualStack bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Controllers adds a real control plane's other half: kube-controller-manager, kube-scheduler and one node
	// agent per node (see package nodeagent), so Deployments, DaemonSets and the EndpointSlice controller run
	// as in a real cluster. The harness's own pods and slices (StartPod, SetEndpoints) keep working beside them.
	Controllers bool
	// PodSecurityDefault, when set (baseline, restricted), makes Pod Security admission enforce that level in
	// every namespace without a pod-security.kubernetes.io/enforce label of its own (an AdmissionConfiguration
	// default, as many managed clusters have). Empty: Kubernetes' default, nothing enforced.
	PodSecurityDefault string
	// Name, when set, goes into every namespace name of the cluster (lte2e-<pid>-<name>-…), so one process
	// can run two clusters at once.
	Name string
}

// NodeConfig describes one worker node.
type NodeConfig struct {
	// Name is the Node object's name and kube-proxy's --hostname-override.
	Name string
	// ProxyMode is kube-proxy's mode on this node; empty means iptables.
	ProxyMode ProxyMode
	// ControlPlane labels the node node-role.kubernetes.io/control-plane and taints it
	// node-role.kubernetes.io/control-plane:NoSchedule, as kubeadm does. It still runs kube-proxy (and the
	// exporter) like every other node.
	ControlPlane bool
}

// ControlPlaneRole is the label and taint key of control-plane nodes.
const ControlPlaneRole = "node-role.kubernetes.io/control-plane"

// ControllerNodes returns the layout of a cluster with controllers: workers node-1 … node-n (the last one in
// nftables mode when nft is set and n > 1) and a tainted control-plane node named control-plane.
func ControllerNodes(n int, nft bool) []NodeConfig {
	nodes := DefaultNodes(n)
	if nft && n > 1 {
		nodes[n-1].ProxyMode = NFTables
	}
	return append(nodes, NodeConfig{Name: "control-plane", ProxyMode: IPTables, ControlPlane: true})
}

// DefaultNodes returns n iptables-mode nodes named node-1 … node-n.
func DefaultNodes(n int) []NodeConfig {
	nodes := make([]NodeConfig, n)
	for i := range nodes {
		nodes[i] = NodeConfig{Name: fmt.Sprintf("node-%d", i+1), ProxyMode: IPTables}
	}
	return nodes
}

func (c Config) withDefaults() Config {
	if len(c.Nodes) == 0 {
		c.Nodes = DefaultNodes(3)
	}
	nodes := make([]NodeConfig, len(c.Nodes))
	for i, n := range c.Nodes {
		if n.ProxyMode == "" {
			n.ProxyMode = IPTables
		}
		nodes[i] = n
	}
	c.Nodes = nodes
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// clusterCIDRs is kube-proxy's --cluster-cidr: the pod network of every family the cluster has.
func (c *Cluster) clusterCIDRs() string {
	if c.cfg.DualStack {
		return ClusterCIDR + "," + ClusterCIDR6
	}
	return ClusterCIDR
}

// serviceCIDRs is the apiserver's --service-cluster-ip-range: IPv4 first, so Services that do not ask for a
// family stay IPv4 as before.
func (c *Cluster) serviceCIDRs() string {
	if c.cfg.DualStack {
		return ServiceCIDR + "," + ServiceCIDR6
	}
	return ServiceCIDR
}

// DualStack reports whether the cluster has IPv6 as well as IPv4.
func (c *Cluster) DualStack() bool { return c.cfg.DualStack }
