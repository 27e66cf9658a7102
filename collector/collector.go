// Package collector renders the node's state into Prometheus metrics. For each scrape its StateSource (in the
// exporter, scrape's Model, the node model that keeps the verdicts current as the inputs change)
// hands over one read-only scrape.State; each collector (one job, one file) renders that State, and the
// Exporter reports how each one fared. Nothing here reads a source or decides: what a series says was settled
// before rendering began. The direct exposition keeps each Service's rendered series while the model says its
// result holds.
package collector

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
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
	Inputs() []scrape.Input
	// Update sends the collector's metrics for one scrape's State. It returns the error of an input it
	// depends on that could not be gathered, so that the failure counts against this collector.
	Update(st *scrape.State, out *Sink) error
}

// StateSource is where the Exporter gets each scrape's State; ctx carries the scrape's deadline. *Gatherer is
// the one that reads the node; the landing page's lastState records what it gave, tests count or fake it.
type StateSource interface {
	Gather(ctx context.Context) *scrape.State
}

// Metric is a metric's definition: the one place its name, type, help and labels are written.
type Metric struct {
	Name string // without the namespace
	Type prometheus.ValueType
	// Help is the metric's HELP text: one short sentence (docs_test.go holds the limit), what a reader of the
	// exposition needs to place the series.
	Help   string
	Labels []string
	// Doc, when set, is the whole description docs/metrics.md's table gives in place of Help: every value of a
	// label and what it means, the caveats. It is not exported: /metrics carries Help on every scrape.
	Doc string
	// Buckets, when set, make the metric a histogram with these upper bounds (its Type is then unused): sent
	// with Sink.histogram.
	Buckets []float64
	// Stable metrics are a contract (alerts, dashboards and outside checks use them): renaming one or changing
	// its labels is a breaking change. The others may still change.
	Stable bool
	// defaultScope narrows a metric of a default collector: DefaultNo (only with a collector option) or
	// DefaultHealthChecked (by default only for Services with a health check node port); "" means every series.
	defaultScope ByDefault
	desc         *prometheus.Desc
}

// stable marks m as part of the exporter's contract.
func stable(m *Metric) *Metric {
	m.Stable = true
	return m
}

// detailed gives m the description docs/metrics.md shows in place of its short Help.
func detailed(m *Metric, doc string) *Metric {
	m.Doc = doc
	return m
}

// scoped narrows what a default collector exports of m by default (see Metric.defaultScope).
func scoped(scope ByDefault, m *Metric) *Metric {
	m.defaultScope = scope
	return m
}

func newMetric(name string, typ prometheus.ValueType, help string, labels ...string) *Metric {
	return &Metric{Name: name, Type: typ, Help: help, Labels: labels,
		desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)}
}

// newHistogram defines a histogram with the buckets' upper bounds (+Inf is implied).
func newHistogram(name, help string, buckets []float64, labels ...string) *Metric {
	m := newMetric(name, prometheus.UntypedValue, help, labels...)
	m.Buckets = buckets
	return m
}

// FQName is the metric's full name.
func (m *Metric) FQName() string { return Namespace + "_" + m.Name }

// Sink is where a collector sends one scrape's series: with the exporter's descriptors (the node's name
// built in once, not wrapped onto every series of every scrape), and only the metrics the lists keep.
type Sink struct {
	// Either the Collector path (a channel of constant metrics with the exporter's descriptors) or the
	// direct exposition (exposition.go).
	ch     chan<- prometheus.Metric
	direct *directSink
	exp    *Exporter
}

// send emits one series of m. The label count is fixed by m's definition and every metric a collector sends
// is in its Metrics(), so a panic here is a bug.
func (s *Sink) send(m *Metric, value float64, labels ...string) {
	if s.exp.keep != nil && !s.exp.keep[m] {
		return
	}
	d := s.exp.descs[m]
	if d == nil {
		panic("collector sent " + m.FQName() + ", which no collector's Metrics() lists")
	}
	if s.direct != nil {
		s.direct.add(s.exp.families[m], m, &s.exp.node, value, labels)
		return
	}
	s.ch <- prometheus.MustNewConstMetric(d, m.Type, value, labels...)
}

// histogram emits one series of the histogram m: count observations summing to sum, cumulative the count at
// or under each of m's bucket bounds.
func (s *Sink) histogram(m *Metric, count uint64, sum float64, cumulative map[float64]uint64, labels ...string) {
	if s.exp.keep != nil && !s.exp.keep[m] {
		return
	}
	d := s.exp.descs[m]
	if d == nil || m.Buckets == nil {
		panic("collector sent " + m.FQName() + ", which no collector's Metrics() lists as a histogram")
	}
	if s.direct != nil {
		s.direct.addHistogram(s.exp.families[m], m, &s.exp.node, count, sum, cumulative, labels)
		return
	}
	s.ch <- prometheus.MustNewConstHistogram(d, count, sum, cumulative, labels...)
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
	states     StateSource
	collectors []Collector
	logger     *slog.Logger
	// descs is each metric's descriptor as exported, built once: with WithNode, the node's name is a
	// constant label of every descriptor. (Wrapping a registry with the label instead builds a new
	// descriptor for every series of every scrape: most of a scrape's allocations at 2,000 Services.)
	descs map[*Metric]*prometheus.Desc
	// families is the same for the direct exposition (exposition.go).
	families map[*Metric]*familyOf
	byName   []*familyOf // the same, in name order
	node     string      // "" until WithNode
	// keep, when set, is the set of metrics the allow/deny lists leave; the others are never sent.
	keep map[*Metric]bool
	// caches keep, per collector (by index; nil for one that is no serviceRenderer), the series the direct
	// exposition rendered of each Service (exposition.go). Every copy (WithNode, WithFilter) has its own: the
	// node's label and the filter are in the series.
	caches []*serviceCache
}

// NewExporter returns an Exporter over the given source of States and collectors.
func NewExporter(logger *slog.Logger, states StateSource, collectors ...Collector) *Exporter {
	e := &Exporter{states: states, collectors: collectors, logger: logger}
	e.build()
	return e
}

// build resolves every metric's descriptor and exposition family for the exporter's node.
func (e *Exporter) build() {
	e.descs, e.families, e.byName = map[*Metric]*prometheus.Desc{}, map[*Metric]*familyOf{}, nil
	for _, m := range e.Metrics() {
		e.descs[m] = m.desc
		if e.node != "" {
			e.descs[m] = prometheus.NewDesc(m.FQName(), m.Help, m.Labels, prometheus.Labels{"node": e.node})
		}
		if e.families[m] == nil {
			e.families[m] = e.familyOf(m)
			e.byName = append(e.byName, e.families[m])
		}
	}
	sort.Slice(e.byName, func(i, j int) bool { return e.byName[i].name < e.byName[j].name })
	for i, c := range e.collectors {
		for _, m := range c.Metrics() {
			f := e.families[m]
			if !slices.Contains(f.owners, i) {
				f.owners = append(f.owners, i)
			}
		}
	}
	e.caches = make([]*serviceCache, len(e.collectors))
	for i := range e.collectors {
		e.caches[i] = newServiceCache(e)
	}
}

// WithNode returns a copy of e whose every series carries node="<node>", the node the exporter runs on.
func (e *Exporter) WithNode(node string) *Exporter {
	c := *e
	c.node = node
	c.build()
	return &c
}

// WithFilter returns a copy of e that exports only the metrics f keeps (nil keeps all).
func (e *Exporter) WithFilter(f *MetricFilter) *Exporter {
	c := *e
	c.keep = nil
	if f != nil {
		c.keep = map[*Metric]bool{}
		for _, m := range e.Metrics() {
			if f.Keep(m.FQName()) {
				c.keep[m] = true
			}
		}
	}
	c.caches = make([]*serviceCache, len(c.collectors))
	for i := range c.collectors {
		c.caches[i] = newServiceCache(&c)
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
		if b.e.keep == nil || b.e.keep[m] {
			ch <- b.e.descs[m]
		}
	}
}

// Collect gathers the scrape's State once, then runs every collector over it. A failing collector costs only
// its own metrics.
func (b *boundExporter) Collect(ch chan<- prometheus.Metric) {
	out := &Sink{ch: ch, exp: b.e}
	st := b.e.states.Gather(b.ctx)
	var wg sync.WaitGroup
	for _, c := range b.e.collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.e.run(st, c, out)
		}()
	}
	wg.Wait()
}

// run renders one collector. Its duration is the longest gathering time of its inputs (they were read
// concurrently) plus its own rendering.
func (e *Exporter) run(st *scrape.State, c Collector, out *Sink) {
	e.runWith(st, c, out, func() error { return c.Update(st, out) })
}

// runWith is run with update rendering the collector's series.
func (e *Exporter) runWith(st *scrape.State, c Collector, out *Sink, update func() error) {
	start := time.Now()
	err := update()
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
	out.send(scrapeDuration, took.Seconds(), c.Name())
	out.send(scrapeSuccess, success, c.Name())
}
