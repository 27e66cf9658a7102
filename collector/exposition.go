package collector

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The direct exposition: one scrape's series built straight into the protobuf structures the encoder reads,
// without client_golang's constant metrics and Registry. Through a Registry every series is built twice
// (a constant metric, then its dto copy), its labels sorted and hashed for the consistency check: at 2,000
// Services that was most of a scrape's garbage, and the garbage sets the exporter's RSS. The Collector path
// (Bind) stays for tests and the pedantic registry; TestDirectExpositionEqualsRegistry keeps the two equal.

// familyOf is what the direct exposition keeps per metric: its help, type and labels in exposition order
// (sorted by name, node among them), resolved once per exporter.
type familyOf struct {
	name, help string
	typ        *dto.MetricType
	names      []*string // sorted label names, node included when set
	order      []int     // order[i]: index into the series' label values of names[i]; -1 for node
}

// directSeries is one series in one allocation: the metric, its value holder and its label pairs.
type directSeries struct {
	m     dto.Metric
	g     dto.Gauge
	c     dto.Counter
	v     float64
	pairs []dto.LabelPair
	ptrs  []*dto.LabelPair
}

// directSink collects one collector's series of one scrape.
type directSink struct {
	fams map[*Metric][]*dto.Metric
}

func (e *Exporter) familyOf(m *Metric) *familyOf {
	names := append([]string{}, m.Labels...)
	if e.node != "" {
		names = append(names, "node")
	}
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return names[idx[a]] < names[idx[b]] })
	f := &familyOf{name: m.FQName(), help: m.Help, typ: dto.MetricType_GAUGE.Enum()}
	if m.Type == prometheus.CounterValue {
		f.typ = dto.MetricType_COUNTER.Enum()
	}
	for _, i := range idx {
		f.names = append(f.names, &names[i])
		if i >= len(m.Labels) {
			f.order = append(f.order, -1)
		} else {
			f.order = append(f.order, i)
		}
	}
	return f
}

// add builds one series of m into s.
func (s *directSink) add(f *familyOf, m *Metric, node *string, value float64, labels []string) {
	if len(labels) != len(m.Labels) {
		panic("collector sent " + m.FQName() + " with the wrong number of labels")
	}
	ds := &directSeries{v: value, pairs: make([]dto.LabelPair, len(f.names)), ptrs: make([]*dto.LabelPair, len(f.names))}
	for i, name := range f.names {
		ds.pairs[i].Name = name
		if j := f.order[i]; j < 0 {
			ds.pairs[i].Value = node
		} else {
			ds.pairs[i].Value = &labels[j]
		}
		ds.ptrs[i] = &ds.pairs[i]
	}
	ds.m.Label = ds.ptrs
	if *f.typ == dto.MetricType_COUNTER {
		ds.c.Value = &ds.v
		ds.m.Counter = &ds.c
	} else {
		ds.g.Value = &ds.v
		ds.m.Gauge = &ds.g
	}
	s.fams[m] = append(s.fams[m], &ds.m)
}

// Exposition returns the scrape's series under ctx, built directly (see above), as the prometheus.Gatherer
// promhttp serves.
func (e *Exporter) Exposition(ctx context.Context) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return e.directFamilies(ctx), nil })
}

func (e *Exporter) directFamilies(ctx context.Context) []*dto.MetricFamily {
	st := e.states.Gather(ctx)
	sinks := make([]*directSink, len(e.collectors))
	var wg sync.WaitGroup
	for i, c := range e.collectors {
		sinks[i] = &directSink{fams: map[*Metric][]*dto.Metric{}}
		out := &Sink{direct: sinks[i], exp: e}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run(st, c, out)
		}()
	}
	wg.Wait()
	merged := map[*Metric][]*dto.Metric{}
	for _, s := range sinks {
		for m, series := range s.fams {
			merged[m] = append(merged[m], series...)
		}
	}
	out := make([]*dto.MetricFamily, 0, len(merged))
	for m, series := range merged {
		f := e.families[m]
		sortSeries(series)
		out = append(out, &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.typ, Metric: series})
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// sortSeries orders a family's series by their label values, as the Registry does (every series of a family
// has the same label names, in the same order).
func sortSeries(series []*dto.Metric) {
	slices.SortFunc(series, func(a, b *dto.Metric) int {
		for i := range a.Label {
			if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
				return c
			}
		}
		return 0
	})
}
