package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	serviceLBDrainSeconds = detailed(newHistogram("service_lb_drain_seconds",
		"How long the Service's load balancer kept sending new connections after its health check node port first answered 503.",
		exposure.DrainBuckets, "namespace", "service"),
		"The Service's part of localtraffic_lb_drain_seconds (docs/exposure.md, \"The load balancer's drain\"): per ended exposure episode at the Service on this node, the time from its health check node port's first 503 to the last new client attempt that arrived, where the arrivals meter saw it all and a checker probed the port after the 503. Only for Services that had an episode on this node; carried over a restart by the state file.")
	serviceExposureAttempts = detailed(newMetric("service_exposure_attempts_total", prometheus.CounterValue,
		"Distinct new connection attempts this node dropped in the Service's exposure episodes, by cause.",
		"namespace", "service", "cause"),
		"The Service's part of localtraffic_exposure_attempts_total: distinct new connection attempts that arrived at its destinations in exposure episodes on this node, by cause. Only for Services that had an episode here, and only the causes they had; carried over a restart by the state file.")
	serviceExposureSeconds = detailed(newMetric("service_exposure_seconds_total", prometheus.CounterValue,
		"Seconds this node dropped the Service's new connections while they were still sent to it, by cause.",
		"namespace", "service", "cause"),
		"The Service's part of localtraffic_exposure_seconds_total: the seconds of its exposure episodes on this node, summed over its destinations, by cause. Only for Services that had an episode here, and only the causes they had; carried over a restart by the state file.")
	serviceWindowAttempts = detailed(newMetric("service_window_attempts_total", prometheus.CounterValue,
		"New connection attempts that arrived for the Service, served or dropped, in its rollout and drain windows, by cause.",
		"namespace", "service", "cause"),
		"The denominator beside localtraffic_service_exposure_attempts_total: distinct new connection attempts (retransmissions not counted again) the arrivals meter counted at the Service's destinations on this node, served or dropped, between decisions at which the API view showed a window open (cause: node_deleting or drain, the node being deleted or cordoned; rollout, an endpoint of the Service terminating anywhere in the cluster) or an exposure episode was under way there (its cause). Lower bounds where the meter drops, sheds or samples packets. Only for Services whose windows saw an attempt here, only with the arrivals meter; not carried over a restart (a counter reset).")
	serviceLBCheckWindow = detailed(newMetric("service_lb_check_window_seconds", prometheus.GaugeValue,
		"The Service's load balancer's configured reaction: its health check interval times its unhealthy threshold.",
		"namespace", "service", "source"),
		"The configured reaction beside localtraffic_service_lb_drain_seconds: the load balancer's health check interval times its unhealthy threshold, as read from source: annotations (the Service's cloud controller annotations: AWS's healthcheck-interval and -unhealthy-threshold, DigitalOcean's, Hetzner's). Absent when nothing says both; localtraffic_service_lb_check_interval_seconds then gives the interval observed. Only for Services that had an episode on this node.")
	serviceLBCheckInterval = detailed(newMetric("service_lb_check_interval_seconds", prometheus.GaugeValue,
		"The cadence of the checker the arrivals meter follows at the Service's health check node port.",
		"namespace", "service"),
		"The interval of the health checker the arrivals meter proved at the Service's health check node port (its probes at a steady cadence), exported where no annotation configures the check window: the unhealthy threshold is not seen on the wire, so the window is not either. Absent while no checker is proven there, with the meter off, and where localtraffic_service_lb_check_window_seconds is exported. Only for Services that had an episode on this node.")
)

// ServiceExposure exports, per Service that had an exposure episode on this node, what the exposure recorder
// counted of it and its load balancer's measured and configured reaction; and per Service whose rollout or
// drain windows saw attempts arrive here, how many (the success ratio's denominator). Opt-in: per-Service series, though
// only for the Services that lost something here.
type ServiceExposure struct{}

// NewServiceExposure returns the service_exposure collector.
func NewServiceExposure() *ServiceExposure { return &ServiceExposure{} }

func (*ServiceExposure) Name() string { return "service_exposure" }

func (*ServiceExposure) Metrics() []*Metric {
	return []*Metric{serviceLBDrainSeconds, serviceExposureAttempts, serviceExposureSeconds, serviceWindowAttempts, serviceLBCheckWindow, serviceLBCheckInterval}
}

func (*ServiceExposure) Inputs() []scrape.Input { return nil }

// Update renders the recorder's Services. A State outside the node model has none: nothing is sent then.
func (*ServiceExposure) Update(st *scrape.State, out *Sink) error {
	x := st.Exposure
	if x == nil {
		return nil
	}
	for _, s := range x.Services {
		out.histogram(serviceLBDrainSeconds, s.Drains.Count, s.Drains.Sum, s.Drains.CumulativeOf(exposure.DrainBuckets), s.Namespace, s.Name)
		for _, c := range exposure.Causes {
			t, ok := s.Totals[c]
			if !ok {
				continue
			}
			out.send(serviceExposureAttempts, float64(t.Attempts), s.Namespace, s.Name, string(c))
			out.send(serviceExposureSeconds, t.Seconds, s.Namespace, s.Name, string(c))
		}
		switch {
		case s.Check.Window() > 0:
			out.send(serviceLBCheckWindow, s.Check.Window().Seconds(), s.Namespace, s.Name, "annotations")
		case s.Check.Observed > 0:
			out.send(serviceLBCheckInterval, s.Check.Observed.Seconds(), s.Namespace, s.Name)
		}
	}
	for _, w := range x.Windows {
		for _, c := range exposure.Causes {
			if n, ok := w.Attempts[c]; ok {
				out.send(serviceWindowAttempts, float64(n), w.Namespace, w.Name, string(c))
			}
		}
	}
	return nil
}
