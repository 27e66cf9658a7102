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
	// ExternalIPs are the Node's ExternalIP addresses, canonical, in API order: kube-proxy takes its node IP of a
	// family from them when no InternalIP has that family.
	ExternalIPs []string
	Deleting    bool // deletionTimestamp set (a finalizer holds it)
	ToBeDeleted bool // the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint
	// Unschedulable is spec.unschedulable: the node is cordoned (kubectl drain cordons before it evicts), which
	// tells an episode's cause (package exposure); kube-proxy and the load balancers ignore it.
	Unschedulable bool
	// Excluded: labelled node.kubernetes.io/exclude-from-external-load-balancers with a value that does not parse
	// as false. The cloud service controller reads the label so: kubeadm puts it on control-plane nodes with an
	// empty value, which excludes them; "false" keeps a node in.
	Excluded bool
	// Virtual: a node backed by another service, not a machine (virtual-kubelet: Azure ACI, Admiralty, ...; EKS
	// Fargate). No kube-proxy runs there and no node port is served, so it never receives a Service's external
	// traffic; the exporter does not run there either.
	Virtual bool
	// ProviderID is spec.providerID: the cloud whose controller's defaults decide where a load balancer checks.
	ProviderID string
	// PodCIDRs are spec.podCIDRs: the sources of this node's pods, whose traffic is not external.
	PodCIDRs []string
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
func (n NodeState) LoadBalancerEligible() bool {
	return n.Found && !n.Excluded && !n.Draining() && !n.Virtual
}

// NodePortEligible: clients that send to node addresses directly (NodePort Services, or load balancers that
// are not the cloud controller's) are expected to reach the node. An excluded node is treated as taken out of
// external traffic, and a node going away as one clients move off. A node whose Node object is missing still
// has its addresses and kube-proxy's rules, so it stays eligible. A virtual node serves no node port.
func (n NodeState) NodePortEligible() bool { return !n.Excluded && !n.Draining() && !n.Virtual }

// KubeProxyNodeIPs are the addresses kube-proxy takes its node IPs from, in its order: every InternalIP, then
// every ExternalIP (k8s.io/kubernetes pkg/util/node GetNodeHostIPs); its node IP of a family is the first of
// that family here.
func (n NodeState) KubeProxyNodeIPs() []string {
	return append(append(make([]string, 0, len(n.InternalIPs)+len(n.ExternalIPs)), n.InternalIPs...), n.ExternalIPs...)
}

// NodeStateOf reads what matters of a Node object.
func NodeStateOf(n *corev1.Node) NodeState {
	st := NodeState{Name: n.Name, Found: true, Deleting: n.DeletionTimestamp != nil, ProviderID: n.Spec.ProviderID,
		PodCIDRs: n.Spec.PodCIDRs, Unschedulable: n.Spec.Unschedulable}
	if v, ok := n.Labels[LabelExcludeFromLB]; ok {
		st.Excluded = excludes(v)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeletedByCA {
			st.ToBeDeleted = true
		}
	}
	st.Virtual = isVirtual(n)
	for _, a := range n.Status.Addresses {
		ip := canonicalIP(a.Address)
		switch {
		case ip == "":
		case a.Type == corev1.NodeInternalIP:
			st.InternalIPs = append(st.InternalIPs, ip)
		case a.Type == corev1.NodeExternalIP:
			st.ExternalIPs = append(st.ExternalIPs, ip)
		}
	}
	return st
}

// Marks of a virtual node. virtual-kubelet's providers label their Node type=virtual-kubelet and taint it
// virtual-kubelet.io/provider (the DaemonSet affinity its docs recommend keys on the label); EKS labels Fargate
// nodes eks.amazonaws.com/compute-type=fargate. deploy/ keeps the exporter off the same nodes.
const (
	LabelVirtualKubeletType = "type"
	VirtualKubeletType      = "virtual-kubelet"
	TaintVirtualKubelet     = "virtual-kubelet.io/provider"
	LabelEKSComputeType     = "eks.amazonaws.com/compute-type"
	EKSComputeTypeFargate   = "fargate"
)

func isVirtual(n *corev1.Node) bool {
	if n.Labels[LabelVirtualKubeletType] == VirtualKubeletType || n.Labels[LabelEKSComputeType] == EKSComputeTypeFargate {
		return true
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintVirtualKubelet {
			return true
		}
	}
	return false
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
