package collector

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var portLabels = []string{"namespace", "service", "port", "ip_family"}

var (
	rulesDrop = scoped(DefaultNo, stable(detailed(newMetric("rules_drop", prometheus.GaugeValue,
		"1 when kube-proxy's rules of the IP family drop the Service port's external traffic for lack of a local endpoint.", portLabels...),
		"1 when kube-proxy's rules of the IP family on this node drop the Service port's external traffic for lack of a local endpoint.")))
	rulesLocalEndpoints = scoped(DefaultNo, stable(newMetric("rules_local_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy's rules of the IP family on this node send the Service port's external traffic to.", portLabels...)))
	rulesGoneEndpoints = scoped(DefaultNo, detailed(newMetric("rules_gone_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy's rules send the Service port's traffic to that the API no longer lists.",
		portLabels...),
		"Local endpoints kube-proxy's rules of the IP family on this node send the Service port's external traffic to that the API no longer lists on this node (a pod deleted or replaced while kube-proxy did not sync): traffic sent there is lost. Counted only once the exporter's API view has heard from the API server since the rules were first read so: before that the endpoint may be a pod the API view has not seen yet."))
	rulesDroppedPackets = scoped(DefaultHealthChecked, stable(detailed(newMetric("rules_dropped_packets_total", prometheus.CounterValue,
		"Packets dropped by the Service port's no-local-endpoints rules of the IP family.",
		portLabels...),
		"Packets dropped by the port's no-local-endpoints rules of the IP family (iptables modes; with loadBalancerSourceRanges, the firewall rule that drops the load balancer IP's traffic first). Monotonic across kube-proxy's rewrites, which reset the rule counters; starts from 0 when the exporter starts.")))
	rulesMismatch = stable(detailed(newMetric("rules_mismatch", prometheus.GaugeValue,
		"1 when kube-proxy disagrees with the API view for the Service in some IP family.", svcLabels...),
		"1 when kube-proxy disagrees with the API view for the Service in some IP family: its rules (drop, or which local endpoints by address and port, on any port), or without rules its health check node port's localEndpoints."))
	rulesInfo = newMetric("rules_info", prometheus.GaugeValue,
		"kube-proxy's proxy mode and iptables backend as the rule reader found them; always 1.", "mode", "backend")
	rulesSupported = detailed(newMetric("rules_supported", prometheus.GaugeValue,
		"1 when the rule reader understands kube-proxy's mode on this node."),
		"1 when the rule reader understands kube-proxy's mode here; 0 in IPVS mode, where localtraffic_blackhole falls back to the API view.")
	rulesReadSuccess = newMetric("rules_read_success", prometheus.GaugeValue,
		"1 when the last read of kube-proxy's rules succeeded.")
	rulesReadDuration = newMetric("rules_read_duration_seconds", prometheus.GaugeValue,
		"How long the last read of kube-proxy's rules took (a save per changed table and family).")
	rulesWatchState = detailed(newMetric("rules_watch_state", prometheus.GaugeValue,
		"What told the exporter that kube-proxy's rules changed, as of the last read, one-hot over the state label.",
		"state"),
		"What told the exporter that kube-proxy's rules changed, as of the last read, one-hot over notified (nf_tables change notifications: the nft backend, nftables mode), polled (a change signal read every second: the legacy backend, or no notifications) and none (nothing: every read saves every table).")
	rulesResyncs = detailed(newMetric("rules_resyncs_total", prometheus.CounterValue,
		"Full reads of kube-proxy's rules forced because the exporter's kept view may have drifted."),
		"Full reads of kube-proxy's rules forced because change notifications were lost (the kernel's socket overran) or the periodic verification found the kept rules differing from the kernel's. Growing: the exporter's view drifted and was resynchronised.")
)

// Rules exports what kube-proxy programmed on this node, whether it agrees with the API view per Local
// Service, and the packets its no-local-endpoints rules dropped. By default the per-port series are only the
// dropped-packet counters of Services with a health check node port: drops outside rotation mean a load
// balancer that does not check the port (LocalTrafficOutOfRotationNodeDropsTraffic), while a NodePort
// Service's drops in rotation already make localtraffic_blackhole 1. perPort exports every port's series.
type Rules struct{ perPort bool }

// NewRules returns the rules collector; perPort is --collector.rules.per-port.
func NewRules(perPort bool) *Rules { return &Rules{perPort: perPort} }

func (*Rules) Name() string { return "rules" }

func (*Rules) Metrics() []*Metric {
	return []*Metric{rulesDrop, rulesLocalEndpoints, rulesGoneEndpoints, rulesDroppedPackets, rulesMismatch, rulesInfo,
		rulesSupported, rulesReadSuccess, rulesReadDuration, rulesWatchState, rulesResyncs}
}

// Inputs: without rules, the mismatch comes from the health check probes.
func (*Rules) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputAPI, scrape.InputRules, scrape.InputHealthChecks}
}

func (c *Rules) Update(st *scrape.State, out *Sink) error { return updateAll(c, st, out) }

// rulesShown is which of a Service's rule series a State's read of the rules gives.
type rulesShown int

const (
	showNone     rulesShown = iota // no per-Service series
	showMismatch                   // only rules_mismatch, from the API view and the health checks
	showPorts                      // every port's series and rules_mismatch
)

// shownFor is what a State's read of the rules shows per Service.
func shownFor(st *scrape.State) rulesShown {
	switch {
	case st.Dataplane == scrape.DataplaneReplacement, st.APIErr != nil, st.NotProgrammed:
		return showNone
	case !st.RulesConfigured, st.RulesErr != nil:
		return showMismatch
	}
	return showPorts
}

// UpdateNode implements serviceRenderer: the reader's state.
func (c *Rules) UpdateNode(st *scrape.State, out *Sink) (bool, error) {
	if st.Dataplane == scrape.DataplaneReplacement {
		return false, fmt.Errorf("%w: no kube-proxy on this node (dataplane %s)", ErrNoData, st.Dataplane)
	}
	services := shownFor(st) != showNone
	if !st.RulesConfigured {
		return services, st.APIErr
	}
	err := st.RulesErr
	if errors.Is(err, scrape.ErrNotYetRead) {
		return services, fmt.Errorf("%w: %w", ErrNoData, err)
	}
	if st.Rules != nil {
		info := st.Rules.Info()
		out.send(rulesInfo, 1, info.Mode, info.Backend)
		out.send(rulesReadDuration, info.Duration.Seconds())
		if info.Watch != "" {
			for _, w := range dataplane.WatchStates {
				out.send(rulesWatchState, boolFloat(info.Watch == w), string(w))
			}
			out.send(rulesResyncs, float64(info.Resyncs))
		}
	}
	switch {
	case st.NotProgrammed:
		out.send(rulesReadSuccess, 1)
		return false, fmt.Errorf("%w: %w", ErrNoData, err)
	case errors.Is(err, dataplane.ErrUnsupported):
		out.send(rulesSupported, 0)
		out.send(rulesReadSuccess, 1)
		return services, fmt.Errorf("%w: %w", ErrNoData, err)
	case err != nil:
		out.send(rulesReadSuccess, 0)
		return services, err
	}
	out.send(rulesSupported, 1)
	out.send(rulesReadSuccess, 1)
	return services, st.APIErr
}

// UpdateService implements serviceRenderer.
func (c *Rules) UpdateService(st *scrape.State, r *scrape.ServiceResult, out *Sink) {
	svc := r.Service
	if shownFor(st) == showPorts {
		counters := c.perPort || svc.HealthCheckNodePort != 0
		for _, p := range r.Ports {
			fam := string(p.Family)
			if c.perPort {
				out.send(rulesDrop, boolFloat(p.Rules.Drop), svc.Namespace, svc.Name, p.Label, fam)
				out.send(rulesLocalEndpoints, float64(p.Rules.LocalEndpoints), svc.Namespace, svc.Name, p.Label, fam)
				out.send(rulesGoneEndpoints, float64(p.GoneEndpoints), svc.Namespace, svc.Name, p.Label, fam)
			}
			if counters {
				out.send(rulesDroppedPackets, float64(p.DroppedPackets), svc.Namespace, svc.Name, p.Label, fam)
			}
		}
	}
	if r.MismatchKnown {
		out.send(rulesMismatch, boolFloat(r.Mismatch), svc.Namespace, svc.Name)
	}
}
