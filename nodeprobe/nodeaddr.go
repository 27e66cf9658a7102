package nodeprobe

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// AddrLister lists the addresses configured on this host's interfaces. netlink implements it; tests use a
// fixed list.
type AddrLister interface {
	LocalAddrs() ([]net.IP, error)
}

// NetlinkAddrs lists the addresses of the network namespace the exporter runs in (the host's, under
// hostNetwork) through netlink.
type NetlinkAddrs struct{}

// LocalAddrs implements AddrLister.
func (NetlinkAddrs) LocalAddrs() ([]net.IP, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses with netlink: %w", err)
	}
	out := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet != nil {
			out = append(out, a.IP)
		}
	}
	return out, nil
}

// ErrNoLocalAddress means none of the Node's InternalIPs is configured on this host: probing them would ask
// another machine, and its answer says nothing about this node.
var ErrNoLocalAddress = errors.New("no InternalIP of the Node is configured on this host")

// PickLocalAddress returns the first candidate (the Node's InternalIPs, in order) that is configured locally.
func PickLocalAddress(lister AddrLister, candidates []string) (string, error) {
	if len(candidates) == 0 {
		return "", fmt.Errorf("the Node reports no InternalIP: %w", ErrNoLocalAddress)
	}
	local, err := lister.LocalAddrs()
	if err != nil {
		return "", err
	}
	for _, c := range candidates {
		ip := net.ParseIP(c)
		if ip == nil {
			continue
		}
		for _, l := range local {
			if l.Equal(ip) {
				return c, nil
			}
		}
	}
	return "", fmt.Errorf("InternalIPs %v: %w", candidates, ErrNoLocalAddress)
}

// PickFamilyAddress chooses where to probe a health check node port of one IP family ("IPv4" or "IPv6"), as
// kube-proxy binds them (pkg/proxy/healthcheck/service_health.go, pkg/proxy/util/nodeport_addresses.go):
// nodeIPs are kube-proxy's node IPs (KubeProxyNodeIPs: one per family, InternalIP before ExternalIP) and
// nodePortAddresses its --nodeport-addresses, with the keywords expanded as kube-proxy expands them ("primary":
// the node IP of the family; "localhost": loopback; "all": every address). Without a CIDR of the family the
// family's proxier listens on every address: the node IP of the family, when configured on this host, is where
// a load balancer checks. With CIDRs it listens on each local address inside them: the node IP when it is one of
// them, else the first such local address (never link-local). "" when there is none.
func PickFamilyAddress(local []net.IP, nodeIPs []string, family string, nodePortAddresses []string) string {
	var nodeIP net.IP
	for _, c := range nodeIPs {
		if ip := net.ParseIP(c); ip != nil && FamilyOf(ip) == family {
			nodeIP = ip
			break
		}
	}
	var nets []*net.IPNet
	matchAll := false
	add := func(cidr string) {
		if _, n, err := net.ParseCIDR(cidr); err == nil && FamilyOf(n.IP) == family {
			if ones, _ := n.Mask.Size(); ones == 0 {
				matchAll = true
			}
			nets = append(nets, n)
		}
	}
	for _, a := range nodePortAddresses {
		switch a {
		case "primary":
			if nodeIP != nil && !nodeIP.IsLoopback() {
				add(nodeIP.String() + map[bool]string{true: "/32", false: "/128"}[family == "IPv4"])
			}
		case "localhost":
			add("127.0.0.0/8")
			add("::1/128")
		case "all":
			add("0.0.0.0/0")
			add("::/0")
		default:
			add(a)
		}
	}
	isLocal := func(ip net.IP) bool {
		for _, l := range local {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
	if len(nets) == 0 || matchAll {
		if nodeIP != nil && isLocal(nodeIP) {
			return nodeIP.String()
		}
		return ""
	}
	inside := func(ip net.IP) bool {
		for _, n := range nets {
			if n.Contains(ip) {
				return true
			}
		}
		return false
	}
	if nodeIP != nil && isLocal(nodeIP) && inside(nodeIP) {
		return nodeIP.String()
	}
	for _, l := range local {
		if FamilyOf(l) == family && inside(l) && !l.IsLinkLocalUnicast() {
			return l.String()
		}
	}
	return ""
}

// FamilyOf is "IPv4" or "IPv6" (Kubernetes' IPFamily spelling).
func FamilyOf(ip net.IP) string {
	if ip.To4() != nil {
		return "IPv4"
	}
	return "IPv6"
}
