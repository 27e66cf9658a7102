package collector

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The direct exposition: one scrape's series built straight into the protobuf structures the encoder reads,
// without client_golang's constant metrics and Registry. Through a Registry every series is built twice
// (a constant metric, then its dto copy), its labels sorted and hashed for the consistency check: at 2,000
// Services that was most of a scrape's garbage, and the garbage sets the exporter's RSS. A Service's series are
// then encoded once, as text, and kept while its result holds (serviceCache); WriteText writes the scrape. The
// Collector path (Bind) stays for tests and the pedantic registry; TestDirectExpositionEqualsRegistry keeps the
// two equal.

// familyOf is what the direct exposition keeps per metric: its help, type and labels in exposition order
// (sorted by name, node among them), resolved once per exporter.
type familyOf struct {
	metric     *Metric
	name, help string
	typ        *dto.MetricType
	names      []*string // sorted label names, node included when set
	order      []int     // order[i]: index into the series' label values of names[i]; -1 for node
	// header is the family's HELP and TYPE lines, for a family whose series are all kept ones.
	header []byte
	// owners are the collectors (by index) whose Metrics() list the metric: where its kept series are.
	owners []int
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

// directSink collects one collector's series of one scrape: those built now, and the Services' kept ones.
type directSink struct {
	fams     map[*Metric][]*dto.Metric
	services []*renderedService
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
	f := &familyOf{metric: m, name: m.FQName(), help: m.Help, typ: dto.MetricType_GAUGE.Enum()}
	switch {
	case m.Buckets != nil:
		f.typ = dto.MetricType_HISTOGRAM.Enum()
	case m.Type == prometheus.CounterValue:
		f.typ = dto.MetricType_COUNTER.Enum()
	}
	// The header exactly as the text encoder writes it: encode a family of one series and keep its first
	// two lines.
	var b bytes.Buffer
	zero := 0.0
	none := uint64(0)
	one := &dto.Metric{Gauge: &dto.Gauge{Value: &zero}, Counter: &dto.Counter{Value: &zero},
		Histogram: &dto.Histogram{SampleCount: &none, SampleSum: &zero}}
	if _, err := expfmt.MetricFamilyToText(&b, &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.typ, Metric: []*dto.Metric{one}}); err != nil {
		panic("the text encoder refused " + f.name + ": " + err.Error())
	}
	lines := b.Bytes()
	f.header = lines[:bytes.IndexByte(lines, '\n')+1]
	f.header = lines[:len(f.header)+bytes.IndexByte(lines[len(f.header):], '\n')+1]
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

// addHistogram builds one series of the histogram m into s, its buckets in their bounds' order (as
// client_golang's constant histograms have them).
func (s *directSink) addHistogram(f *familyOf, m *Metric, node *string, count uint64, sum float64, cumulative map[float64]uint64, labels []string) {
	ds := s.series(f, m, node, labels)
	h := &dto.Histogram{SampleCount: &count, SampleSum: &sum, Bucket: make([]*dto.Bucket, 0, len(m.Buckets))}
	for _, b := range m.Buckets {
		n := cumulative[b]
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &b, CumulativeCount: &n})
	}
	ds.m.Histogram = h
	s.fams[m] = append(s.fams[m], &ds.m)
}

// add builds one series of m into s.
func (s *directSink) add(f *familyOf, m *Metric, node *string, value float64, labels []string) {
	ds := s.series(f, m, node, labels)
	ds.v = value
	if *f.typ == dto.MetricType_COUNTER {
		ds.c.Value = &ds.v
		ds.m.Counter = &ds.c
	} else {
		ds.g.Value = &ds.v
		ds.m.Gauge = &ds.g
	}
	s.fams[m] = append(s.fams[m], &ds.m)
}

// series is a series of m with its labels, no value yet.
func (s *directSink) series(f *familyOf, m *Metric, node *string, labels []string) *directSeries {
	if len(labels) != len(m.Labels) {
		panic("collector sent " + m.FQName() + " with the wrong number of labels")
	}
	ds := &directSeries{pairs: make([]dto.LabelPair, len(f.names)), ptrs: make([]*dto.LabelPair, len(f.names))}
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
	return ds
}

// WriteText writes the scrape's series under ctx to w in the text format f (a text/plain format from
// expfmt.NegotiateAccept), with extra (the process's own families, whose names never overlap the exporter's)
// among them in name order. only, when not nil, keeps just the families it names (the `name[]` parameters of
// the request, as promhttp reads them).
//
// The text is written here rather than by promhttp because each Service's series are kept as text between
// scrapes (serviceCache): a series in the text format is about a fifth of its client_model objects, and at
// 10,000 Services those objects were the largest part of the live heap, which sets the resident set.
func (e *Exporter) WriteText(ctx context.Context, w io.Writer, f expfmt.Format, extra []*dto.MetricFamily, only map[string]bool) error {
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
	nodeSeries := map[*Metric][]*dto.Metric{}
	for _, s := range sinks {
		for m, series := range s.fams {
			nodeSeries[m] = append(nodeSeries[m], series...)
		}
	}

	bw := bufio.NewWriterSize(w, GzipBlock)
	enc := expfmt.NewEncoder(bw, f)
	ours, next := e.byName, 0
	for _, mf := range extra {
		for next < len(ours) && ours[next].name < mf.GetName() {
			if err := e.writeFamily(bw, enc, ours[next], nodeSeries, sinks, only); err != nil {
				return err
			}
			next++
		}
		if only != nil && !only[mf.GetName()] {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("writing %s: %w", mf.GetName(), err)
		}
	}
	for ; next < len(ours); next++ {
		if err := e.writeFamily(bw, enc, ours[next], nodeSeries, sinks, only); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the scrape: %w", err)
	}
	return nil
}

// writeFamily writes one of the exporter's families: the series built in this scrape, then those kept of each
// Service. A family without a series is not written (as a Registry leaves it out).
func (e *Exporter) writeFamily(w *bufio.Writer, enc expfmt.Encoder, f *familyOf, nodeSeries map[*Metric][]*dto.Metric, sinks []*directSink, only map[string]bool) error {
	if only != nil && !only[f.name] {
		return nil
	}
	header := false
	if series := nodeSeries[f.metric]; len(series) > 0 {
		sortSeries(series)
		if err := enc.Encode(&dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.typ, Metric: series}); err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
		header = true
	}
	for _, i := range f.owners {
		for _, rs := range sinks[i].services {
			text := rs.section(f.metric)
			if len(text) == 0 {
				continue
			}
			if !header {
				if _, err := w.Write(f.header); err != nil {
					return fmt.Errorf("writing %s: %w", f.name, err)
				}
				header = true
			}
			if _, err := w.Write(text); err != nil {
				return fmt.Errorf("writing %s: %w", f.name, err)
			}
		}
	}
	return nil
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

// serviceCache is one serviceRenderer's kept series, per Service.
type serviceCache struct {
	mu    sync.Mutex
	epoch uint64
	byKey map[serviceKey]*renderedService
	exp   *Exporter
}

// serviceKey is a Service's namespace and name: a struct, not a joined string, so that looking a Service up at
// every scrape allocates nothing.
type serviceKey struct{ namespace, name string }

// renderedService is one Service's series as the text format writes them, family after family in name order;
// it is never changed once made, so a scrape may write it after the cache moved on.
type renderedService struct {
	rev   uint64
	text  []byte
	parts []textPart
}

// textPart is where one family's lines end in a renderedService's text (they begin where the previous end).
type textPart struct {
	metric *Metric
	end    int32
}

// section is the Service's lines of m, or nil.
func (rs *renderedService) section(m *Metric) []byte {
	begin := int32(0)
	for _, p := range rs.parts {
		if p.metric == m {
			return rs.text[begin:p.end]
		}
		begin = p.end
	}
	return nil
}

func newServiceCache(e *Exporter) *serviceCache {
	return &serviceCache{byKey: map[serviceKey]*renderedService{}, exp: e}
}

// render sends c's node-level series, and hands over every Service's (out.direct.services) from what was kept
// where the Service's Rev and the State's Epoch are those it was rendered at. A result without a Rev (not the
// model's) is rendered afresh.
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
	kept := make([]*renderedService, 0, len(st.Services))
	var scratch bytes.Buffer
	for _, r := range st.Services {
		if r.Rev == 0 || st.Epoch == 0 {
			c.UpdateService(st, r, out)
			continue
		}
		key := serviceKey{r.Service.Namespace, r.Service.Name}
		k := sc.byKey[key]
		if k == nil || k.rev != r.Rev {
			sub := &directSink{fams: map[*Metric][]*dto.Metric{}}
			c.UpdateService(st, r, &Sink{direct: sub, exp: sc.exp})
			k = sc.exp.asText(r.Rev, sub.fams, &scratch)
			sc.byKey[key] = k
		}
		kept = append(kept, k)
	}
	out.direct.services = kept
	if len(sc.byKey) > len(kept) {
		// Some Services are gone: keep only the ones rendered now.
		present := make(map[serviceKey]bool, len(kept))
		for _, r := range st.Services {
			present[serviceKey{r.Service.Namespace, r.Service.Name}] = true
		}
		for k := range sc.byKey {
			if !present[k] {
				delete(sc.byKey, k)
			}
		}
	}
	return err
}

// asText encodes one Service's series, with the text encoder (so byte for byte as a scrape of client_model
// objects would write them) without the families' headers.
func (e *Exporter) asText(rev uint64, fams map[*Metric][]*dto.Metric, scratch *bytes.Buffer) *renderedService {
	ms := make([]*familyOf, 0, len(fams))
	for m := range fams {
		ms = append(ms, e.families[m])
	}
	slices.SortFunc(ms, func(a, b *familyOf) int { return strings.Compare(a.name, b.name) })
	scratch.Reset()
	segments := make([][2]int, 0, len(ms))
	total := 0
	for _, f := range ms {
		series := fams[f.metric]
		sortSeries(series)
		start := scratch.Len()
		if _, err := expfmt.MetricFamilyToText(scratch, &dto.MetricFamily{Name: &f.name, Type: f.typ, Metric: series}); err != nil {
			// Only an empty family or one without a name fails, and neither is built here.
			panic("the text encoder refused " + f.name + ": " + err.Error())
		}
		afterType := start + bytes.IndexByte(scratch.Bytes()[start:], '\n') + 1
		segments = append(segments, [2]int{afterType, scratch.Len()})
		total += scratch.Len() - afterType
	}
	rs := &renderedService{rev: rev, text: make([]byte, 0, total), parts: make([]textPart, 0, len(ms))}
	for i, seg := range segments {
		rs.text = append(rs.text, scratch.Bytes()[seg[0]:seg[1]]...)
		rs.parts = append(rs.parts, textPart{metric: ms[i].metric, end: int32(len(rs.text))})
	}
	return rs
}
