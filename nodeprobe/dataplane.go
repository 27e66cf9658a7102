package nodeprobe

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// LinkLister lists the names of this host's network links. netlink implements it; tests use a fixed list.
type LinkLister interface {
	LinkNames() ([]string, error)
}

// NetlinkLinks lists the links of the network namespace the exporter runs in (the host's, under hostNetwork).
type NetlinkLinks struct{}

// LinkNames implements LinkLister.
func (NetlinkLinks) LinkNames() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links with netlink: %w", err)
	}
	names := make([]string, 0, len(links))
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return names, nil
}

// Replacement is a kube-proxy replacement found on the node, and the link that shows it.
type Replacement struct {
	Name string // the dataplane: "Cilium", "Calico eBPF", "OVN-Kubernetes", "kube-router"
	Link string // the link it leaves on every node it runs on
}

func (r Replacement) String() string { return fmt.Sprintf("%s (link %s)", r.Name, r.Link) }

// replacementLinks are links a dataplane that serves Services without kube-proxy creates in the host network
// namespace of every node it runs on, and only then:
//   - Cilium: cilium_host, its host-side device (every Cilium node; with kubeProxyReplacement it serves NodePorts
//     and the health check node ports itself).
//   - Calico eBPF: the bpfin.cali / bpfout.cali veth pair Felix creates in BPF mode for host-networked service
//     access (felix/dataplane/linux/dataplanedefs: BPFInDev, BPFOutDev; present whenever connect-time load
//     balancing leaves UDP, or everything, to it: the default since BPFConnectTimeLoadBalancing=TCP), and
//     removes when BPF mode is turned off.
//   - OVN-Kubernetes: ovn-k8s-mp0, the management port of its node (OVN load balancers serve Services; it never
//     runs with kube-proxy).
//   - kube-router with --run-service-proxy: kube-dummy-if, the dummy link its IPVS service proxy binds Service
//     IPs to.
//
// One caveat the docs spell out: Cilium also runs beside kube-proxy (kubeProxyReplacement=false); a node of such
// a cluster whose kube-proxy never came up shows cilium_host and no kube-proxy rule. Pin --dataplane=kube-proxy
// there, and a missing kube-proxy alerts.
var replacementLinks = []Replacement{
	{Name: "Cilium", Link: "cilium_host"},
	{Name: "Calico eBPF", Link: "bpfin.cali"},
	{Name: "Calico eBPF", Link: "bpfout.cali"},
	{Name: "OVN-Kubernetes", Link: "ovn-k8s-mp0"},
	{Name: "kube-router", Link: "kube-dummy-if"},
}

// FindReplacement returns the kube-proxy replacement whose link is on the node; ok is false when none is.
func FindReplacement(links LinkLister) (Replacement, bool, error) {
	names, err := links.LinkNames()
	if err != nil {
		return Replacement{}, false, err
	}
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	for _, r := range replacementLinks {
		if have[r.Link] {
			return r, true, nil
		}
	}
	return Replacement{}, false, nil
}
