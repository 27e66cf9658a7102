package cluster

import (
	"fmt"
	"net"
)

// The address plan. Every address lives only inside the harness's own network namespaces: the host's namespace
// gets no interface, route or address. The IPv6 plan mirrors the IPv4 one (ULA prefixes, RFC 4193; 2001:db8::
// documentation addresses, RFC 3849, for load balancers) and is used when Config.DualStack is set: node-2 is
// 10.250.0.12 and fd00:250::12, its pods 10.244.2.k and fd00:244:2::k.
const (
	bridgeCIDRBits  = 24
	bridgeCIDRBits6 = 64
	controlPlaneIP  = "10.250.0.2"
	controlPlaneIP6 = "fd00:250::2"
	clientIP        = "10.250.0.100"
	clientIP6       = "fd00:250::100"
	// ClusterCIDR is the pod network (kube-proxy --cluster-cidr); node i (1-based) owns 10.244.i.0/24.
	ClusterCIDR = "10.244.0.0/16"
	// ClusterCIDR6 is the IPv6 pod network of a dual-stack cluster; node i owns fd00:244:i::/64.
	ClusterCIDR6 = "fd00:244::/32"
	// ServiceCIDR is the apiserver's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/16"
	// ServiceCIDR6 is the second --service-cluster-ip-range of a dual-stack cluster.
	ServiceCIDR6 = "fd00:96::/112"
	// LoadBalancerCIDR is where tests pick LoadBalancer ingress IPs (TEST-NET-1, RFC 5737).
	LoadBalancerCIDR = "192.0.2.0/24"
	// LoadBalancerCIDR6 is where tests pick IPv6 LoadBalancer ingress IPs and externalIPs (RFC 3849).
	LoadBalancerCIDR6 = "2001:db8::/64"
	apiserverPort     = 6443
	// ExporterPort is the exporter's default listen port, used on every node.
	ExporterPort = 9746
	// KubeProxyHealthzPort is kube-proxy's --healthz-bind-address port.
	KubeProxyHealthzPort = 10256
	// podGateway6 is the pods' IPv6 default gateway: a link-local address on every pod's host-side veth. An
	// address on lo (the IPv4 trick) does not answer neighbour solicitations arriving on another interface.
	podGateway6 = "fe80::1"
)

func nodeIP(index int) string     { return fmt.Sprintf("10.250.0.%d", 10+index) }
func podCIDR(index int) string    { return fmt.Sprintf("10.244.%d.0/24", index) }
func podGateway(index int) string { return fmt.Sprintf("10.244.%d.1", index) }
func podIP(index, k int) string   { return fmt.Sprintf("10.244.%d.%d", index, k) }

// The IPv6 twins, decimal digits reused as hex so fd00:250::12 reads as node-2 like 10.250.0.12 does.
func nodeIP6(index int) string   { return fmt.Sprintf("fd00:250::%d", 10+index) }
func podCIDR6(index int) string  { return fmt.Sprintf("fd00:244:%d::/64", index) }
func podIP6(index, k int) string { return fmt.Sprintf("fd00:244:%d::%d", index, k) }

// IsIPv6 reports whether s is an IPv6 literal (not an IPv4 or IPv4-mapped one).
func IsIPv6(s string) bool {
	ip := net.ParseIP(s)
	return ip != nil && ip.To4() == nil
}

// HostPort joins an address and a port, bracketing IPv6 ("[fd00:250::12]:30090").
func HostPort(ip string, port int32) string {
	return net.JoinHostPort(ip, fmt.Sprint(port))
}
