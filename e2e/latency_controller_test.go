package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/nodeagent"
)

// BenchmarkDetectionLatencyController is BenchmarkDetectionLatency with the slices written by the real
// EndpointSlice controller: each iteration flips the readiness of the only pod of a Local Service on the node
// (the node agent reports the pod's Ready condition from an annotation, as a failing readiness probe would),
// and measures from that change to the controller's slice ("slice"), to the exporter's
// localtraffic_local_endpoints ("api-view") and to its localtraffic_blackhole ("verdict"). node-2 runs
// kube-proxy in iptables mode, node-3 in nftables mode.
// Run: cd e2e && go test -run '^$' -bench DetectionLatencyController -benchtime 20x
func BenchmarkDetectionLatencyController(b *testing.B) {
	c := controllerCluster(b)
	// Set up in the parent: the framework calls each sub-benchmark twice (b.N = 1, then the real N), and the
	// pods and Service should stay the same across both.
	ipt := controllerLatencySetup(b, c, "node-2")
	nft := controllerLatencySetup(b, c, "node-3")
	b.Run("iptables", func(b *testing.B) { controllerLatency(b, c, ipt) })
	b.Run("nftables", func(b *testing.B) { controllerLatency(b, c, nft) })
}

type latencySetup struct {
	node, target string
	svc          *corev1.Service
	readyAt      *readinessLog
}

func controllerLatencySetup(b *testing.B, c *cluster.Cluster, node string) *latencySetup {
	ctx := testContext(b)
	const ns = "e2e-latency-ctrl"
	name := "latc-" + node
	svc := localNodePortService(b, c, ns, name, 0)
	pods := c.Admin().CoreV1().Pods(ns)
	target := name + "-b"
	for pod, on := range map[string]string{name + "-a": "node-1", target: node} {
		tmpl := workloadPodSpec(name, 0)
		tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: on}
		if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}, metav1.CreateOptions{}); err != nil {
			fatalln(b, err)
		}
		b.Cleanup(func() {
			zero := int64(0)
			_ = pods.Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
	slices, err := c.Admin().DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		fatalln(b, err)
	}
	b.Cleanup(slices.Stop)
	return &latencySetup{node: node, target: target, svc: svc, readyAt: sliceReadiness(slices, target)}
}

func controllerLatency(b *testing.B, c *cluster.Cluster, s *latencySetup) {
	ctx := testContext(b)
	node, target, svc, readyAt := s.node, s.target, s.svc, s.readyAt
	pods := c.Admin().CoreV1().Pods(svc.Namespace)
	// Each run starts from a ready pod.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, nodeagent.ReadyAnnotation)
	if _, err := pods.Patch(ctx, target, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		fatalln(b, err)
	}
	l := svcLabels(svc, node)
	eventually(b, 3*time.Minute, node+" serves", func() error {
		return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", l, 0), metricIs("localtraffic_local_endpoints", l, 1))
	})
	var sliceLat, verdict, apiView []time.Duration
	blackholed := false
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blackholed = !blackholed
		value, wantBH, wantLocal := "true", 0.0, 1.0
		if blackholed {
			value, wantBH, wantLocal = "false", 1, 0
		}
		// A random pause first, as in BenchmarkDetectionLatency: changes land at random points of the
		// exporter's rules cache.
		b.StopTimer()
		time.Sleep(time.Duration(rand.Int64N(int64(2500 * time.Millisecond))))
		b.StartTimer()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nodeagent.ReadyAnnotation, value)
		start := time.Now()
		if _, err := pods.Patch(ctx, target, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			fatalln(b, err)
		}
		var sliceAt, apiAt, verdictAt time.Duration
		err := cluster.Eventually(ctx, converge, 10*time.Millisecond, func() error {
			if sliceAt == 0 {
				sliceAt = readyAt.since(start, !blackholed)
			}
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
			if sliceAt == 0 || apiAt == 0 || verdictAt == 0 {
				return fmt.Errorf("not yet: slice %v, local_endpoints want %g, blackhole want %g", sliceAt, wantLocal, wantBH)
			}
			return nil
		})
		if err != nil {
			p, gerr := pods.Get(ctx, target, metav1.GetOptions{})
			if gerr == nil {
				ep, _ := endpointOn(ctx, c, svc, node)
				fatalf(b, "%v (pod annotations %v ready %v; endpoint %+v)", err, p.Annotations, podReady(p), ep)
			}
			fatalln(b, err)
		}
		sliceLat = append(sliceLat, sliceAt)
		verdict = append(verdict, verdictAt)
		apiView = append(apiView, apiAt)
	}
	b.StopTimer()
	report(b, "slice", sliceLat)
	report(b, "api-view", apiView)
	report(b, "verdict", verdict)
}

// readinessLog records when the watched slices last showed the target pod's endpoint ready or not ready.
type readinessLog struct {
	updates chan readinessUpdate
	last    map[bool]time.Time
}

type readinessUpdate struct {
	ready bool
	at    time.Time
}

func sliceReadiness(w watch.Interface, pod string) *readinessLog {
	log := &readinessLog{updates: make(chan readinessUpdate, 1024), last: map[bool]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.TargetRef != nil && ep.TargetRef.Name == pod {
					log.updates <- readinessUpdate{ready: isTrue(ep.Conditions.Ready), at: time.Now()}
				}
			}
		}
	}()
	return log
}

// since returns how long after start a slice first showed the endpoint with readiness ready, or 0 when none
// has yet. Only the benchmark's goroutine calls it.
func (l *readinessLog) since(start time.Time, ready bool) time.Duration {
	for {
		select {
		case u := <-l.updates:
			if u.at.After(start) {
				if _, seen := l.last[u.ready]; !seen || l.last[u.ready].Before(start) {
					l.last[u.ready] = u.at
				}
			}
			continue
		default:
		}
		break
	}
	if at, ok := l.last[ready]; ok && at.After(start) {
		return at.Sub(start)
	}
	return 0
}
