package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	serviceInfo = stable(newMetric("service_info", prometheus.GaugeValue,
		"A Service with externalTrafficPolicy Local reachable from outside the cluster; always 1.",
		"namespace", "service", "type", "health_check_node_port"))
	hasLocalEndpoint = stable(newMetric("has_local_endpoint", prometheus.GaugeValue,
		"1 when every port of the Service has a local endpoint on this node in every IP family, per the API.", svcLabels...))
	healthCheckResult = stable(detailed(newMetric("health_check_result", prometheus.GaugeValue,
		"The outcome of probing the Service's health check node port, one-hot over the result label.",
		"namespace", "service", "result"),
		"The outcome of probing the Service's health check node port (the first IP family not ok), one-hot over ok, unavailable, empty, invalid, timeout, refused, error, no_address."))
	healthCheckLocalEndpoints = stable(detailed(newMetric("health_check_local_endpoints", prometheus.GaugeValue,
		"Local endpoints the Service's health check node port reported, the smallest IP family's.", svcLabels...),
		"Local endpoints the health check node port reported, the smallest IP family's (absent when no family gave a usable answer)."))
	healthCheckProxyHealthy = newMetric("health_check_service_proxy_healthy", prometheus.GaugeValue,
		"serviceProxyHealthy as the health check node port reported it (kube-proxy 1.27+; absent otherwise).", svcLabels...)
	healthCheckDuration = newMetric("health_check_duration_seconds", prometheus.GaugeValue,
		"How long probing the Service's health check node port took (the slowest IP family).", svcLabels...)
)

// ServiceDetails exports, per Local Service, what the default budget leaves out: the Service's type, the
// derivable has_local_endpoint and the health check's answer in full. The health check's failure reason is
// also in the log and on the landing page, so turning this off loses no diagnosis.
type ServiceDetails struct{}

// NewServiceDetails returns the service_details collector.
func NewServiceDetails() *ServiceDetails { return &ServiceDetails{} }

func (*ServiceDetails) Name() string { return "service_details" }

func (*ServiceDetails) Metrics() []*Metric {
	return []*Metric{serviceInfo, hasLocalEndpoint, healthCheckResult, healthCheckLocalEndpoints,
		healthCheckProxyHealthy, healthCheckDuration}
}

func (*ServiceDetails) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputAPI, scrape.InputHealthChecks}
}

func (c *ServiceDetails) Update(st *scrape.State, out *Sink) error { return updateAll(c, st, out) }

// UpdateNode implements serviceRenderer: nothing but the API view's failure.
func (*ServiceDetails) UpdateNode(st *scrape.State, _ *Sink) (bool, error) {
	if st.APIErr != nil {
		return false, st.APIErr
	}
	return true, nil
}

// UpdateService implements serviceRenderer.
func (*ServiceDetails) UpdateService(_ *scrape.State, r *scrape.ServiceResult, out *Sink) {
	svc := r.Service
	ns, name := svc.Namespace, svc.Name
	hcnp := ""
	if svc.HealthCheckNodePort != 0 {
		hcnp = strconv.Itoa(int(svc.HealthCheckNodePort))
	}
	out.send(serviceInfo, 1, ns, name, string(svc.Type), hcnp)
	out.send(hasLocalEndpoint, boolFloat(svc.HasLocalEndpoint()), ns, name)
	if len(r.Checks) == 0 {
		return
	}
	hc := summarizeChecks(r.Checks)
	for _, res := range nodeprobe.HealthCheckResults {
		out.send(healthCheckResult, boolFloat(hc.result == res), ns, name, string(res))
	}
	if hc.localEndpoints >= 0 {
		out.send(healthCheckLocalEndpoints, float64(hc.localEndpoints), ns, name)
	}
	if hc.proxyHealthy != nil {
		out.send(healthCheckProxyHealthy, boolFloat(*hc.proxyHealthy), ns, name)
	}
	out.send(healthCheckDuration, hc.duration.Seconds(), ns, name)
}
