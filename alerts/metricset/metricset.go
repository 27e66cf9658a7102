// Package metricset is the exporter's metric set as data: every metric's name, type, labels, help and description, stability,
// collector and whether a default install exports it. The collector's docs test generates metrics_gen.go from
// the code, beside docs/metrics.md's table, and fails while either is stale, so the rules' and dashboards'
// tests (this module) and the e2e suite read the exporter's metrics without importing its module (client-go)
// or parsing Markdown. It imports only the standard library: a module that requires the alerts module for it
// builds nothing else of that module.
package metricset

import "strings"

// Type is a metric's Prometheus type.
type Type string

// The Prometheus metric types.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Untyped   Type = "untyped"
	Histogram Type = "histogram"
	Summary   Type = "summary"
)

// Default tells whether a scrape of an exporter started without flags exports a metric.
type Default string

// The defaults a metric can have.
const (
	// DefaultYes: every series, by default.
	DefaultYes Default = "yes"
	// DefaultNo: opt-in; a collector flag or a collector option turns it on.
	DefaultNo Default = "no"
	// DefaultHealthChecked: by default only for Services with a health check node port.
	DefaultHealthChecked Default = "health-checked"
)

// Metric is one metric the exporter defines.
type Metric struct {
	Name      string
	Type      Type
	Labels    []string // node first: the handler adds it to every series
	Help      string   // the HELP text: one short sentence
	Doc       string   // docs/metrics.md's description: every label value and caveat (Help when it says all)
	Stable    bool     // part of the exporter's contract: renaming it or changing its labels breaks users
	Collector string   // the collector that exports it, or "(exporter)" for the scrape's own metrics
	Default   Default
}

// Set indexes metrics by name.
type Set map[string]Metric

// NewSet indexes ms by name.
func NewSet(ms []Metric) Set {
	s := make(Set, len(ms))
	for _, m := range ms {
		s[m.Name] = m
	}
	return s
}

// Exporter is the set of every metric the exporter defines.
func Exporter() Set { return NewSet(All()) }

// ForSeries returns the metric a queried series name belongs to: the metric of that name, or the histogram
// whose _bucket, _sum or _count series it is, or the summary whose _sum or _count series it is.
func (s Set) ForSeries(series string) (Metric, bool) {
	if m, ok := s[series]; ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(series, suffix)
		if !ok {
			continue
		}
		m, ok := s[base]
		if ok && (m.Type == Histogram || (m.Type == Summary && suffix != "_bucket")) {
			return m, true
		}
	}
	return Metric{}, false
}

// OptIn returns the names of the metrics a default install does not export (Default no), in table order.
func OptIn() []string {
	var out []string
	for _, m := range All() {
		if m.Default == DefaultNo {
			out = append(out, m.Name)
		}
	}
	return out
}
