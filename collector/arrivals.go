package collector

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The meter's states as exported: the meter's own (arrivals.Status), and meterDisabled (--no-arrivals.enabled).
var meterStates = []string{arrivals.StatusOK.String(), arrivals.StatusPermissionDenied.String(),
	arrivals.StatusFailed.String(), arrivals.StatusClosed.String(), meterDisabled}

const meterDisabled = "disabled"

// missedCause is why the meter missed packets (arrivals_missed_total's cause).
type missedCause string

const (
	missedRingFull  missedCause = "ring_full"  // the kernel dropped them: the ring was full
	missedRateLimit missedCause = "rate_limit" // over the meter's packet budget
	missedSampled   missedCause = "sampled"    // left out by the kernel filter's sampling under a flood (estimated)
)

var (
	arrivalsTotal = detailed(newMetric("arrivals_total", prometheus.CounterValue,
		"New external connection attempts that reached this node for Local Services, by kind and IP family.",
		"kind", "ip_family"),
		"New external connection attempts (TCP SYN, SCTP INIT; UDP datagrams) that reached this node for Local Services' destinations, by kind (node_port, load_balancer_ip, external_ip) and IP family, from the arrivals meter; health_check counts probes of health check node ports from outside the node. Counts start when the exporter starts.")
	healthCheckExpected = detailed(newMetric("health_check_expected_services", prometheus.GaugeValue,
		"LoadBalancer Services whose load balancer is known to probe their health check node port on this node."),
		"LoadBalancer Services with a health check node port whose load balancer is known to ask it over HTTP on this node (a known cloud controller's check, or the annotation localtraffic.io/health-check: health-check-node-port): probes from outside are expected only where this is above 0 (announcers and unknown controllers send none). Absent while the API view is unreadable.")
	healthCheckLastProbe = detailed(newMetric("health_check_last_probe_timestamp_seconds", prometheus.GaugeValue,
		"When a probe from outside the node last reached one of its health check node ports."),
		"When a probe from outside the node last reached one of its health check node ports (a load balancer checking it); absent when none has since the exporter started.")
	arrivalsMeterState = detailed(newMetric("arrivals_meter_state", prometheus.GaugeValue,
		"The arrivals meter's state, one-hot: anything but ok means arrivals are not observed.",
		"state"),
		"The arrivals meter's state, one-hot over ok, permission_denied (no CAP_NET_RAW), failed, closed and disabled: anything but ok means arrivals are not observed, never that none arrive.")
	arrivalsMeterStart = newMetric("arrivals_meter_start_time_seconds", prometheus.GaugeValue,
		"When the arrivals meter started counting (Unix time).")
	arrivalsMissed = detailed(newMetric("arrivals_missed_total", prometheus.CounterValue,
		"Packets the arrivals meter could not count, by IP family and cause.",
		"ip_family", "cause"),
		"Packets the arrivals meter could not count, by IP family and cause: ring_full (the kernel dropped them), rate_limit (over the meter's packet budget) or sampled (left out by the kernel filter, which passes a sample while the budget is exceeded; an estimate). Above zero, every arrival count is a lower bound (the meter is overloaded).")
)

// Arrivals exports, per node, what the arrivals meter observes: where external traffic really goes, who
// health-checks the node, and whether the meter sees at all. Per-Service counts are the service_arrivals
// collector's (off by default: the series budget).
type Arrivals struct{}

// NewArrivals returns the arrivals collector.
func NewArrivals() *Arrivals { return &Arrivals{} }

func (*Arrivals) Name() string { return "arrivals" }

func (*Arrivals) Metrics() []*Metric {
	return []*Metric{arrivalsTotal, healthCheckLastProbe, healthCheckExpected, arrivalsMeterState, arrivalsMeterStart, arrivalsMissed}
}

func (*Arrivals) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputAPI, scrape.InputArrivals}
}

func (*Arrivals) Update(st *scrape.State, out *Sink) error {
	if st.APIErr == nil {
		n := 0
		for _, r := range st.Services {
			if r.Service.HealthCheckContract(st.Node) {
				n++
			}
		}
		out.send(healthCheckExpected, float64(n))
	}
	a := st.Arrivals
	state := meterDisabled
	if a.Snapshot != nil {
		state = a.Snapshot.Status.String()
	}
	for _, s := range meterStates {
		out.send(arrivalsMeterState, boolFloat(s == state), s)
	}
	if a.Snapshot == nil {
		return nil
	}
	snap := a.Snapshot
	out.send(arrivalsMeterStart, float64(snap.Since.UnixNano())/1e9)
	for _, f := range snap.Families {
		out.send(arrivalsMissed, float64(f.Dropped), f.Family, string(missedRingFull))
		out.send(arrivalsMissed, float64(f.Shed), f.Family, string(missedRateLimit))
		out.send(arrivalsMissed, float64(f.Sampled), f.Family, string(missedSampled))
	}
	if snap.Status != arrivals.StatusOK {
		return errors.Join(snap.Err, a.WatchErr)
	}
	for _, kind := range []verdict.Kind{verdict.NodePort, verdict.LoadBalancerIP, verdict.ExternalIP, scrape.KindHealthCheck} {
		for _, fam := range []string{string(corev1.IPv4Protocol), string(corev1.IPv6Protocol)} {
			out.send(arrivalsTotal, float64(a.Totals[scrape.ArrivalKey{Kind: kind, Family: fam}]), string(kind), fam)
		}
	}
	var last time.Time
	for _, h := range snap.HealthChecks {
		if h.LastSeen.After(last) {
			last = h.LastSeen
		}
	}
	if !last.IsZero() {
		out.send(healthCheckLastProbe, float64(last.UnixNano())/1e9)
	}
	return a.WatchErr
}
