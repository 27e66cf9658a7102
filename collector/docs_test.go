package collector

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

var updateDocs = flag.Bool("update", false, "rewrite the metric table in docs/metrics.md from the code")

const (
	docPath    = "../docs/metrics.md"
	tableStart = "<!-- metrics-table:start (generated from the code: go test ./collector -run TestMetricsDoc -update) -->"
	tableEnd   = "<!-- metrics-table:end -->"
)

// allMetrics is every metric the exporter defines, from every collector.
func allMetrics() []*Metric {
	return NewExporter(nil, nil, everyCollector()...).Metrics()
}

func typeName(t prometheus.ValueType) string {
	switch t {
	case prometheus.CounterValue:
		return "counter"
	case prometheus.GaugeValue:
		return "gauge"
	}
	return "untyped"
}

// metricTable renders the table docs/metrics.md must hold. Every series also carries `node`, added by the
// handler for the whole exposition, so it is listed first.
func metricTable() string {
	var b strings.Builder
	b.WriteString("| Metric | Type | Labels | Description | Stability | Collector | Default |\n|---|---|---|---|---|---|---|\n")
	defaults := Defaults()
	for _, m := range allMetrics() {
		labels := append([]string{"node"}, m.Labels...)
		for i, l := range labels {
			labels[i] = "`" + l + "`"
		}
		stability := "experimental"
		if m.Stable {
			stability = "stable"
		}
		d := defaults[m.FQName()]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", m.FQName(), typeName(m.Type), strings.Join(labels, ", "),
			strings.ReplaceAll(m.Help, "|", "\\|"), stability, d.Collector, d.Default)
	}
	return b.String()
}

// docs/metrics.md must list exactly the metrics the code defines, with the same type, labels, help and
// stability. The table is generated; the prose around it is not, and is checked for the names it mentions.
func TestMetricsDoc(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the table markers %q ... %q", docPath, tableStart, tableEnd)
	}
	want := metricTable()
	got := doc[i+len(tableStart)+1 : j]
	if got != want {
		if *updateDocs {
			doc = doc[:i+len(tableStart)+1] + want + doc[j:]
			if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the metric table in %s differs from the code; run go test ./collector -run TestMetricsDoc -update\n--- doc\n%s\n--- code\n%s", docPath, got, want)
	}

	// Every localtraffic_ name the prose mentions must exist (a renamed metric leaves no stale text), but for the
	// old names in the "was" column of "## Renamed metrics", which must no longer exist.
	defined := map[string]bool{"localtraffic_build_info": true}
	for _, m := range allMetrics() {
		defined[m.FQName()] = true
	}
	if k := strings.Index(doc, "\n## Renamed metrics\n"); k >= 0 {
		section := doc[k+1:]
		if e := strings.Index(section, "\n## "); e >= 0 {
			section = section[:e]
		}
		for _, m := range regexp.MustCompile("(?m)^\\| `(localtraffic_[a-z0-9_]+)`").FindAllStringSubmatch(section, -1) {
			if defined[m[1]] {
				t.Errorf("%s lists %s as renamed, but the code still defines it", docPath, m[1])
			}
			defined[m[1]] = true
		}
	}
	var unknown []string
	for _, word := range strings.FieldsFunc(doc, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if strings.HasPrefix(word, "localtraffic_") && !defined[word] && !strings.HasSuffix(word, "_") {
			unknown = append(unknown, word)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("%s mentions metrics the code does not define: %v", docPath, unknown)
	}
}

// Names follow Prometheus conventions: counters end in _total and nothing else does; units in base units.
func TestMetricNaming(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range allMetrics() {
		if seen[m.Name] {
			t.Errorf("%s defined twice", m.Name)
		}
		seen[m.Name] = true
		if (m.Type == prometheus.CounterValue) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: counters, and only counters, end in _total", m.Name)
		}
		for _, bad := range []string{"_ms", "_milliseconds", "_bytes_total_total"} {
			if strings.Contains(m.Name, bad) {
				t.Errorf("%s: use base units", m.Name)
			}
		}
		for _, l := range m.Labels {
			if l == "node" || l == "pod" || l == "ip" || l == "endpoint_ip" {
				t.Errorf("%s: label %q is added by the handler or unbounded", m.Name, l)
			}
		}
	}
}

// everyCollector is every collector with every series on: what the unit tests and the metric table cover.
func everyCollector() []Collector {
	cs, err := AllSelection().Collectors()
	if err != nil {
		panic(err)
	}
	return cs
}
