// Package collector turns the exporter's inputs (the API view, kube-proxy's health answers, its rules) into
// Prometheus metrics. For each scrape the Gatherer reads every input once, concurrently and under the scrape's
// deadline, and decides the verdicts into one State; each collector (one job, one file) renders that State,
// and the Exporter reports how each one fared.
package collector

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric the exporter defines.
const Namespace = "localtraffic"

// ErrNoData means the collector's source does not exist on this node (say, no kube-proxy rules to read). It is
// logged at debug level and does not count as a failed collector.
var ErrNoData = errors.New("collector returned no data")

// Collector is one job of the exporter: it renders part of a scrape's State.
type Collector interface {
	// Name labels the collector's self-metrics.
	Name() string
	// Metrics lists every metric the collector may emit, for Describe and the documentation check.
	Metrics() []*Metric
	// Inputs lists the gathered inputs the collector renders: their gathering time counts in its duration.
	Inputs() []Input
	// Update sends the collector's metrics for one scrape's State. It returns the error of an input it
	// depends on that could not be gathered, so that the failure counts against this collector.
	Update(st *State, ch chan<- prometheus.Metric) error
}

// StateGatherer builds the State of one scrape; ctx carries the scrape's deadline. *Gatherer implements it.
type StateGatherer interface {
	Gather(ctx context.Context) *State
}

// Metric is a metric's definition: the one place its name, type, help and labels are written.
type Metric struct {
	Name   string // without the namespace
	Type   prometheus.ValueType
	Help   string
	Labels []string
	// Stable metrics are a contract (alerts, dashboards and outside checks use them): renaming one or changing
	// its labels is a breaking change. The others may still change.
	Stable bool
	// defaultScope narrows a metric of a default collector: "no" (only with a collector option) or
	// "health-checked" (by default only for Services with a health check node port); "" means every series.
	defaultScope string
	desc         *prometheus.Desc
}

// stable marks m as part of the exporter's contract.
func stable(m *Metric) *Metric {
	m.Stable = true
	return m
}

// scoped narrows what a default collector exports of m by default (see Metric.defaultScope).
func scoped(scope string, m *Metric) *Metric {
	m.defaultScope = scope
	return m
}

func newMetric(name string, typ prometheus.ValueType, help string, labels ...string) *Metric {
	return &Metric{Name: name, Type: typ, Help: help, Labels: labels,
		desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)}
}

// FQName is the metric's full name.
func (m *Metric) FQName() string { return Namespace + "_" + m.Name }

// Desc is the metric's Prometheus descriptor.
func (m *Metric) Desc() *prometheus.Desc { return m.desc }

// must builds a constant metric; the label count is fixed by the definition, so an error here is a bug.
func (m *Metric) must(value float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(m.desc, m.Type, value, labels...)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	scrapeDuration = stable(newMetric("scrape_collector_duration_seconds", prometheus.GaugeValue,
		"How long a collector took in the last scrape.", "collector"))
	scrapeSuccess = stable(newMetric("scrape_collector_success", prometheus.GaugeValue,
		"1 when a collector succeeded in the last scrape, 0 when it failed.", "collector"))
)

// Exporter gathers one State per scrape and runs a set of collectors over it. It holds no per-scrape state:
// Bind makes a prometheus.Collector for one scrape's context.
type Exporter struct {
	gatherer   StateGatherer
	collectors []Collector
	logger     *slog.Logger
	// keep, when set, is the set of metrics the allow/deny lists leave; the others are never sent.
	keep map[*prometheus.Desc]bool
}

// NewExporter returns an Exporter over the given gatherer and collectors.
func NewExporter(logger *slog.Logger, g StateGatherer, collectors ...Collector) *Exporter {
	return &Exporter{gatherer: g, collectors: collectors, logger: logger}
}

// WithFilter returns a copy of e that exports only the metrics f keeps (nil keeps all).
func (e *Exporter) WithFilter(f *MetricFilter) *Exporter {
	c := *e
	c.keep = nil
	if f != nil {
		c.keep = map[*prometheus.Desc]bool{}
		for _, m := range e.Metrics() {
			if f.Keep(m.FQName()) {
				c.keep[m.desc] = true
			}
		}
	}
	return &c
}

// Metrics lists every metric the exporter's collectors may emit, sorted by name, self-metrics included (and
// before any filter).
func (e *Exporter) Metrics() []*Metric {
	all := []*Metric{scrapeDuration, scrapeSuccess}
	for _, c := range e.collectors {
		all = append(all, c.Metrics()...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

// Bind returns the collector for one scrape: its Collect runs under ctx.
func (e *Exporter) Bind(ctx context.Context) prometheus.Collector {
	return &boundExporter{e: e, ctx: ctx}
}

type boundExporter struct {
	e   *Exporter
	ctx context.Context
}

func (b *boundExporter) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range b.e.Metrics() {
		if b.e.keep == nil || b.e.keep[m.desc] {
			ch <- m.desc
		}
	}
}

// Collect gathers the scrape's State once, then runs every collector over it. A failing collector costs only
// its own metrics.
func (b *boundExporter) Collect(ch chan<- prometheus.Metric) {
	if b.e.keep != nil {
		// The collectors render everything; one forwarder drops what the lists exclude, so no collector needs
		// to know about them.
		out, filtered := ch, make(chan prometheus.Metric, 64)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for m := range filtered {
				if b.e.keep[m.Desc()] {
					out <- m
				}
			}
		}()
		defer func() {
			close(filtered)
			<-done
		}()
		ch = filtered
	}
	st := b.e.gatherer.Gather(b.ctx)
	var wg sync.WaitGroup
	for _, c := range b.e.collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.e.run(st, c, ch)
		}()
	}
	wg.Wait()
}

// run renders one collector. Its duration is the longest gathering time of its inputs (they were read
// concurrently) plus its own rendering.
func (e *Exporter) run(st *State, c Collector, ch chan<- prometheus.Metric) {
	start := time.Now()
	err := c.Update(st, ch)
	took := time.Since(start)
	var input time.Duration
	for _, in := range c.Inputs() {
		input = max(input, st.Took(in))
	}
	took += input
	success := 1.0
	switch {
	case err == nil:
	case errors.Is(err, ErrNoData):
		e.logger.Debug("collector has no data", "collector", c.Name(), "err", err)
	default:
		success = 0
		e.logger.Error("collector failed", "collector", c.Name(), "duration_seconds", took.Seconds(), "err", err)
	}
	ch <- scrapeDuration.must(took.Seconds(), c.Name())
	ch <- scrapeSuccess.must(success, c.Name())
}
