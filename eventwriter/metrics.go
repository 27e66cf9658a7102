package eventwriter

import "github.com/prometheus/client_golang/prometheus"

// The writer's own series, on the exporter's /metrics beside the process metrics (docs/metrics.md, "Event
// writer"). Every exporter with --events.write exports them; only the leader's move.

// metricSpec is one of the writer's metrics as docs/metrics.md lists it.
type metricSpec struct {
	Name, Type, Help string
	Labels           []string
}

var specs = struct{ leader, events, unreachable, missed, lookupsFailed metricSpec }{
	leader: metricSpec{Name: "localtraffic_event_writer_leader", Type: "gauge",
		Help: "1 while this exporter holds the Event writers' Lease and writes the cluster's exposure Events."},
	events: metricSpec{Name: "localtraffic_event_writer_events_total", Type: "counter", Labels: []string{"result"},
		Help: "Exposure Events this writer handled, by result: written, skipped (already written, or the Service gone) or failed."},
	unreachable: metricSpec{Name: "localtraffic_event_writer_peers_unreachable", Type: "gauge",
		Help: "Peers whose /episodes did not answer in time or usably at the leader's latest poll."},
	missed: metricSpec{Name: "localtraffic_event_writer_episodes_missed_total", Type: "counter",
		Help: "Episodes a peer no longer kept when the leader asked (its ring overran): no Event was written for them."},
	lookupsFailed: metricSpec{Name: "localtraffic_event_writer_note_lookups_failed_total", Type: "counter",
		Help: "Events written without their workload and pods' preStop: the Service's pods or their ReplicaSets could not be read (forbidden, gone, a Service without a selector whose EndpointSlices name no pod)."},
}

// MetricSpecs lists the writer's metrics, for the doc's test.
func MetricSpecs() []metricSpec {
	return []metricSpec{specs.events, specs.missed, specs.leader, specs.lookupsFailed, specs.unreachable}
}

// Result labels of localtraffic_event_writer_events_total.
const (
	ResultWritten = "written"
	ResultSkipped = "skipped"
	ResultFailed  = "failed"
)

type metrics struct {
	leader, unreachable   prometheus.Gauge
	events                *prometheus.CounterVec
	missed, lookupsFailed prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		leader:        prometheus.NewGauge(prometheus.GaugeOpts{Name: specs.leader.Name, Help: specs.leader.Help}),
		unreachable:   prometheus.NewGauge(prometheus.GaugeOpts{Name: specs.unreachable.Name, Help: specs.unreachable.Help}),
		events:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: specs.events.Name, Help: specs.events.Help}, specs.events.Labels),
		missed:        prometheus.NewCounter(prometheus.CounterOpts{Name: specs.missed.Name, Help: specs.missed.Help}),
		lookupsFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: specs.lookupsFailed.Name, Help: specs.lookupsFailed.Help}),
	}
	for _, r := range []string{ResultWritten, ResultSkipped, ResultFailed} {
		m.events.WithLabelValues(r)
	}
	return m
}

// Collectors are the writer's metrics, to register where the exporter serves its own.
func (w *Writer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{w.m.leader, w.m.unreachable, w.m.events, w.m.missed, w.m.lookupsFailed}
}
