package cluster

import "fmt"

// The address plan. Every address lives only inside the harness's own network namespaces: the host's namespace
// gets no interface, route or address.
const (
	bridgeCIDRBits = 24
	controlPlaneIP = "10.250.0.2"
	clientIP       = "10.250.0.100"
	// ClusterCIDR is the pod network (kube-proxy --cluster-cidr); node i (1-based) owns 10.244.i.0/24.
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR is the apiserver's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/16"
	// LoadBalancerCIDR is where tests pick LoadBalancer ingress IPs (TEST-NET-1, RFC 5737).
	LoadBalancerCIDR = "192.0.2.0/24"
	apiserverPort    = 6443
	// ExporterPort is the exporter's default listen port, used on every node.
	ExporterPort = 9746
	// KubeProxyHealthzPort is kube-proxy's --healthz-bind-address port.
	KubeProxyHealthzPort = 10256
)

func nodeIP(index int) string     { return fmt.Sprintf("10.250.0.%d", 10+index) }
func podCIDR(index int) string    { return fmt.Sprintf("10.244.%d.0/24", index) }
func podGateway(index int) string { return fmt.Sprintf("10.244.%d.1", index) }
func podIP(index, k int) string   { return fmt.Sprintf("10.244.%d.%d", index, k) }
