package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var svcLabels = []string{"namespace", "service"}

var (
	localEndpoints = stable(detailed(newMetric("local_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy uses for the Service's external traffic on this node, per the API.",
		svcLabels...),
		"Local endpoints kube-proxy uses for the Service's external traffic on this node, per the API (ready ones, else serving-terminating ones); the smallest IP family's count."))
	inRotationMetric = stable(detailed(newMetric("in_rotation", prometheus.GaugeValue,
		"1 when some of the Service's external traffic is sent to this node.", svcLabels...),
		"1 when some of the Service's external traffic (a NodePort, load balancer IP or externalIP, in some IP family) is sent to this node (see the blackhole verdict in docs/metrics.md)."))
	blackhole = stable(detailed(newMetric("blackhole", prometheus.GaugeValue,
		"1 when some of the Service's external traffic reaches this node and is dropped for lack of a local endpoint.", svcLabels...),
		"1 when some of the Service's external traffic reaches this node and is dropped for lack of a local endpoint (in some IP family)."))
	blackholeReason = detailed(newMetric("blackhole_reason", prometheus.GaugeValue,
		"1 while localtraffic_blackhole is 1, naming in its reason label what the verdict rests on.",
		"namespace", "service", "reason"),
		"1 while localtraffic_blackhole is 1, saying what it rests on (absent otherwise): health_check_ignored (attempts keep arriving past the grace window while the node's health check fails: the load balancer ignores healthCheckNodePort), udp_flow_pinned (UDP datagrams keep arriving past the grace window while the health check fails, all of flows that began before the node dropped: the load balancer keeps existing flows pinned), traffic_lost (attempts observed arriving at a destination the node drops: the arrivals meter saw one within --rotation.loss-hold, or, with the meter off or blind, kube-proxy's drop counter grew), announced_here (an announcer, MetalLB, Cilium L2, kube-vip, OpenELB or PureLB, announces the load balancer IP from this node: no grace window), health_check_passing (the node's own health check answers 200) page as critical; no_traffic_seen (declared in rotation, nothing arrives yet) and not_observed (declared in rotation, and nothing can see arrivals: the meter is off or blind and no drop counter grew; nftables mode has none) as warnings.")
	blackholeSource = detailed(newMetric("blackhole_source_info", prometheus.GaugeValue,
		"Which input decided localtraffic_blackhole on this node, rules or api; always 1.",
		"source"),
		"Which input decided localtraffic_blackhole on this node: rules (kube-proxy's rules were read) or api (they could not be); always 1.")
	serviceIgnored = stable(detailed(newMetric("service_ignored_info", prometheus.GaugeValue,
		"A Service placed this way on purpose: still measured, paged by no shipped alert; always 1.",
		"namespace", "service", "reason"),
		"A Service placed this way on purpose (annotation localtraffic.io/intentional-placement, whose value is the reason, or --services.ignore-selector): still measured, paged by no shipped alert; always 1, absent for other Services."))
	healthCheckUp = stable(detailed(newMetric("health_check_up", prometheus.GaugeValue,
		"1 when the Service's health check node port answered 200 with kube-proxy's body in every IP family.", svcLabels...),
		"1 when the Service's health check node port on this node answered 200 with kube-proxy's body in every IP family (LoadBalancer Services)."))
)

// Services exports, per Local Service, the verdict and what it rests on at the default budget: local
// endpoints, and for a Service with a health check node port whether the check answers.
type Services struct{}

// NewServices returns the Services collector.
func NewServices() *Services { return &Services{} }

func (*Services) Name() string { return "services" }

func (*Services) Metrics() []*Metric {
	return []*Metric{localEndpoints, inRotationMetric, blackhole, blackholeReason, blackholeSource, healthCheckUp, serviceIgnored}
}

// Inputs: the verdict waits for the rules read as well as the probes.
func (*Services) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputAPI, scrape.InputHealthChecks, scrape.InputRules}
}

func (c *Services) Update(st *scrape.State, out *Sink) error { return updateAll(c, st, out) }

// UpdateNode implements serviceRenderer: which input decided the verdicts.
func (*Services) UpdateNode(st *scrape.State, out *Sink) (bool, error) {
	if st.APIErr != nil {
		return false, st.APIErr
	}
	out.send(blackholeSource, 1, string(st.Source))
	return true, nil
}

// UpdateService implements serviceRenderer.
func (*Services) UpdateService(_ *scrape.State, r *scrape.ServiceResult, out *Sink) {
	ns, name := r.Service.Namespace, r.Service.Name
	out.send(localEndpoints, float64(r.Service.LocalEndpoints()), ns, name)
	if len(r.Checks) > 0 {
		out.send(healthCheckUp, boolFloat(summarizeChecks(r.Checks).up), ns, name)
	}
	out.send(inRotationMetric, boolFloat(r.Verdict.InRotation), ns, name)
	out.send(blackhole, boolFloat(r.Verdict.Blackhole), ns, name)
	if r.Verdict.Blackhole {
		out.send(blackholeReason, 1, ns, name, string(r.Verdict.Reason))
	}
	// An ignored Service keeps its verdict series (the dashboard and `status` still show where it drops);
	// this series is what the shipped alerts leave it out by (unless on (namespace, service)).
	if r.Service.Ignored {
		out.send(serviceIgnored, 1, ns, name, r.Service.IgnoredReason)
	}
}

// checkSummary is the per-Service health check series over the Service's families: they stay one series
// per Service (docs/metrics.md, "Dual-stack").
type checkSummary struct {
	up             bool             // every family answered 200 with kube-proxy's body
	result         nodeprobe.Result // the first family (spec order) whose result is not ok, else ok
	localEndpoints int              // the smallest count a family reported; -1 when none did
	proxyHealthy   *bool            // false when any family reported false
	duration       time.Duration    // the longest probe
}

func summarizeChecks(checks []scrape.FamilyCheck) checkSummary {
	s := checkSummary{up: true, result: nodeprobe.ResultOK, localEndpoints: -1}
	for _, c := range checks {
		if c.Result != nodeprobe.ResultOK {
			if s.up {
				s.result = c.Result
			}
			s.up = false
		}
		if c.LocalEndpoints >= 0 && (s.localEndpoints < 0 || c.LocalEndpoints < s.localEndpoints) {
			s.localEndpoints = c.LocalEndpoints
		}
		if c.ServiceProxyHealthy != nil && (s.proxyHealthy == nil || *s.proxyHealthy) {
			s.proxyHealthy = c.ServiceProxyHealthy
		}
		s.duration = max(s.duration, c.Duration)
	}
	return s
}
