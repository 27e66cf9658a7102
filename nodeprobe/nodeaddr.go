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
