package scrape

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// Verdict sources, as exported in localtraffic_blackhole_source_info.
const (
	SourceRules = verdict.SourceRules
	SourceAPI   = verdict.SourceAPI
)

// FamilyRules is what the verdict reads of the dataplane's rules: per family, per Service port. Every
// dataplane.Rules implements it.
type FamilyRules interface {
	// HasFamily reports whether that family's kube-proxy rules were found and read.
	HasFamily(family string) bool
	// Family returns what kube-proxy programmed for sp in one family; the zero PortState means no rule.
	Family(sp dataplane.ServicePort, family string) dataplane.PortState
}

// decider decides the Services of one scrape with one Evidence: the rules and the arrivals are the scrape's,
// the health check answers each Service's (refilled in place: a scrape decides its Services one after another,
// and the decision keeps nothing of its Evidence). At thousands of Services an Evidence per Service was a
// measurable share of a scrape's garbage.
type decider struct{ ev verdict.Evidence }

func newDecider(rules FamilyRules, arrivals verdict.Arrivals) *decider {
	d := &decider{ev: verdict.Evidence{Arrivals: arrivals, HealthChecks: make(map[corev1.IPFamily]verdict.HealthCheck, 2)}}
	if rules != nil {
		d.ev.Rules = ruleEvidence{rules}
	}
	return d
}

func (d *decider) decide(svc kubeview.ServiceState, node kubeview.NodeState, checks map[corev1.IPFamily]*nodeprobe.HealthCheck) verdict.Verdict {
	clear(d.ev.HealthChecks)
	for f, hc := range checks {
		if hc != nil {
			d.ev.HealthChecks[f] = verdict.HealthCheck{StatusCode: hc.StatusCode, Result: string(hc.Result)}
		}
	}
	return verdict.Decide(verdict.Input{Service: svc, Node: node, Evidence: &d.ev})
}

// ruleEvidence reads kube-proxy's rules as the decision asks: does the family's rule set drop a destination.
type ruleEvidence struct{ FamilyRules }

func (r ruleEvidence) HasFamily(f corev1.IPFamily) bool { return r.FamilyRules.HasFamily(string(f)) }

func (r ruleEvidence) Drops(d verdict.Destination) bool {
	return r.Family(servicePortOf(d), string(d.Family)).DropsTo(d.Address, d.DestPort)
}

// notProgrammed is kube-proxy's rules before its first sync (or after it was cleaned up): read, and empty in
// every family. Nothing drops there: a NodePort is refused and an address is routed on, not blackholed.
type notProgrammed struct{}

func (notProgrammed) HasFamily(string) bool { return true }
func (notProgrammed) Family(dataplane.ServicePort, string) dataplane.PortState {
	return dataplane.PortState{}
}

func servicePortOf(d verdict.Destination) dataplane.ServicePort {
	return dataplane.ServicePort{Namespace: d.Namespace, Name: d.Service, Port: d.Port, Protocol: string(d.Protocol)}
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
	sp     dataplane.ServicePort
	family string
}

func newVerdictRules(fr FamilyRules) *verdictRules {
	return &verdictRules{FamilyRules: fr, gone: map[goneKey]bool{}}
}

// markGone records that sp's rules in family send traffic only to endpoints that no longer exist.
func (v *verdictRules) markGone(sp dataplane.ServicePort, family string) {
	v.gone[goneKey{sp, family}] = true
}

func (v *verdictRules) Family(sp dataplane.ServicePort, family string) dataplane.PortState {
	st := v.FamilyRules.Family(sp, family)
	if v.gone[goneKey{sp, family}] {
		st.Drop = true
		st.Drops = []dataplane.DropRule{{AllDestinations: true}}
	}
	return st
}
