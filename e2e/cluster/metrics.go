package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of an exporter's /metrics.
type Metrics struct {
	Families map[string]*dto.MetricFamily
	Raw      string
	// rec, when set (Recording), notes every selection made through Series, which every lookup goes through.
	rec *lookups
}

// Lookup is one selection of series a check made on a recording Metrics: which series it asked about, whatever
// it concluded.
type Lookup struct {
	Name   string
	Labels Labels
}

// lookups is a recording's log; checks may run from several goroutines.
type lookups struct {
	mu  sync.Mutex
	log []Lookup
}

// Recording returns m noting every lookup made on it (and on its copies) from now on: what a scenario's checks
// looked at, read back with Lookups once they passed.
func (m Metrics) Recording() Metrics {
	m.rec = &lookups{}
	return m
}

// Lookups returns the selections made on a recording Metrics, in order (none when m is not recording).
func (m Metrics) Lookups() []Lookup {
	if m.rec == nil {
		return nil
	}
	m.rec.mu.Lock()
	defer m.rec.mu.Unlock()
	return append([]Lookup(nil), m.rec.log...)
}

// Labels selects series: every given label must match; labels not given are ignored.
type Labels map[string]string

// ParseMetrics parses the Prometheus text format.
func ParseMetrics(text string) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	return Metrics{Families: fams, Raw: text}, nil
}

// Series returns the series of metric name whose labels include want.
func (m Metrics) Series(name string, want Labels) []*dto.Metric {
	if m.rec != nil {
		m.rec.mu.Lock()
		m.rec.log = append(m.rec.log, Lookup{Name: name, Labels: maps.Clone(want)})
		m.rec.mu.Unlock()
	}
	fam := m.Families[name]
	if fam == nil {
		return nil
	}
	var out []*dto.Metric
	for _, s := range fam.Metric {
		if matches(s, want) {
			out = append(out, s)
		}
	}
	return out
}

// Value returns the value of the single series of name matching want. ok is false when none matches; an error
// results when several do.
func (m Metrics) Value(name string, want Labels) (v float64, ok bool, err error) {
	series := m.Series(name, want)
	switch len(series) {
	case 0:
		return 0, false, nil
	case 1:
		return value(series[0]), true, nil
	default:
		return 0, false, fmt.Errorf("%s%v matches %d series", name, want, len(series))
	}
}

// Expect checks that the single series of name matching want has value v, for use in wait loops.
func (m Metrics) Expect(name string, want Labels, v float64) error {
	got, ok, err := m.Value(name, want)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no series %s%v", name, want)
	}
	if got != v {
		return fmt.Errorf("%s%v = %v, want %v", name, want, got, v)
	}
	return nil
}

// ExpectAbsent checks that no series of name matches want.
func (m Metrics) ExpectAbsent(name string, want Labels) error {
	if s := m.Series(name, want); len(s) > 0 {
		return fmt.Errorf("%s%v present (%d series), want none", name, want, len(s))
	}
	return nil
}

// Grep returns the raw lines that mention every given substring, sorted (for error messages and the demo).
func (m Metrics) Grep(substrings ...string) string {
	var out []string
	for _, l := range strings.Split(m.Raw, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		all := true
		for _, s := range substrings {
			if !strings.Contains(l, s) {
				all = false
				break
			}
		}
		if all && l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func matches(s *dto.Metric, want Labels) bool {
	found := 0
	for _, lp := range s.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

// Value is a sample's value: a gauge's, counter's or untyped one's, a summary's or histogram's sum.
func Value(s *dto.Metric) float64 { return value(s) }

func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	case s.Summary != nil:
		return s.Summary.GetSampleSum()
	case s.Histogram != nil:
		return s.Histogram.GetSampleSum()
	}
	return 0
}

// Metrics scrapes the exporter on node (from inside the node's namespace) and parses the result.
func (c *Cluster) Metrics(ctx context.Context, node string) (Metrics, error) {
	text, err := c.ScrapeText(ctx, node)
	if err != nil {
		return Metrics{}, err
	}
	return ParseMetrics(text)
}

// ScrapeText returns the raw text of the exporter's /metrics on node.
func (c *Cluster) ScrapeText(ctx context.Context, node string) (string, error) {
	return c.ScrapeTextOn(ctx, node, ExporterPort)
}

// MetricsOn scrapes the exporter listening on port on node (Node.StartExporterOn) and parses the result.
func (c *Cluster) MetricsOn(ctx context.Context, node string, port int) (Metrics, error) {
	text, err := c.ScrapeTextOn(ctx, node, port)
	if err != nil {
		return Metrics{}, err
	}
	return ParseMetrics(text)
}

// ScrapeTextOn returns the raw text of /metrics of the exporter listening on port on node.
func (c *Cluster) ScrapeTextOn(ctx context.Context, node string, port int) (string, error) {
	n := c.Node(node)
	if n == nil {
		return "", fmt.Errorf("scrape: no node %q", node)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext, DisableKeepAlives: true}, Timeout: 20 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.MetricsURLOn(port), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape %s:%d: %w", node, port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape %s:%d: %w", node, port, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s:%d: %s: %.500s", node, port, resp.Status, body)
	}
	return string(body), nil
}
