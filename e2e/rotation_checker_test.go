package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// clientPauses are the pauses of the harness's client loops, in turn: irregular, as real clients are. A loop
// that paused the same time after every attempt would reach a node like a clock, and the arrivals meter takes
// a source arriving like a clock at a NodePort for a load balancer's health checker (docs/rotation.md): its
// dropped attempts would page nothing. Consecutive pauses differ by far more than the meter's 10 % tolerance.
var clientPauses = []time.Duration{300 * time.Millisecond, 1700 * time.Millisecond, 800 * time.Millisecond,
	2600 * time.Millisecond, 1200 * time.Millisecond}

// clientPause is the i-th pause of a client loop.
func clientPause(i int) time.Duration { return clientPauses[i%len(clientPauses)] }

// checkEvery runs an HAProxy-style TCP health checker from src: every interval a new connection to each addr
// (opened and closed; a node that drops it times out after a second and a half, before the next check), until
// the test ends or stop is called.
func checkEvery(t *testing.T, c *cluster.Cluster, src string, interval time.Duration, addrs ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			for _, a := range addrs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = c.TCPCheck(ctx, src, a, 1500*time.Millisecond)
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	stop = func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// criticalReasons are the blackhole reasons the shipped alerts page on.
var criticalReasons = []string{"health_check_ignored", "udp_flow_pinned", "traffic_lost", "announced_here", "health_check_passing"}

// noCriticalReason fails when the node reports a critical reason for the Service.
func noCriticalReason(svc *corev1.Service, node string) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error {
		for _, r := range criticalReasons {
			v, ok, err := m.Value("localtraffic_blackhole_reason", reasonLabels(svc, node, r))
			if err != nil {
				return err
			}
			if ok && v == 1 {
				return fmt.Errorf("%s: reason %s (critical)", node, r)
			}
		}
		return nil
	}
}

// TestRotationHealthCheckerNotClients: a NodePort Service with its only replica on node-1, behind a load
// balancer the cluster knows nothing of (HAProxy `check`, an F5 TCP monitor): its checker opens a new TCP
// connection every 2 s from its own address to every node's NodePort, and no client sends anything. node-2,
// node-3 and node-4 (nftables) drop the checks, which is how the load balancer drains them. Sampled every second
// for four grace windows, no node ever reports a critical reason: the nodes without a replica are blackholes
// nobody is sent to yet (no_traffic_seen, a warning), the checker's source named in the exporter's log. Before
// the meter told checkers from clients, node-2 was traffic_lost from the first probe on. Then a client, from
// the outside client's own address at an irregular cadence, uses node-2: node-2 pages (traffic_lost), node-3
// and node-4, still probed, do not. Last, the Service declares that nothing checks its nodes
// (localtraffic.io/health-check: none): the checker's source is a client, and node-3 and node-4 page too.
func TestRotationHealthCheckerNotClients(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	svc := serviceSpec(t, c, "e2e-rotation-checker", "storefront", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	holes := []string{"node-2", "node-3", "node-4"}
	for _, node := range holes {
		restartExporter(t, c, c.Node(node), testGrace)
	}
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			errorln(t, err)
		}
	})
	for _, node := range holes {
		eventually(t, converge, node+" drops the Service, nothing sent yet", func() error {
			return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "no_traffic_seen"), 1))
		})
	}

	var probes []string
	for _, n := range c.Nodes() {
		probes = append(probes, nodePortAddr(n, svc))
	}
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, probes...)

	// Probes alone, for four grace windows (testGrace is 15 s): sampled every second, never critical.
	start := time.Now()
	for time.Since(start) < time.Minute {
		for _, n := range c.Nodes() {
			if err := expectMetrics(ctx, c, n.Name, noCriticalReason(svc, n.Name)); err != nil {
				fatalf(t, "%s after the checker started: %v", time.Since(start).Round(time.Second), err)
			}
		}
		time.Sleep(time.Second)
	}
	for _, node := range holes {
		if err := expectMetrics(ctx, c, node,
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "no_traffic_seen"), 1),
			metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "node_port", "ip_family": ipv4}, 20)); err != nil {
			fatalf(t, "probed for a minute: %v", err)
		}
		// The warning names the checker and the annotation that settles it.
		log := c.LogTail("exporter-"+node, 1<<20)
		for _, want := range []string{"only steady sources arrive", cluster.CheckerIP + " every 2s", "localtraffic.io/health-check=traffic-port"} {
			if !strings.Contains(log, want) {
				errorf(t, "%s's exporter log does not say %q", node, want)
			}
		}
	}
	if err := expectMetrics(ctx, c, "node-1", metricIs("localtraffic_blackhole", svcLabels(svc, "node-1"), 0)); err != nil {
		fatalln(t, err)
	}

	// A client beside the checker, on node-2 only: node-2 pages.
	keepSending(t, c, nodePortAddr(c.Node("node-2"), svc))
	eventually(t, converge, "the client pages node-2", func() error {
		return expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-2", "traffic_lost"), 1))
	})
	paged := time.Now()
	for time.Since(paged) < 30*time.Second {
		var errs []error
		errs = append(errs, expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-2", "traffic_lost"), 1)))
		for _, node := range []string{"node-1", "node-3", "node-4"} {
			errs = append(errs, expectMetrics(ctx, c, node, noCriticalReason(svc, node)))
		}
		if err := errors.Join(errs...); err != nil {
			fatalf(t, "%s after node-2 paged: %v", time.Since(paged).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}

	// The Service declares that nothing checks its nodes: the steady source is a client, and it pages node-3
	// and node-4 too.
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"none"}}}`, "localtraffic.io/health-check"))
	if _, err := c.Admin().CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		fatalln(t, err)
	}
	for _, node := range []string{"node-3", "node-4"} {
		eventually(t, converge, node+" pages once the Service declares no health check", func() error {
			return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "traffic_lost"), 1))
		})
	}
}
