package verdict

import (
	"fmt"
	"slices"
	"strings"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// BasisAnnouncer: the announcer (MetalLB, Cilium L2, kube-vip, OpenELB, PureLB) records that it announces the
// load balancer IP (Cilium L2: or the externalIP) from this node (declared).
const BasisAnnouncer Basis = "announcer"

// ReasonAnnouncedHere: an announcer announces the load balancer IP (or, Cilium's L2 announcer, the externalIP)
// from this node, and the node drops it. The
// announcer reads no healthCheckNodePort: it sends the traffic here whatever the node's health check answers,
// so the page needs no grace window and no arrivals.
const ReasonAnnouncedHere Reason = "announced_here"

// announced is the rotation the announcers' records give a load balancer IP, and ok false when they say
// nothing of it (no record, or only records of sources that are not ok, which the view leaves out). A record
// that names this node puts it in rotation at once. A live exclusive (layer 2) record naming another node
// takes it out: one node answers ARP and NDP for the address, and the others receive only what stale ARP
// caches still send, which the arrivals meter weighs as for any destination out of rotation (observe). A
// Cilium lease whose holder stopped renewing it names nobody, nor does a kube-vip annotation the node's arrivals
// contradict (routeWithdrawn). MetalLB's BGP records naming other nodes take this one out too: routers send the
// address only to the nodes that advertise it, and MetalLB writes a ServiceBGPStatus for each of them (deleting
// it where the node advertises to no peer). Only a cluster-wide reader (the plugin, through announce.List) holds
// other nodes' BGP records; a node's exporter reads its own. ev is nil without node evidence (the plugin).
func announced(node kubeview.NodeState, svc kubeview.ServiceState, d Destination, ev *Evidence) (Rotation, string, Basis, bool) {
	var elsewhere, bgpElsewhere []announce.Announcement
	for _, a := range svc.Announcements {
		if a.Expired || !a.Covers(d.Address) || d.Kind == ExternalIP && a.Address == "" {
			continue // a record of every load balancer IP says nothing of an externalIP
		}
		if a.Node == node.Name && routeWithdrawn(a, d, ev) {
			continue
		}
		if a.Node == node.Name {
			why := "announced from this node by " + string(a.Source)
			if len(a.Peers) > 0 {
				why += " to BGP peers " + strings.Join(a.Peers, ", ")
			}
			return In, why, BasisAnnouncer, true
		}
		switch {
		case a.Exclusive:
			elsewhere = append(elsewhere, a)
		case a.Source == announce.SourceMetalLBBGP && len(a.Peers) > 0:
			bgpElsewhere = append(bgpElsewhere, a)
		}
	}
	if len(elsewhere) == 0 && len(bgpElsewhere) > 0 {
		var nodes []string
		for _, a := range bgpElsewhere {
			if !slices.Contains(nodes, a.Node) {
				nodes = append(nodes, a.Node)
			}
		}
		return Out, fmt.Sprintf("advertised over BGP by %s from %s only, not from this node: routers send the address to those nodes",
			announce.SourceMetalLBBGP, strings.Join(nodes, ", ")), "", true
	}
	if len(elsewhere) == 0 {
		return "", "", "", false
	}
	a := elsewhere[0]
	return Out, fmt.Sprintf("announced from node %s by %s: layer 2 delivers the address to that node alone", a.Node, a.Source), "", true
}

// routeWithdrawn: a kube-vip annotation naming this node for an address that is on none of its interfaces
// (BGP mode: kube-vip holds it on lo and advertises a route) while the meter, watching the address here, has
// seen nothing arrive for its quiet period (Observation.Silent). kube-vip writes kube-vip.io/vipHost when a
// node takes the Service and leaves it behind when it withdraws the route (no local endpoint any more, a
// lost election), so the annotation alone would page announced_here for as long as the Service lives.
// Silence for a quiet period is the network's answer: nothing routes the address here. The first repeated
// attempt ends the silence, and the record counts again. In ARP mode the address is on the holder's
// interface, which the annotation only confirms; the other announcers' records go when they stop announcing.
func routeWithdrawn(a announce.Announcement, d Destination, ev *Evidence) bool {
	if a.Source != announce.SourceKubeVIP || ev == nil || ev.Addresses == nil || ev.Addresses.Assigned(d.Address) || !watched(ev, d) {
		return false
	}
	return ev.Observed.Observe(d).Silent
}

// Unannounced reports whether svc has endpoints somewhere and a load balancer IP or externalIP whose
// announcer's layer 2 record names no live holder (a Cilium lease whose holder stopped renewing it), or which
// by the announcer's own objects should be announced and no record of it is (kubeview.ServiceState.
// UnrecordedIPs: MetalLB's allocation, known to a cluster-wide reader only; a Cilium policy's selection with
// no live lease), while no other record announces it: nobody answers for the address, and every client of it
// is lost, however many replicas serve. A fact of the cluster, the same on every node.
func Unannounced(svc kubeview.ServiceState) bool { return len(UnannouncedIPs(svc)) > 0 }

// UnannouncedIPs lists the addresses for which Unannounced holds, load balancer IPs then externalIPs in the
// Service's order (nil when the Service has no endpoint anywhere): what kubectl localtraffic status names.
// Only a record of the externalIP itself speaks of one: a record of every load balancer IP does not.
func UnannouncedIPs(svc kubeview.ServiceState) []string {
	if !hasEndpoints(svc) {
		return nil
	}
	var out []string
	lbIPs := len(svc.LoadBalancerIPs)
	for i, ip := range slices.Concat(svc.LoadBalancerIPs, svc.ExternalIPs) {
		if i >= lbIPs && slices.Contains(svc.LoadBalancerIPs, ip) {
			continue // the address is a load balancer IP too, and was judged as one
		}
		expired, live := slices.Contains(svc.UnrecordedIPs, ip), false
		for _, a := range svc.Announcements {
			if !a.Covers(ip) || i >= lbIPs && a.Address != ip {
				continue
			}
			if a.Expired {
				expired = true
			} else {
				live = true
			}
		}
		if expired && !live {
			out = append(out, ip)
		}
	}
	return out
}

// AnnouncedElsewhere reports whether the announcers' records take node out of rotation for d (a live layer 2
// record, or MetalLB's BGP records read cluster-wide, name other nodes, and none names this one): the decision is the announcer's, not the health
// check's, so a reader without the node's evidence (the plugin) need not call it unknown.
func AnnouncedElsewhere(node kubeview.NodeState, svc kubeview.ServiceState, d Destination) bool {
	if d.Kind != LoadBalancerIP && d.Kind != ExternalIP {
		return false
	}
	rot, _, _, ok := announced(node, svc, d, nil)
	return ok && rot == Out
}

func hasEndpoints(svc kubeview.ServiceState) bool {
	for _, f := range svc.Families {
		for _, p := range f.Ports {
			if p.ClusterWide {
				return true
			}
		}
	}
	return false
}
