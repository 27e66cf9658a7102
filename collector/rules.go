package collector

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

var portLabels = []string{"namespace", "service", "port", "ip_family"}

var (
	rulesDrop = scoped("no", stable(newMetric("rules_drop", prometheus.GaugeValue,
		"1 when kube-proxy's rules of the IP family on this node drop the Service port's external traffic for lack of a local endpoint.", portLabels...)))
	rulesLocalEndpoints = scoped("no", stable(newMetric("rules_local_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy's rules of the IP family on this node send the Service port's external traffic to.", portLabels...)))
	rulesGoneEndpoints = scoped("no", newMetric("rules_gone_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy's rules of the IP family on this node send the Service port's external traffic to that the API no longer lists on this node (a pod deleted or replaced while kube-proxy did not sync): traffic sent there is lost.",
		portLabels...))
	rulesDroppedPackets = scoped("health-checked", stable(newMetric("rules_dropped_packets_total", prometheus.CounterValue,
		"Packets dropped by the port's no-local-endpoints rules of the IP family (iptables modes; with loadBalancerSourceRanges, the firewall rule that drops the load balancer IP's traffic first). Monotonic across kube-proxy's rewrites, which reset the rule counters; starts from 0 when the exporter starts.",
		portLabels...)))
	rulesMismatch = stable(newMetric("rules_mismatch", prometheus.GaugeValue,
		"1 when kube-proxy disagrees with the API view for the Service in some IP family: its rules (drop, or which local endpoints by address and port, on any port), or without rules its health check node port's localEndpoints.", svcLabels...))
	rulesInfo = newMetric("rules_info", prometheus.GaugeValue,
		"kube-proxy's proxy mode and iptables backend as the rule reader found them; always 1.", "mode", "backend")
	rulesSupported = newMetric("rules_supported", prometheus.GaugeValue,
		"1 when the rule reader understands kube-proxy's mode here; 0 in IPVS mode, where localtraffic_blackhole falls back to the API view.")
	rulesReadSuccess = newMetric("rules_read_success", prometheus.GaugeValue,
		"1 when the last read of kube-proxy's rules succeeded.")
	rulesReadDuration = newMetric("rules_read_duration_seconds", prometheus.GaugeValue,
		"How long the last read of kube-proxy's rules took (one save per table and family, shared by concurrent scrapes).")
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
		rulesSupported, rulesReadSuccess, rulesReadDuration}
}

// Inputs: without rules, the mismatch comes from the health check probes.
func (*Rules) Inputs() []Input { return []Input{InputAPI, InputRules, InputHealthChecks} }

func (c *Rules) Update(st *State, out *Sink) error {
	if st.Dataplane == DataplaneReplacement {
		// No kube-proxy rules exist here by design: not a failed read, no mismatch to report.
		return fmt.Errorf("%w: no kube-proxy on this node (dataplane %s)", ErrNoData, st.Dataplane)
	}
	if !st.RulesConfigured {
		// API-only mode: the health check node ports' own counts are compared with the API's.
		if st.APIErr != nil {
			return st.APIErr
		}
		apiMismatch(st, out)
		return nil
	}
	snap, err := st.Rules, st.RulesErr
	if snap != nil {
		out.send(rulesInfo, 1, string(snap.Mode), snap.Backend)
		out.send(rulesReadDuration, snap.Duration.Seconds())
	}
	switch {
	case st.NotProgrammed:
		// Read, and kube-proxy has written no rule yet: nothing to compare (localtraffic_kube_proxy_programmed).
		out.send(rulesReadSuccess, 1)
		return fmt.Errorf("%w: %w", ErrNoData, err)
	case errors.Is(err, kernelrules.ErrUnsupported):
		// Not a failure of the exporter: the reader logged it once, the API view decides, the metric says so.
		out.send(rulesSupported, 0)
		out.send(rulesReadSuccess, 1)
		if st.APIErr == nil {
			apiMismatch(st, out)
		}
		return fmt.Errorf("%w: %w", ErrNoData, err)
	case err != nil:
		out.send(rulesReadSuccess, 0)
		if st.APIErr == nil {
			apiMismatch(st, out)
		}
		return err
	}
	out.send(rulesSupported, 1)
	out.send(rulesReadSuccess, 1)
	if st.APIErr != nil {
		return st.APIErr
	}
	for _, r := range st.Services {
		svc := r.Service
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
		if r.MismatchKnown {
			out.send(rulesMismatch, boolFloat(r.Mismatch), svc.Namespace, svc.Name)
		}
	}
	return nil
}

// apiMismatch exports localtraffic_rules_mismatch when no rules were read: for the Services whose health
// check node port gave kube-proxy's own local endpoint count (item 8); none for the others.
func apiMismatch(st *State, out *Sink) {
	for _, r := range st.Services {
		if r.MismatchKnown {
			out.send(rulesMismatch, boolFloat(r.Mismatch), r.Service.Namespace, r.Service.Name)
		}
	}
}

// portLabel is the port's name, or its number when unnamed (a single-port Service).
func portLabel(p kubeview.PortEndpoints) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprint(p.Port)
}

// endpointMatch compares the local endpoints kube-proxy's rules send one Service port's external traffic to, in
// one family, with the API's, endpoint by endpoint (IP and target port), not by count: with kube-proxy stopped
// or stuck, a pod replaced on the same node leaves rules that DNAT to the deleted pod's address while the count
// still agrees.
type endpointMatch struct {
	// named: the rules name every endpoint they count (kernelrules.PortState.Endpoints), so identities were compared.
	// A state that only counts (a snapshot built from counts) is compared by count alone.
	named bool
	// stale: rule endpoints that are not among the API's Local endpoints of the port (LocalAddrs).
	stale int
	// gone: of those, the ones whose address the API no longer lists on this node at all (LocalAddrs and
	// LocalUnused): a deleted pod. Traffic kube-proxy sends there is lost.
	gone int
}

// matchEndpoints compares st's endpoints with the API's for sp.
func matchEndpoints(sp kernelrules.ServicePort, p kubeview.PortEndpoints, st kernelrules.PortState) endpointMatch {
	m := endpointMatch{named: len(st.Endpoints) == st.LocalEndpoints}
	if !m.named {
		return m
	}
	is := func(e kernelrules.Endpoint, addrs []netip.AddrPort) bool {
		for _, a := range addrs {
			if e.Is(sp, a) {
				return true
			}
		}
		return false
	}
	for _, e := range st.Endpoints {
		if is(e, p.LocalAddrs) {
			continue
		}
		m.stale++
		exists := is(e, p.LocalUnused)
		if e.Addr.IsValid() {
			// The pod is there as long as its address is, whatever the port: a port changed under a stale rule
			// is refused by the pod, not lost.
			for _, a := range append(slices.Clip(p.LocalAddrs), p.LocalUnused...) {
				exists = exists || a.Addr() == e.Addr.Addr()
			}
		}
		if !exists {
			m.gone++
		}
	}
	return m
}

// allGone: the rules send the port's external traffic only to endpoints that no longer exist, so this node
// drops all of it in fact, though no drop rule says so.
func (m endpointMatch) allGone(st kernelrules.PortState) bool {
	return m.gone > 0 && m.gone == st.LocalEndpoints
}

// portMismatch: the API view and kube-proxy's rules disagree about a port. Only ports with an external way in
// are judged: without a NodePort or external address kube-proxy programs no drop, so there is nothing local to
// compare. Rules that send traffic to endpoints the API no longer has disagree whatever else the API says;
// otherwise only ports with an endpoint somewhere are judged (without one kube-proxy rejects everywhere), by
// the drop, and then by which local endpoints (IP and port), not only how many.
// A short disagreement is normal (kube-proxy syncs at most once a second); alerts wait with `for:`.
func portMismatch(p kubeview.PortEndpoints, st kernelrules.PortState, m endpointMatch, reachable bool) bool {
	switch {
	case !reachable:
		return false
	case m.gone > 0:
		return true
	case !p.ClusterWide:
		return false
	}
	apiDrops := p.Local == 0
	if apiDrops != st.Drop {
		return true
	}
	return !apiDrops && (st.LocalEndpoints != p.Local || m.named && m.stale > 0)
}

// verdictRules is kube-proxy's rules as the verdict reads them: a port whose rules send its external traffic
// only to endpoints that no longer exist (matchEndpoints) drops every destination in fact — the NodePort, each
// load balancer IP and externalIP all reach the same stale DNAT — so it reads as a drop of all destinations.
// Everything else is the rules as read.
type verdictRules struct {
	FamilyRules
	gone map[goneKey]bool
}

type goneKey struct {
	sp     kernelrules.ServicePort
	family string
}

func newVerdictRules(fr FamilyRules) *verdictRules {
	return &verdictRules{FamilyRules: fr, gone: map[goneKey]bool{}}
}

// markGone records that sp's rules in family send traffic only to endpoints that no longer exist.
func (v *verdictRules) markGone(sp kernelrules.ServicePort, family string) {
	v.gone[goneKey{sp, family}] = true
}

func (v *verdictRules) Family(sp kernelrules.ServicePort, family string) kernelrules.PortState {
	st := v.FamilyRules.Family(sp, family)
	if v.gone[goneKey{sp, family}] {
		st.Drop = true
		st.Drops = []kernelrules.DropRule{{AllDestinations: true}}
	}
	return st
}
