package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// BenchmarkDetectionLatency measures, on the live cluster, the time from an EndpointSlice write to the
// exporter's verdict changing: each iteration moves node-2 between "has the Service's only local endpoint" and
// "has none" and polls node-2's /metrics until localtraffic_blackhole flips. It reports the median and the
// worst case, and the same for localtraffic_local_endpoints (the API view alone, without waiting for kube-proxy
// to reprogram its rules). Run: cd e2e && go test -run '^$' -bench DetectionLatency -benchtime 20x
func BenchmarkDetectionLatency(b *testing.B) {
	c := sharedCluster(b)
	ctx := testContext(b)
	svc := newService(b, c, "e2e-latency", "lat", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(b, c, svc, "node-1", "node-2")
	setEndpoints(b, c, svc, ready(pods...))
	l := svcLabels(svc, "node-2")
	eventually(b, converge, "node-2 serves", func() error {
		return expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole", l, 0))
	})
	var verdict, apiView []time.Duration
	blackholed := false
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blackholed = !blackholed
		eps, wantBH, wantLocal := ready(pods...), 0.0, 1.0
		if blackholed {
			eps, wantBH, wantLocal = ready(pods[0]), 1, 0
		}
		start := time.Now()
		if err := c.SetEndpoints(ctx, svc.Namespace, svc.Name, eps); err != nil {
			b.Fatal(err)
		}
		var apiAt, verdictAt time.Duration
		err := cluster.Eventually(ctx, converge, 10*time.Millisecond, func() error {
			m, err := c.Metrics(ctx, "node-2")
			if err != nil {
				return err
			}
			now := time.Since(start)
			if apiAt == 0 && m.Expect("localtraffic_local_endpoints", l, wantLocal) == nil {
				apiAt = now
			}
			if verdictAt == 0 && m.Expect("localtraffic_blackhole", l, wantBH) == nil {
				verdictAt = now
			}
			if apiAt == 0 || verdictAt == 0 {
				return fmt.Errorf("not yet: local_endpoints want %g, blackhole want %g", wantLocal, wantBH)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		verdict = append(verdict, verdictAt)
		apiView = append(apiView, apiAt)
	}
	b.StopTimer()
	report(b, "verdict", verdict)
	report(b, "api-view", apiView)
}

func report(b *testing.B, what string, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	med, worst := d[len(d)/2], d[len(d)-1]
	b.ReportMetric(float64(med.Microseconds())/1000, what+"-p50-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, what+"-max-ms")
	b.Logf("%s latency over %d changes: min %s, median %s, max %s", what, len(d), d[0].Round(time.Millisecond),
		med.Round(time.Millisecond), worst.Round(time.Millisecond))
}
