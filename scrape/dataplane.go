package scrape

// DataplaneKind is what serves Services on the node, as exported in localtraffic_dataplane_info.
type DataplaneKind string

// The dataplanes.
const (
	// DataplaneKubeProxy: kube-proxy in iptables or nftables mode; its rules decide the verdict.
	DataplaneKubeProxy DataplaneKind = "kube-proxy"
	// DataplaneIPVS: kube-proxy in IPVS mode; the API view and the health check node ports decide.
	DataplaneIPVS DataplaneKind = "ipvs"
	// DataplaneReplacement: no kube-proxy (Cilium, Calico eBPF, OVN-Kubernetes, kube-router), by the flag or a
	// link the replacement leaves (nodeprobe.FindReplacement); the API view and the health check node ports
	// decide, and no kube-proxy series are exported.
	DataplaneReplacement DataplaneKind = "replacement"
)
