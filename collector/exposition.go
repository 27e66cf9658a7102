package collector

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/localtraffic/localtraffic-exporter/collector/scrape"
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
			if sr, ok := c.(serviceRenderer); ok {
				e.runWith(st, c, out, func() error { return e.caches[i].render(st, sr, out) })
				return
			}
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

// serviceRenderer is a collector whose series are mostly one Service's each. The direct exposition keeps what
// it rendered of each Service while the node model says nothing it reads changed (the Service's Rev and the
// State's Epoch), so a scrape renders only the Services that changed since the last one, and the node-level
// series (UpdateNode), which are rebuilt every scrape.
type serviceRenderer interface {
	// UpdateNode sends the series that are no one Service's, and whether the Services' are sent at all (not
	// when an input they need failed: err says which).
	UpdateNode(st *scrape.State, out *Sink) (services bool, err error)
	// UpdateService sends one Service's series; it reads nothing of st that State.Epoch does not cover.
	UpdateService(st *scrape.State, r *scrape.ServiceResult, out *Sink)
}

// updateAll is a serviceRenderer's Update: the node's series, then every Service's.
func updateAll(c serviceRenderer, st *scrape.State, out *Sink) error {
	services, err := c.UpdateNode(st, out)
	if services {
		for _, r := range st.Services {
			c.UpdateService(st, r, out)
		}
	}
	return err
}

// serviceCache is one serviceRenderer's kept series, per Service key.
type serviceCache struct {
	mu    sync.Mutex
	epoch uint64
	byKey map[string]*renderedService
	exp   *Exporter
}

type renderedService struct {
	rev    uint64
	series map[*Metric][]*dto.Metric
}

func newServiceCache(e *Exporter) *serviceCache {
	return &serviceCache{byKey: map[string]*renderedService{}, exp: e}
}

// render sends c's node-level series and every Service's, from what was kept where the Service's Rev and the
// State's Epoch are those it was rendered at. A result without a Rev (not the model's) is rendered afresh.
func (sc *serviceCache) render(st *scrape.State, c serviceRenderer, out *Sink) error {
	services, err := c.UpdateNode(st, out)
	if !services {
		return err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st.Epoch != sc.epoch {
		clear(sc.byKey)
		sc.epoch = st.Epoch
	}
	seen := 0
	for _, r := range st.Services {
		if r.Rev == 0 || st.Epoch == 0 {
			c.UpdateService(st, r, out)
			continue
		}
		key := r.Service.Namespace + "/" + r.Service.Name
		k := sc.byKey[key]
		if k == nil || k.rev != r.Rev {
			sub := &directSink{fams: map[*Metric][]*dto.Metric{}}
			c.UpdateService(st, r, &Sink{direct: sub, exp: sc.exp})
			k = &renderedService{rev: r.Rev, series: sub.fams}
			sc.byKey[key] = k
		}
		seen++
		for m, series := range k.series {
			out.direct.fams[m] = append(out.direct.fams[m], series...)
		}
	}
	if len(sc.byKey) > seen {
		// Some Services are gone: keep only the ones rendered now.
		keep := make(map[string]bool, seen)
		for _, r := range st.Services {
			keep[r.Service.Namespace+"/"+r.Service.Name] = true
		}
		for k := range sc.byKey {
			if !keep[k] {
				delete(sc.byKey, k)
			}
		}
	}
	return err
}
