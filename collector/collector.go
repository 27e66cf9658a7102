// Package collector turns the exporter's inputs (the API view, kube-proxy's health answers, its rules) into
// Prometheus metrics. Each collector has one job and one file; Exporter runs them concurrently for each scrape,
// under that scrape's deadline, and reports how each one fared.
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

// Collector is one job of the exporter.
type Collector interface {
	// Name labels the collector's self-metrics.
	Name() string
	// Metrics lists every metric the collector may emit, for Describe and the documentation check.
	Metrics() []*Metric
	// Update sends the collector's metrics for one scrape. ctx carries the scrape's deadline.
	Update(ctx context.Context, ch chan<- prometheus.Metric) error
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
	desc   *prometheus.Desc
}

// stable marks m as part of the exporter's contract.
func stable(m *Metric) *Metric {
	m.Stable = true
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

// Exporter runs a set of collectors. It holds no per-scrape state: Bind makes a prometheus.Collector for one
// scrape's context.
type Exporter struct {
	collectors []Collector
	logger     *slog.Logger
}

// NewExporter returns an Exporter over the given collectors.
func NewExporter(logger *slog.Logger, collectors ...Collector) *Exporter {
	return &Exporter{collectors: collectors, logger: logger}
}

// Metrics lists every metric the exporter's collectors may emit, sorted by name, self-metrics included.
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
		ch <- m.desc
	}
}

// Collect runs every collector concurrently. A failing collector costs only its own metrics.
func (b *boundExporter) Collect(ch chan<- prometheus.Metric) {
	var wg sync.WaitGroup
	for _, c := range b.e.collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.e.run(b.ctx, c, ch)
		}()
	}
	wg.Wait()
}

func (e *Exporter) run(ctx context.Context, c Collector, ch chan<- prometheus.Metric) {
	start := time.Now()
	err := c.Update(ctx, ch)
	took := time.Since(start)
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
