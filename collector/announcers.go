package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

var (
	announcerSourceState = detailed(newMetric("announcer_source_state", prometheus.GaugeValue,
		"1 for each load balancer announcer source, with the state its records are in on this node.",
		"source", "state"),
		"1 for each load balancer announcer source with the state its records are in on this node (only the current state's series exists): source metallb_l2 (ServiceL2Status), metallb_bgp (this node's ServiceBGPStatus), cilium_l2 (L2 announcement Leases), cilium_l2_policy (CiliumL2AnnouncementPolicy: which Services should hold a lease), kube_vip, openelb, purelb (Service annotations); state ok (read and current: rotation follows it), absent (no CRD, or no Service carries the annotation), forbidden (RBAC refused the read), stale (the API server has not answered since a failure). Only ok sources decide rotation; a Service Cilium's policies select is unannounced without a live lease only while cilium_l2 and cilium_l2_policy are both ok.")
	serviceUnannounced = detailed(newMetric("service_unannounced", prometheus.GaugeValue,
		"1 for a Service with endpoints whose load balancer IP or externalIP no node announces.",
		"namespace", "service"),
		"1 for a Service with endpoints whose load balancer IP, or externalIP a Cilium L2 announcement policy selects, no node announces: its layer 2 announcer's record names no live holder (a Cilium L2 lease nobody renews), or a Cilium L2 announcement policy selects it and the exporter has seen no live lease of it for a lease duration (released or deleted: Cilium 1.20.2 and later withdraw where no selected node has a local backend), and no other record announces it. Every client of the address is lost. The same fact on every node (absent otherwise): alert on it aggregated by Service.")
)

// Announcers exports the announcer sources' states and the Services nobody announces.
type Announcers struct{}

// NewAnnouncers returns the announcers collector.
func NewAnnouncers() *Announcers { return &Announcers{} }

func (*Announcers) Name() string { return "announcers" }

func (*Announcers) Metrics() []*Metric { return []*Metric{announcerSourceState, serviceUnannounced} }

func (*Announcers) Inputs() []scrape.Input { return []scrape.Input{scrape.InputAPI} }

func (c *Announcers) Update(st *scrape.State, out *Sink) error { return updateAll(c, st, out) }

// UpdateNode implements serviceRenderer: each source's state.
func (*Announcers) UpdateNode(st *scrape.State, out *Sink) (bool, error) {
	if st.APIErr != nil {
		return false, st.APIErr
	}
	// A series per source exists only with its current state: one per source and node, never a zero.
	for _, src := range announce.Sources {
		if s, ok := st.Announcers[src]; ok {
			out.send(announcerSourceState, 1, string(src), string(s))
		}
	}
	return true, nil
}

// UpdateService implements serviceRenderer.
func (*Announcers) UpdateService(_ *scrape.State, r *scrape.ServiceResult, out *Sink) {
	if verdict.Unannounced(r.Service) {
		out.send(serviceUnannounced, 1, r.Service.Namespace, r.Service.Name)
	}
}
