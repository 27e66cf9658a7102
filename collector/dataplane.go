package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Dataplanes, as exported in localtraffic_dataplane_info.
const (
	// DataplaneKubeProxy: kube-proxy in iptables or nftables mode; its rules decide the verdict.
	DataplaneKubeProxy = "kube-proxy"
	// DataplaneIPVS: kube-proxy in IPVS mode; the API view and the health check node ports decide.
	DataplaneIPVS = "ipvs"
	// DataplaneReplacement: no kube-proxy (Cilium, Calico eBPF, OVN-Kubernetes); the API view and the
	// health check node ports decide, and no kube-proxy series are exported.
	DataplaneReplacement = "replacement"
)

var dataplaneInfo = newMetric("dataplane_info", prometheus.GaugeValue,
	"Which dataplane serves Services on this node: kube-proxy (its rules are read), ipvs (kube-proxy in IPVS mode: API view) or replacement (no kube-proxy: API view and health check node ports); always 1.",
	"dataplane")

// Dataplane exports which dataplane the node runs, as the gatherer detected or was told.
type Dataplane struct{}

// NewDataplane returns the dataplane collector.
func NewDataplane() *Dataplane { return &Dataplane{} }

func (*Dataplane) Name() string { return "dataplane" }

func (*Dataplane) Metrics() []*Metric { return []*Metric{dataplaneInfo} }

// Inputs: detection reads the rules and kube-proxy's health server.
func (*Dataplane) Inputs() []Input { return []Input{InputRules, InputKubeProxy} }

func (*Dataplane) Update(st *State, out *Sink) error {
	out.send(dataplaneInfo, 1, st.Dataplane)
	return nil
}
