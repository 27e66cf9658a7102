package exporters

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

func buckets(kv ...float64) []placement.Bucket {
	var out []placement.Bucket
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, placement.Bucket{UpperBound: kv[i], Count: kv[i+1]})
	}
	return out
}

var inf = math.Inf(1)

// histogramQuantile answers as Prometheus' histogram_quantile: the values below are what Prometheus returns for
// these buckets (its promql tests' rules: interpolation from the bucket's lower bound, the highest finite bound for
// a rank in +Inf, from 0 in the first bucket).
func TestHistogramQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    float64
		bs   []placement.Bucket
		want float64
	}{
		{"interpolated in its bucket", 0.95, buckets(1, 0, 5, 2, 10, 10, 30, 18, 60, 20, inf, 20), 45},
		{"from 0 in the first bucket", 0.5, buckets(10, 4, 30, 4, inf, 4), 5},
		{"rank in +Inf: the highest finite bound", 0.95, buckets(1, 0, 5, 1, inf, 10), 5},
		{"torn buckets mended", 0.5, buckets(10, 4, 30, 3, inf, 8), 10},
		{"no observation", 0.95, buckets(10, 0, inf, 0), math.NaN()},
		{"no +Inf bucket", 0.95, buckets(10, 1, 30, 2), math.NaN()},
	} {
		got := histogramQuantile(tc.q, tc.bs)
		if got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
}

const drainMetrics = `# TYPE localtraffic_service_lb_drain_seconds histogram
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="checkout",le="1"} 0
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="checkout",le="10"} %[2]s
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="checkout",le="30"} %[3]s
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="checkout",le="300"} %[3]s
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="checkout",le="+Inf"} %[3]s
localtraffic_service_lb_drain_seconds_sum{node="%[1]s",namespace="kubelings",service="checkout"} 100
localtraffic_service_lb_drain_seconds_count{node="%[1]s",namespace="kubelings",service="checkout"} %[3]s
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="idle",le="1"} 0
localtraffic_service_lb_drain_seconds_bucket{node="%[1]s",namespace="kubelings",service="idle",le="+Inf"} 0
localtraffic_service_lb_drain_seconds_sum{node="%[1]s",namespace="kubelings",service="idle"} 0
localtraffic_service_lb_drain_seconds_count{node="%[1]s",namespace="kubelings",service="idle"} 0
`

func metrics(node, in10, total string) []byte {
	r := strings.NewReplacer("%[1]s", node, "%[2]s", in10, "%[3]s", total)
	return []byte(r.Replace(drainMetrics))
}

// --from-exporters: the nodes' histograms are summed bucket by bucket before the quantile, as Prometheus' sum by
// (le) does: not a mean of the nodes' p95s. node-a alone has p95 28 s, node-b 9.5 s; together 20 s.
func TestDrainsFromExporters(t *testing.T) {
	obs := placement.Observed{}
	for node, m := range map[string][]byte{"node-a": metrics("node-a", "2", "4"), "node-b": metrics("node-b", "16", "16")} {
		o, err := parseObserved(m)
		if err != nil {
			t.Fatal(err)
		}
		obs[node] = o
	}
	obs["node-c"] = placement.NodeObserved{Reasons: map[string]string{}} // an exporter without the collector
	got := DrainsFromExporters(obs)
	want := placement.MeasuredDrain{P95Seconds: 20, Episodes: 20, Source: "exporters"}
	if len(got) != 1 || got["kubelings/checkout"] != want {
		t.Errorf("drains %+v, want only kubelings/checkout %+v (idle has no episode)", got, want)
	}
	one := DrainsFromExporters(placement.Observed{"node-a": obs["node-a"]})
	if d := one["kubelings/checkout"]; d.P95Seconds != 28 {
		t.Errorf("node-a alone: p95 %g, want 28", d.P95Seconds)
	}
}

// The query: the p95 of the buckets' increases summed over the nodes, and the episodes, with the selector in
// both and the lookback as given.
func TestDrainQuery(t *testing.T) {
	want := `label_replace(histogram_quantile(0.95, sum by (namespace, service, exported_namespace, exported_service, le) ` +
		`(increase(localtraffic_service_lb_drain_seconds_bucket{cluster="prod"}[1d12h]))), "stat", "p95", "", "") ` +
		`or label_replace(sum by (namespace, service, exported_namespace, exported_service) ` +
		`(increase(localtraffic_service_lb_drain_seconds_count{cluster="prod"}[1d12h])), "stat", "episodes", "", "")`
	var d model.Duration
	if err := d.Set("36h"); err != nil {
		t.Fatal(err)
	}
	if got := drainQuery(` cluster="prod" `, d); got != want {
		t.Errorf("query\n%s\nwant\n%s", got, want)
	}
	if got := drainQuery("", DefaultDrainLookback); !strings.Contains(got, "_bucket[1w]") {
		t.Errorf("default lookback: %s", got)
	}
}

// The answer: a Service needs a p95 and an episode; a renamed label (exported_service) is read first; a NaN p95
// (no episode in the window) is none.
func TestDrainsFromVector(t *testing.T) {
	s := func(value float64, kv ...string) *model.Sample {
		m := model.Metric{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
		}
		return &model.Sample{Metric: m, Value: model.SampleValue(value)}
	}
	got := drainsFromVector(model.Vector{
		s(31.5, "namespace", "kubelings", "service", "checkout", "stat", "p95"),
		s(12, "namespace", "kubelings", "service", "checkout", "stat", "episodes"),
		s(9, "namespace", "monitoring", "exported_namespace", "shop", "service", "x", "exported_service", "cart", "stat", "p95"),
		s(2, "namespace", "monitoring", "exported_namespace", "shop", "service", "x", "exported_service", "cart", "stat", "episodes"),
		s(math.NaN(), "namespace", "kubelings", "service", "quiet", "stat", "p95"),
		s(0, "namespace", "kubelings", "service", "quiet", "stat", "episodes"),
		s(40, "namespace", "kubelings", "service", "half", "stat", "p95"),
	})
	want := placement.MeasuredDrains{
		"kubelings/checkout": {P95Seconds: 31.5, Episodes: 12, Source: "prometheus"},
		"shop/cart":          {P95Seconds: 9, Episodes: 2, Source: "prometheus"},
	}
	if len(got) != len(want) || got["kubelings/checkout"] != want["kubelings/checkout"] || got["shop/cart"] != want["shop/cart"] {
		t.Errorf("drains %+v, want %+v", got, want)
	}
}
