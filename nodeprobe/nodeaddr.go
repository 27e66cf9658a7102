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

// PickFamilyAddress chooses where to probe a health check node port of one IP family ("IPv4" or "IPv6"):
// kube-proxy binds those ports on the node's addresses inside its --nodeport-addresses CIDRs (cidrs), or on
// the node's primary address of the family when that is empty or "primary" (nftables mode's default). It
// returns the candidate (the Node's InternalIPs, in order) of that family that is configured locally and, when
// cidrs are given, inside them; failing that, any local address of the family inside cidrs. "" when none.
func PickFamilyAddress(local []net.IP, candidates []string, family string, cidrs []string) string {
	// kube-proxy keeps only the CIDRs of the proxier's family; with none left, the family's proxier serves
	// every address of the family (pkg/proxy/util/nodeport_addresses.go), so the InternalIP will do.
	var nets []*net.IPNet
	for _, c := range cidrs {
		if _, n, err := net.ParseCIDR(c); err == nil && FamilyOf(n.IP) == family {
			nets = append(nets, n)
		}
	}
	inside := func(ip net.IP) bool {
		if len(nets) == 0 {
			return true
		}
		for _, n := range nets {
			if n.Contains(ip) {
				return true
			}
		}
		return false
	}
	isLocal := func(ip net.IP) bool {
		for _, l := range local {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
	for _, c := range candidates {
		ip := net.ParseIP(c)
		if ip != nil && FamilyOf(ip) == family && isLocal(ip) && inside(ip) {
			return ip.String()
		}
	}
	if len(nets) == 0 {
		return ""
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
