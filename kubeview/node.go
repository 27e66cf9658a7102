package kubeview

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/utils/net"
)

// NodeState is what the exporter needs of its own Node.
type NodeState struct {
	Name  string
	Found bool
	// InternalIPs are the Node's InternalIP addresses, canonical, in API order (one per family on dual-stack).
	InternalIPs []string
	Deleting    bool // deletionTimestamp set (a finalizer holds it)
	ToBeDeleted bool // the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint
	// Excluded: labelled node.kubernetes.io/exclude-from-external-load-balancers with a value that does not parse
	// as false. The cloud service controller reads the label so: kubeadm puts it on control-plane nodes with an
	// empty value, which excludes them; "false" keeps a node in.
	Excluded bool
}

// Draining is kube-proxy's own test for /healthz (since 1.28): the node is going away.
func (n NodeState) Draining() bool { return n.Deleting || n.ToBeDeleted }

// InternalIP is the Node's first InternalIP of family f, "" when it has none.
func (n NodeState) InternalIP(f corev1.IPFamily) string {
	for _, ip := range n.InternalIPs {
		if IPFamilyOf(ip) == f {
			return ip
		}
	}
	return ""
}

// LoadBalancerEligible: the cloud service controller keeps the node in every load balancer's target set. It drops
// nodes labelled for exclusion and nodes going away (deletionTimestamp, the autoscaler's taint); a node without a
// Node object is in no target set at all.
func (n NodeState) LoadBalancerEligible() bool { return n.Found && !n.Excluded && !n.Draining() }

// NodePortEligible: clients that send to node addresses directly (NodePort Services, or load balancers that
// are not the cloud controller's) are expected to reach the node. An excluded node is treated as taken out of
// external traffic, and a node going away as one clients move off. A node whose Node object is missing still
// has its addresses and kube-proxy's rules, so it stays eligible.
func (n NodeState) NodePortEligible() bool { return !n.Excluded && !n.Draining() }

// NodeStateOf reads what matters of a Node object.
func NodeStateOf(n *corev1.Node) NodeState {
	st := NodeState{Name: n.Name, Found: true, Deleting: n.DeletionTimestamp != nil}
	if v, ok := n.Labels[LabelExcludeFromLB]; ok {
		st.Excluded = excludes(v)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeletedByCA {
			st.ToBeDeleted = true
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip := canonicalIP(a.Address); ip != "" {
			st.InternalIPs = append(st.InternalIPs, ip)
		}
	}
	return st
}

// excludes is the cloud service controller's reading of the exclusion label's value (k8s.io/cloud-provider
// controllers/service: the label excludes unless its value parses as false).
func excludes(value string) bool {
	b, err := strconv.ParseBool(value)
	return err != nil || b
}

// IPFamilyOf tells an address's family as kube-proxy parses it (leading zeros in IPv4 accepted); "" when it is
// not an IP address.
func IPFamilyOf(ip string) corev1.IPFamily {
	switch utilnet.IPFamilyOfString(ip) {
	case utilnet.IPv4:
		return corev1.IPv4Protocol
	case utilnet.IPv6:
		return corev1.IPv6Protocol
	}
	return ""
}

// canonicalIP is the address as kube-proxy keys it (ParseIPSloppy, then String); "" when it is not an IP.
func canonicalIP(s string) string {
	ip := utilnet.ParseIPSloppy(s)
	if ip == nil {
		return ""
	}
	return ip.String()
}
