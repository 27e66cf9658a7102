package nodeprobe

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	nodeIP := familyNodeIP(nodeIPs, family)
	nets, matchAll := nodePortNets(nodeIPs, family, nodePortAddresses)
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

// AssignedLister lists the addresses assigned to this host's real interfaces: those the network delivers
// their traffic to. NetlinkAddrs implements it.
type AssignedLister interface {
	AssignedAddrs() ([]net.IP, error)
}

// Links whose addresses are bound, not assigned: IPVS binds every Service address (cluster IPs, externalIPs,
// load balancer IPs) to kube-ipvs0 on every node, kube-router to kube-dummy-if, so that the node accepts them
// locally; neither answers ARP for them nor routes anything to the node. An address on lo is the node's own
// alone (a direct-server-return VIP, a pod gateway, loopback): no neighbour is told of it, so nothing is
// delivered to the node for it unless something else does (which the arrivals meter then observes).
var bindOnlyLinks = map[string]bool{"kube-ipvs0": true, "kube-dummy-if": true, "lo": true}

// LinkAddr is one address and the link it is on.
type LinkAddr struct {
	IP    net.IP
	Link  string // the link's name
	Type  string // netlink's link type: "dummy", "device", "veth", ...
	NoARP bool   // IFF_NOARP
}

// Assigned keeps the addresses on real interfaces that a client outside the node can use: not on kube-ipvs0,
// kube-dummy-if or lo, not on any dummy link that does not answer ARP (a dummy has IFF_NOARP unless someone
// cleared it; an announcer that holds a VIP on a dummy and answers for it clears it or routes it), and not
// link-local (an IPv6 fe80:: address every interface has, an IPv4 169.254/16 one): no client's traffic is
// routed to those, so they put no NodePort of their family in rotation.
func Assigned(addrs []LinkAddr) []net.IP {
	var out []net.IP
	for _, a := range addrs {
		if bindOnlyLinks[a.Link] || a.Type == "dummy" && a.NoARP || a.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.IP)
	}
	return out
}

// AssignedAddrs implements AssignedLister through netlink.
func (NetlinkAddrs) AssignedAddrs() ([]net.IP, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links with netlink: %w", err)
	}
	byIndex := make(map[int]netlink.Link, len(links))
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses with netlink: %w", err)
	}
	la := make([]LinkAddr, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		x := LinkAddr{IP: a.IP}
		if l, ok := byIndex[a.LinkIndex]; ok {
			x.Link, x.Type, x.NoARP = l.Attrs().Name, l.Type(), l.Attrs().RawFlags&unix.IFF_NOARP != 0
		}
		la = append(la, x)
	}
	return Assigned(la), nil
}

// NodePortAddrs are the local addresses kube-proxy accepts NodePorts on (pkg/proxy/util/nodeport_addresses.go):
// with no CIDR of a family in nodePortAddresses (or one matching everything), every local address of that
// family; otherwise those inside its CIDRs, with the keywords expanded as PickFamilyAddress expands them.
func NodePortAddrs(local []net.IP, nodeIPs []string, nodePortAddresses []string) []net.IP {
	var out []net.IP
	for _, family := range []string{"IPv4", "IPv6"} {
		nets, all := nodePortNets(nodeIPs, family, nodePortAddresses)
		for _, l := range local {
			if FamilyOf(l) != family {
				continue
			}
			if all || len(nets) == 0 {
				out = append(out, l)
				continue
			}
			for _, n := range nets {
				if n.Contains(l) {
					out = append(out, l)
					break
				}
			}
		}
	}
	return out
}

func familyNodeIP(nodeIPs []string, family string) net.IP {
	for _, c := range nodeIPs {
		if ip := net.ParseIP(c); ip != nil && FamilyOf(ip) == family {
			return ip
		}
	}
	return nil
}

// nodePortNets expands nodePortAddresses for one family as kube-proxy does; all: a CIDR matches everything.
func nodePortNets(nodeIPs []string, family string, nodePortAddresses []string) (nets []*net.IPNet, all bool) {
	nodeIP := familyNodeIP(nodeIPs, family)
	add := func(cidr string) {
		if _, n, err := net.ParseCIDR(cidr); err == nil && FamilyOf(n.IP) == family {
			if ones, _ := n.Mask.Size(); ones == 0 {
				all = true
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
	return nets, all
}
