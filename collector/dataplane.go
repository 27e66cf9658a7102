package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var dataplaneInfo = detailed(newMetric("dataplane_info", prometheus.GaugeValue,
	"Which dataplane serves Services on this node, kube-proxy, ipvs, replacement or cilium; always 1.",
	"dataplane"),
	"Which dataplane serves Services on this node: kube-proxy (its rules are read), ipvs (kube-proxy in IPVS mode: API view), replacement (no kube-proxy: API view and health check node ports) or cilium (Cilium replaces kube-proxy and its service table is read, --dataplane.cilium-socket); always 1.")

var kubeProxyProgrammed = stable(detailed(newMetric("kube_proxy_programmed", prometheus.GaugeValue,
	"1 when kube-proxy's rules exist on this node, 0 when the rules read hold none of kube-proxy's."),
	"1 when kube-proxy's rules exist on this node; 0 when they were read and hold no kube-proxy rule at all: the node is not programmed (before kube-proxy's first sync, or it never ran), nothing drops there and no blackhole is reported. Absent when the rules are not read (IPVS, --rules.mode=none, a failed read) or no kube-proxy runs here."))

// Dataplane exports which dataplane the node runs, as the gatherer detected or was told, and whether
// kube-proxy has programmed it.
type Dataplane struct{}

// NewDataplane returns the dataplane collector.
func NewDataplane() *Dataplane { return &Dataplane{} }

func (*Dataplane) Name() string { return "dataplane" }

func (*Dataplane) Metrics() []*Metric { return []*Metric{dataplaneInfo, kubeProxyProgrammed} }

// Inputs: detection reads the rules and kube-proxy's health server.
func (*Dataplane) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputRules, scrape.InputKubeProxy}
}

func (*Dataplane) Update(st *scrape.State, out *Sink) error {
	out.send(dataplaneInfo, 1, string(st.Dataplane))
	if st.Dataplane == scrape.DataplaneKubeProxy && st.RulesConfigured && (st.RulesErr == nil && st.Rules != nil || st.NotProgrammed) {
		out.send(kubeProxyProgrammed, boolFloat(!st.NotProgrammed))
	}
	return nil
}
