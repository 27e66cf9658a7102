package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

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

var dataplaneInfo = newMetric("dataplane_info", prometheus.GaugeValue,
	"Which dataplane serves Services on this node: kube-proxy (its rules are read), ipvs (kube-proxy in IPVS mode: API view) or replacement (no kube-proxy: API view and health check node ports); always 1.",
	"dataplane")

var kubeProxyProgrammed = stable(newMetric("kube_proxy_programmed", prometheus.GaugeValue,
	"1 when kube-proxy's rules exist on this node; 0 when they were read and hold no kube-proxy rule at all: the node is not programmed (before kube-proxy's first sync, or it never ran), nothing drops there and no blackhole is reported. Absent when the rules are not read (IPVS, --rules.mode=none, a failed read) or no kube-proxy runs here."))

// Dataplane exports which dataplane the node runs, as the gatherer detected or was told, and whether
// kube-proxy has programmed it.
type Dataplane struct{}

// NewDataplane returns the dataplane collector.
func NewDataplane() *Dataplane { return &Dataplane{} }

func (*Dataplane) Name() string { return "dataplane" }

func (*Dataplane) Metrics() []*Metric { return []*Metric{dataplaneInfo, kubeProxyProgrammed} }

// Inputs: detection reads the rules and kube-proxy's health server.
func (*Dataplane) Inputs() []Input { return []Input{InputRules, InputKubeProxy} }

func (*Dataplane) Update(st *State, out *Sink) error {
	out.send(dataplaneInfo, 1, string(st.Dataplane))
	if st.Dataplane == DataplaneKubeProxy && st.RulesConfigured && (st.RulesErr == nil && st.Rules != nil || st.NotProgrammed) {
		out.send(kubeProxyProgrammed, boolFloat(!st.NotProgrammed))
	}
	return nil
}
