package e2e

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// BenchmarkDetectionLatency measures, on the live cluster, the time from an EndpointSlice write to the
// exporter's verdict changing: each iteration moves a node between "has the Service's only local endpoint" and
// "has none" and polls the node's /metrics until localtraffic_blackhole flips (node-2 in iptables mode, node-4
// in nftables mode). It reports the median and the
// worst case, and the same for localtraffic_local_endpoints (the API view alone, without waiting for kube-proxy
// to reprogram its rules). Each change comes after a random pause so it lands at a random point of the exporter's
// rules cache. Run: cd e2e && go test -run '^$' -bench DetectionLatency -benchtime 20x
func BenchmarkDetectionLatency(b *testing.B) {
	c := sharedCluster(b)
	// node-2's kube-proxy runs in iptables mode, node-4's in nftables mode.
	b.Run("iptables", func(b *testing.B) { detectionLatency(b, c, "node-2") })
	b.Run("nftables", func(b *testing.B) { detectionLatency(b, c, "node-4") })
}

func detectionLatency(b *testing.B, c *cluster.Cluster, node string) {
	ctx := testContext(b)
	svc := newService(b, c, "e2e-latency", "lat-"+node, corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(b, c, svc, "node-1", node)
	setEndpoints(b, c, svc, ready(pods...))
	l := svcLabels(svc, node)
	eventually(b, converge, node+" serves", func() error {
		return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", l, 0))
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
		// A random pause first: the exporter caches a read of the rules for --rules.cache-ttl (2s), and
		// changing right after the previous detection would phase-lock every change to the cache's refresh.
		b.StopTimer()
		time.Sleep(time.Duration(rand.Int64N(int64(2500 * time.Millisecond))))
		b.StartTimer()
		start := time.Now()
		if err := c.SetEndpoints(ctx, svc.Namespace, svc.Name, eps); err != nil {
			fatalln(b, err)
		}
		var apiAt, verdictAt time.Duration
		err := cluster.Eventually(ctx, converge, 10*time.Millisecond, func() error {
			m, err := c.Metrics(ctx, node)
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
			fatalln(b, err)
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
