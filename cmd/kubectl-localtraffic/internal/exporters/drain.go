package exporters

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/metricnames"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// The service_exposure collector's measured drain: a histogram per node and Service of the time from the node's
// health check first answering 503 to the last new connection attempt arriving, one observation per episode
// (docs/metrics.md). Its labels are the exporter's node, namespace and service.
const (
	lbDrainSeconds               = metricnames.ServiceLbDrainSeconds
	lbDrainSecondsLabelNamespace = metricnames.ServiceLbDrainSecondsLabelNamespace
	lbDrainSecondsLabelService   = metricnames.ServiceLbDrainSecondsLabelService
)

// drainQuantile is the quantile of the episodes' drains the advice rests on: most episodes, not the one
// outlier a load balancer's hiccup makes.
const drainQuantile = 0.95

// DefaultDrainLookback is --drain-lookback's default: a week holds a team's usual rollouts and a maintenance
// window's drains, and is within most Prometheus servers' retention.
const DefaultDrainLookback = model.Duration(7 * 24 * time.Hour)

// drainStat is the label the drain query tells its two answers apart by.
const drainStat = "stat"

// drainQuery is the one instant query for every Service's measured drain over lookback: the p95 of its episodes
// across every node (the buckets' increases summed over the nodes first, as one histogram), and how many episodes
// it rests on, each marked by a stat label. exported_namespace and exported_service are kept for a Prometheus
// that renames the exporter's labels (observedFromVector).
func drainQuery(selector string, lookback model.Duration) string {
	sel := ""
	if s := strings.TrimSpace(selector); s != "" {
		sel = "{" + s + "}"
	}
	by := "namespace, service, exported_namespace, exported_service"
	return fmt.Sprintf(`label_replace(histogram_quantile(%g, sum by (%s, le) (increase(%s_bucket%s[%s]))), "%s", "p95", "", "")`+
		` or label_replace(sum by (%s) (increase(%s_count%s[%s])), "%s", "episodes", "", "")`,
		drainQuantile, by, lbDrainSeconds, sel, lookback, drainStat, by, lbDrainSeconds, sel, lookback, drainStat)
}

// ReadDrains asks the Prometheus API once for every Service's measured drain over --drain-lookback. A Service without an
// episode in it is absent. A failed query is an apiError, said in one line as the verdicts' query's.
func (p PromFlags) ReadDrains(ctx context.Context, api promv1.API, warn func(string)) (placement.MeasuredDrains, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	q := drainQuery(p.selector, p.lookback.d)
	val, warnings, _, err := api.Query(ctx, q, time.Now(), promv1.WithTimeout(p.timeout))
	for _, w := range warnings {
		warn(fmt.Sprintf("Prometheus at %s warns: %s", p.url, w))
	}
	if err != nil {
		return nil, cli.APIError{Err: fmt.Errorf("the measured drain: %w", p.queryError(ctx, err))}
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, cli.APIError{Err: fmt.Errorf("the Prometheus API at %s answered the drain query with a %s, not a vector", p.url, val.Type())}
	}
	return drainsFromVector(vec), nil
}

// drainsFromVector reads the drain query's answer: a Service has a measured drain when it has a p95 (not NaN:
// no episode in the window) and at least one episode.
func drainsFromVector(vec model.Vector) placement.MeasuredDrains {
	p95, episodes := map[string]float64{}, map[string]float64{}
	for _, s := range vec {
		ns := labelOr(s.Metric, "exported_"+lbDrainSecondsLabelNamespace, lbDrainSecondsLabelNamespace)
		svc := labelOr(s.Metric, "exported_"+lbDrainSecondsLabelService, lbDrainSecondsLabelService)
		key, v := ns+"/"+svc, float64(s.Value)
		if ns == "" || svc == "" || math.IsNaN(v) {
			continue
		}
		switch s.Metric[drainStat] {
		case "p95":
			p95[key] = v
		case "episodes":
			episodes[key] = v
		}
	}
	out := placement.MeasuredDrains{}
	for key, v := range p95 {
		if n := episodes[key]; n > 0 {
			out[key] = placement.MeasuredDrain{P95Seconds: v, Episodes: n, Source: "prometheus"}
		}
	}
	return out
}

// drainBuckets reads one exporter's drain histograms: per "namespace/service", its cumulative buckets (the +Inf
// one last).
func drainBuckets(fam *dto.MetricFamily) map[string][]placement.Bucket {
	if fam.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	out := map[string][]placement.Bucket{}
	for _, m := range fam.GetMetric() {
		var ns, svc string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case lbDrainSecondsLabelNamespace:
				ns = l.GetValue()
			case lbDrainSecondsLabelService:
				svc = l.GetValue()
			}
		}
		h := m.GetHistogram()
		var bs []placement.Bucket
		for _, b := range h.GetBucket() {
			bs = append(bs, placement.Bucket{UpperBound: b.GetUpperBound(), Count: float64(b.GetCumulativeCount())})
		}
		if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].UpperBound, 1) {
			// The text format writes the +Inf bucket; the count stands for it where a parser left it out.
			bs = append(bs, placement.Bucket{UpperBound: math.Inf(1), Count: float64(h.GetSampleCount())})
		}
		out[ns+"/"+svc] = bs
	}
	return out
}

// DrainsFromExporters sums every node's drain histogram of each Service (bucket by bucket: the same histogram
// Prometheus' sum by (le) makes) and takes its p95 as histogram_quantile does. The counts are since each
// exporter started, not over a window.
func DrainsFromExporters(obs placement.Observed) placement.MeasuredDrains {
	sums := map[string]map[float64]float64{}
	for _, o := range obs {
		for key, bs := range o.Drains {
			if sums[key] == nil {
				sums[key] = map[float64]float64{}
			}
			for _, b := range bs {
				sums[key][b.UpperBound] += b.Count
			}
		}
	}
	out := placement.MeasuredDrains{}
	for key, byLE := range sums {
		var bs []placement.Bucket
		for le, n := range byLE {
			bs = append(bs, placement.Bucket{UpperBound: le, Count: n})
		}
		slices.SortFunc(bs, func(a, b placement.Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
		total := bs[len(bs)-1].Count
		q := histogramQuantile(drainQuantile, bs)
		if total > 0 && !math.IsNaN(q) {
			out[key] = placement.MeasuredDrain{P95Seconds: q, Episodes: total, Source: "exporters"}
		}
	}
	return out
}

// histogramQuantile is Prometheus' histogram_quantile over classic buckets sorted by upper bound, the +Inf one
// last: the bucket the rank falls in, and linear interpolation inside it (from 0 for the first bucket); a rank in
// the +Inf bucket is the highest finite bound. NaN without observations or without a +Inf bucket.
func histogramQuantile(q float64, buckets []placement.Bucket) float64 {
	if len(buckets) < 2 || !math.IsInf(buckets[len(buckets)-1].UpperBound, 1) {
		return math.NaN()
	}
	// Counts must not fall with the bound (Prometheus mends a scrape's torn buckets the same way).
	bs := slices.Clone(buckets)
	for i := 1; i < len(bs); i++ {
		bs[i].Count = max(bs[i].Count, bs[i-1].Count)
	}
	total := bs[len(bs)-1].Count
	if total == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	if q <= 0 {
		return math.Inf(-1)
	}
	if q >= 1 {
		return math.Inf(1)
	}
	rank := q * total
	b := 0
	for b < len(bs)-1 && bs[b].Count < rank {
		b++
	}
	switch {
	case b == len(bs)-1:
		return bs[len(bs)-2].UpperBound
	case b == 0 && bs[0].UpperBound <= 0:
		return bs[0].UpperBound
	}
	start, end, count := 0.0, bs[b].UpperBound, bs[b].Count
	if b > 0 {
		start = bs[b-1].UpperBound
		count -= bs[b-1].Count
		rank -= bs[b-1].Count
	}
	return start + (end-start)*(rank/count)
}

// Drains reads the measured drains from --prometheus for status and drain-check. A failed query is said on
// stderr in one line, and complete is false (exit status 3 unless something fails the command anyway); the
// verdicts read beside it stand.
func (p PromFlags) Drains(ctx context.Context, stderr io.Writer, api promv1.API) (drains placement.MeasuredDrains, complete bool) {
	warn := func(msg string) { fmt.Fprintf(stderr, "kubectl-localtraffic: %s\n", cli.OneLine(msg)) }
	drains, err := p.ReadDrains(ctx, api, warn)
	if err != nil {
		warn(err.Error())
		return placement.MeasuredDrains{}, false
	}
	return drains, true
}
