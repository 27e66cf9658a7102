package collector

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// APIView is what collectors read of the Kubernetes API.
type APIView interface {
	Snapshot() (kubeview.Snapshot, error)
	// Node is this node's state alone, for collectors that need nothing else.
	Node() (kubeview.NodeState, error)
}

// RuleSource reads kube-proxy's rules for one scrape. An error means they could not be read: the verdict then
// falls back to the API view, and the rules collector reports the failure.
type RuleSource interface {
	RuleView(ctx context.Context) (RuleView, error)
}

var svcLabels = []string{"namespace", "service"}

var (
	serviceInfo = stable(newMetric("service_info", prometheus.GaugeValue,
		"A Service with externalTrafficPolicy Local reachable from outside the cluster; always 1.",
		"namespace", "service", "type", "health_check_node_port"))
	localEndpoints = stable(newMetric("local_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy uses for the Service's external traffic on this node, per the API (ready ones, else serving-terminating ones).",
		svcLabels...))
	hasLocalEndpoint = stable(newMetric("has_local_endpoint", prometheus.GaugeValue,
		"1 when every port of the Service has a local endpoint on this node, per the API.", svcLabels...))
	inRotationMetric = stable(newMetric("in_rotation", prometheus.GaugeValue,
		"1 when external traffic for the Service is sent to this node (see the blackhole verdict in docs/metrics.md).", svcLabels...))
	blackhole = stable(newMetric("blackhole", prometheus.GaugeValue,
		"1 when external traffic for the Service reaches this node and is dropped for lack of a local endpoint.", svcLabels...))
	blackholeSource = newMetric("blackhole_source", prometheus.GaugeValue,
		"Which input decided localtraffic_blackhole on this node: rules (kube-proxy's rules were read) or api (they could not be); always 1.",
		"source")
	healthCheckUp = stable(newMetric("health_check_up", prometheus.GaugeValue,
		"1 when the Service's health check node port on this node answered 200 with kube-proxy's body (LoadBalancer Services).", svcLabels...))
	healthCheckResult = stable(newMetric("health_check_result", prometheus.GaugeValue,
		"The outcome of probing the Service's health check node port, one-hot over ok, unavailable, empty, invalid, timeout, refused, error.",
		"namespace", "service", "result"))
	healthCheckLocalEndpoints = stable(newMetric("health_check_local_endpoints", prometheus.GaugeValue,
		"Local endpoints the health check node port reported (absent when it gave no usable answer).", svcLabels...))
	healthCheckProxyHealthy = newMetric("health_check_service_proxy_healthy", prometheus.GaugeValue,
		"serviceProxyHealthy as the health check node port reported it (kube-proxy 1.27+; absent otherwise).", svcLabels...)
	healthCheckDuration = newMetric("health_check_duration_seconds", prometheus.GaugeValue,
		"How long probing the Service's health check node port took.", svcLabels...)
)

// ServicesConfig configures the Services collector.
type ServicesConfig struct {
	View  APIView
	Rules RuleSource // nil: rules are not read, the API view decides
	// ProbeAddress picks the address to probe health check node ports on: a fixed address, or one of the
	// Node's InternalIPs confirmed local.
	ProbeAddress func(kubeview.NodeState) (string, error)
	Client       *http.Client
	ProbeTimeout time.Duration // cap per probe; the scrape's deadline may shorten it
	Concurrency  int           // probes in flight at once
	Logger       *slog.Logger
}

// Services exports, per Local Service, the API view, the health check node port's answer and the verdict.
type Services struct{ cfg ServicesConfig }

// NewServices returns the Services collector.
func NewServices(cfg ServicesConfig) *Services {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	return &Services{cfg: cfg}
}

func (*Services) Name() string { return "services" }

func (*Services) Metrics() []*Metric {
	return []*Metric{serviceInfo, localEndpoints, hasLocalEndpoint, inRotationMetric, blackhole, blackholeSource,
		healthCheckUp, healthCheckResult, healthCheckLocalEndpoints, healthCheckProxyHealthy, healthCheckDuration}
}

func (s *Services) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	snap, err := s.cfg.View.Snapshot()
	if err != nil {
		return fmt.Errorf("reading the API view: %w", err)
	}
	checks := s.probeAll(ctx, snap)

	var rules RuleView
	if s.cfg.Rules != nil {
		if rules, err = s.cfg.Rules.RuleView(ctx); err != nil {
			// Reported by the rules collector; here it only means the API view decides.
			s.cfg.Logger.Debug("kube-proxy rules unavailable, the API view decides", "err", err)
			rules = nil
		}
	}
	source := SourceAPI
	if rules != nil {
		source = SourceRules
	}
	ch <- blackholeSource.must(1, source)

	for i, svc := range snap.Services {
		ns, name := svc.Namespace, svc.Name
		hcnp := ""
		if svc.HealthCheckNodePort != 0 {
			hcnp = strconv.Itoa(int(svc.HealthCheckNodePort))
		}
		ch <- serviceInfo.must(1, ns, name, string(svc.Type), hcnp)
		ch <- localEndpoints.must(float64(svc.LocalEndpoints()), ns, name)
		ch <- hasLocalEndpoint.must(boolFloat(svc.HasLocalEndpoint()), ns, name)

		hc := checks[i]
		if hc != nil {
			ch <- healthCheckUp.must(boolFloat(hc.Result == nodeprobe.ResultOK), ns, name)
			for _, r := range nodeprobe.Results {
				ch <- healthCheckResult.must(boolFloat(hc.Result == r), ns, name, string(r))
			}
			if hc.LocalEndpoints >= 0 {
				ch <- healthCheckLocalEndpoints.must(float64(hc.LocalEndpoints), ns, name)
			}
			if hc.ServiceProxyHealthy != nil {
				ch <- healthCheckProxyHealthy.must(boolFloat(*hc.ServiceProxyHealthy), ns, name)
			}
			ch <- healthCheckDuration.must(hc.Duration.Seconds(), ns, name)
		}

		v := Decide(svc, snap.Node, hc, rules)
		ch <- inRotationMetric.must(boolFloat(v.InRotation), ns, name)
		ch <- blackhole.must(boolFloat(v.Blackhole), ns, name)
	}
	return nil
}

// probeAll probes the health check node port of every LoadBalancer Service, at most Concurrency at a time.
// The result is indexed like snap.Services; nil where a Service has no health check node port.
func (s *Services) probeAll(ctx context.Context, snap kubeview.Snapshot) []*nodeprobe.HealthCheck {
	out := make([]*nodeprobe.HealthCheck, len(snap.Services))
	var addr string
	var addrErr error
	addrOnce := sync.OnceFunc(func() { addr, addrErr = s.cfg.ProbeAddress(snap.Node) })

	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, svc := range snap.Services {
		if svc.HealthCheckNodePort == 0 || svc.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		addrOnce()
		if addrErr != nil {
			out[i] = &nodeprobe.HealthCheck{Result: nodeprobe.ResultError, LocalEndpoints: -1, Weight: -1,
				Err: fmt.Errorf("choosing the address to probe: %w", addrErr)}
			s.cfg.Logger.Warn("health check not probed", "namespace", svc.Namespace, "service", svc.Name, "err", addrErr)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				out[i] = &nodeprobe.HealthCheck{Result: nodeprobe.ResultTimeout, LocalEndpoints: -1, Weight: -1, Err: ctx.Err()}
				return
			}
			pctx, cancel := context.WithTimeout(ctx, nodeprobe.ProbeTimeout(ctx, s.cfg.ProbeTimeout))
			defer cancel()
			hc := nodeprobe.ProbeHealthCheckNodePort(pctx, s.cfg.Client, addr, svc.HealthCheckNodePort, svc.Namespace, svc.Name)
			if hc.Err != nil {
				s.cfg.Logger.Warn("health check node port probe failed", "namespace", svc.Namespace, "service", svc.Name,
					"result", string(hc.Result), "err", hc.Err)
			}
			out[i] = &hc
		}()
	}
	wg.Wait()
	return out
}
