package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRotationTwoCheckersOneAddress: a NodePort Service with its only replica on node-1, probed by two
// HAProxy-style checkers from one address (two load balancer backends, or two monitors, on one host): one
// every 2 s, the other every 3 s, started 700 ms later, each a new TCP connection to node-1's and node-2's
// NodePort, no client. Their probes interleave at node-2 (iptables mode, no replica) at gaps of 0.7 to 2 s, which
// no single clock explains. Sampled every second for 45 s, node-2 never reports a critical reason: it stays
// no_traffic_seen, the probes counted as arrivals and the address named in the exporter's log. Before the meter followed more than one clock per source, the
// interleaving read as one irregular client and node-2 was traffic_lost within seconds.
func TestRotationTwoCheckersOneAddress(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := probedNodePort(ctx, t, c, "e2e-rotation-twocheckers", "ledger")

	probes := []string{nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc)}
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, probes...)
	time.Sleep(700 * time.Millisecond)
	checkEvery(t, c, cluster.CheckerIP, 3*time.Second, probes...)

	warnedThroughout(ctx, t, c, svc, []string{"node-2"}, 45*time.Second, "the checkers started", 30)
	// The warning, once, names the address at the cadence it proved first.
	if !loggedChecker(c, n2.Name, svc, cluster.CheckerIP+" every ") {
		errorf(t, "node-2's exporter log does not name the checkers' address %s", cluster.CheckerIP)
	}
}

// TestRotationSlowChecker: a NodePort Service with its only replica on node-1, probed by a slow checker from one
// address (an AWS target group's default: a new TCP connection every 30 s) at node-1's and node-2's NodePort, no
// client. Each probe node-2 drops is retransmitted a second later, as a lost client's attempt is. Sampled every
// second for 2 min 10 s, through the fifth probe that proves its cadence, node-2 never reports a critical
// reason: it stays no_traffic_seen and the checker is logged at its interval. Before the meter waited for slow
// checkers, their first probe counted as a client's 30 s after it and node-2 was traffic_lost until the fifth.
func TestRotationSlowChecker(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := probedNodePort(ctx, t, c, "e2e-rotation-slowchecker", "billing")

	checkEvery(t, c, cluster.CheckerIP, 30*time.Second, nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc))
	warnedThroughout(ctx, t, c, svc, []string{"node-2"}, 130*time.Second, "the checker started", 8)
	if !loggedChecker(c, n2.Name, svc, cluster.CheckerIP+" every 30s") {
		errorf(t, "node-2's exporter log does not name the checker %s every 30s", cluster.CheckerIP)
	}
}

// TestRotationCheckerAcrossRestart: a NodePort Service with its only replica on node-1, probed every 2 s by an
// HAProxy-style checker from one address at node-1's and node-2's NodePort, no client. Once node-2's exporter
// has taken the checker for one (no_traffic_seen, the checker logged), it is restarted (SIGTERM, the state file
// written on the way out, a new process). Sampled every second for 30 s from the new process's first scrape,
// node-2 never reports a critical reason: the state file carried the checker's clock, so the restored run of
// its probes is no client's. Before the file kept what the meter had learnt of the sources, the restored run
// counted as a client's repeated attempts and node-2 was traffic_lost at its first scrape.
func TestRotationCheckerAcrossRestart(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := probedNodePort(ctx, t, c, "e2e-rotation-checkerrestart", "payroll")
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc))
	eventually(t, converge, "node-2 takes the checker for one", func() error {
		if !loggedChecker(c, n2.Name, svc, cluster.CheckerIP+" every 2s") {
			return fmt.Errorf("node-2's exporter has not logged the checker %s yet", cluster.CheckerIP)
		}
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})
	// Past a state file write (every 5 s at most when it changed) with the checker proven.
	time.Sleep(6 * time.Second)

	n2.StopExporter()
	if err := n2.StartExporter(ctx, testGrace); err != nil {
		fatalln(t, err)
	}
	if err := n2.WaitExporter(ctx, time.Minute); err != nil {
		fatalln(t, err)
	}
	warnedThroughout(ctx, t, c, svc, []string{"node-2"}, 30*time.Second, "the restart", 0,
		metricIs("localtraffic_state_file_state", cluster.Labels{"node": n2.Name, "state": "restored"}, 1))
}

// TestRotationNodePortNewOwner: a NodePort Service with its only replica on node-1, and a client at an
// irregular cadence from cluster.CheckerIP at node-2's NodePort, which node-2 drops: node-2 pages
// (traffic_lost). node-2's exporter stops (SIGTERM: the state file keeps the client's run), the Service is
// deleted and a new one (another name, its only replica on node-1 too) takes its NodePort, and the same
// address becomes the new Service's load balancer checker: every 2 s to node-1's and node-2's NodePort, no
// client. Sampled every second for 30 s from the restarted exporter's first scrape, node-2 never reports a
// critical reason for the new Service (no_traffic_seen, the state file restored): the run carried over was the
// old Service's traffic, not the new one's. Before the meter kept each destination's owner, the old Service's
// lost client attempts were restored onto the new Service's NodePort and node-2 paged traffic_lost for a
// Service nobody but its checker had reached.
func TestRotationNodePortNewOwner(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n1, n2 := c.Node("node-1"), c.Node("node-2")
	const ns = "e2e-rotation-newowner"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	old, err := c.Admin().CoreV1().Services(ns).Create(ctx, cluster.NewService(ns, "ledger", corev1.ServiceTypeNodePort), metav1.CreateOptions{})
	if err != nil {
		fatalln(t, err)
	}
	deleteOld := func() error {
		if err := c.DeleteEndpoints(context.Background(), ns, old.Name); err != nil {
			return err
		}
		err := c.Admin().CoreV1().Services(ns).Delete(context.Background(), old.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete service %s/%s: %w", ns, old.Name, err)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := deleteOld(); err != nil {
			errorln(t, err)
		}
	})
	setEndpoints(t, c, old, ready(startPods(t, c, old, "node-1")...))
	restartExporter(t, c, n2, testGrace)
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			errorln(t, err)
		}
	})

	// The address is a client of the old Service: node-2 pages.
	stopClient := sendFrom(t, c, cluster.CheckerIP, nodePortAddr(n2, old))
	eventually(t, converge, "the client pages node-2 for the old Service", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(old, n2.Name, "traffic_lost"), 1))
	})
	time.Sleep(6 * time.Second) // past a state file write (every 5 s at most when it changed)

	// While node-2's exporter is down, a new Service takes the NodePort, and the address checks it.
	n2.StopExporter()
	stopClient()
	if err := deleteOld(); err != nil {
		fatalln(t, err)
	}
	svc := serviceSpec(t, c, ns, "payroll", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.Ports[0].NodePort = old.Spec.Ports[0].NodePort
	})
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, nodePortAddr(n1, svc), nodePortAddr(n2, svc))
	if err := n2.StartExporter(ctx, testGrace); err != nil {
		fatalln(t, err)
	}
	if err := n2.WaitExporter(ctx, time.Minute); err != nil {
		fatalln(t, err)
	}
	warnedThroughout(ctx, t, c, svc, []string{"node-2"}, 30*time.Second, "the restart", 0,
		metricIs("localtraffic_state_file_state", cluster.Labels{"node": n2.Name, "state": "restored"}, 1))
}

// sendFrom makes the outside client open new connections from src (an address of its, see
// cluster.Cluster.AddClientSource) to addr, with the irregular pauses of clientPause between them, until stop
// is called or the test ends: a client, where checkEvery is a checker from the same kind of address.
func sendFrom(t *testing.T, c *cluster.Cluster, src, addr string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			_ = c.TCPCheck(ctx, src, addr, cluster.ConnectTimeout)
			select {
			case <-ctx.Done():
				return
			case <-time.After(clientPause(i)):
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRotationCheckerWithSpread: a NodePort Service with its only replica on node-1, probed by an HAProxy-style
// checker with `spread-checks 25` from one address, alone: a new TCP connection to node-1's and node-2's
// NodePort, each with its own schedule, the next check 2 s ± 25 % (drawn uniformly) after the last one timed
// out (1.5 s, its SYN retransmitted a second after it), no client. Its probes reach node-2 (iptables mode, no
// replica) 3 to 4 s apart, which no clock within 5 % keeps. Sampled every second for 60 s (four grace windows
// of the scenarios' 15 s), node-2 never reports a critical reason: it stays no_traffic_seen, the probes
// counted as arrivals and the address logged as a checker. Before the meter followed the band of a source's
// gaps, node-2 was traffic_lost 36 s after the checker started (its probes a client's once no clock kept them).
func TestRotationCheckerWithSpread(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := probedNodePort(ctx, t, c, "e2e-rotation-spreadchecker", "ledger")

	checkSpread(t, c, cluster.CheckerIP, 2*time.Second, 1500*time.Millisecond, 0.25,
		nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc))
	warnedThroughout(ctx, t, c, svc, []string{"node-2"}, 60*time.Second, "the checker started", 15)
	if !loggedChecker(c, n2.Name, svc, cluster.CheckerIP+" every ") {
		errorf(t, "node-2's exporter log does not name the checker %s", cluster.CheckerIP)
	}
}

// checkSpread runs an HAProxy-style TCP health checker with `spread-checks` from src, one schedule per addr as
// HAProxy runs one per server: a new connection (opened and closed; a node that drops it times out after
// timeout), then, once it ended, a wait of inter plus a spread drawn uniformly within ±spread of inter
// (seeded: each run draws the same spreads), until the test ends.
func checkSpread(t *testing.T, c *cluster.Cluster, src string, inter, timeout time.Duration, spread float64, addrs ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for k, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(0x5b7ead, uint64(k)))
			for {
				_ = c.TCPCheck(ctx, src, a, timeout)
				rv := float64(inter) * spread
				select {
				case <-ctx.Done():
					return
				case <-time.After(inter + time.Duration(rv-2*rv*rng.Float64())):
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// probedNodePort is where each scenario of this file starts: a NodePort Service with its only replica on
// node-1, node-2's exporter restarted with the short grace window, cluster.CheckerIP added to the outside
// client for the checkers, and node-2 a blackhole nobody was sent to yet (no_traffic_seen).
func probedNodePort(ctx context.Context, t *testing.T, c *cluster.Cluster, namespace, name string) *corev1.Service {
	t.Helper()
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, namespace, name, corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			errorln(t, err)
		}
	})
	eventually(t, converge, "node-2 drops the Service, nothing sent yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n2.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})
	return svc
}

// warnedThroughout samples each of nodes every second for d: never a critical reason for svc (nor a failed
// want), and at the end no_traffic_seen with more than arrivals NodePort arrivals counted. since names what d
// counts from.
func warnedThroughout(ctx context.Context, t *testing.T, c *cluster.Cluster, svc *corev1.Service, nodes []string, d time.Duration,
	since string, arrivals float64, want ...func(cluster.Metrics) error) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		for _, node := range nodes {
			if err := expectMetrics(ctx, c, node, append([]func(cluster.Metrics) error{noCriticalReason(svc, node)}, want...)...); err != nil {
				fatalf(t, "%s after %s: %s: %v", time.Since(start).Round(time.Second), since, node, err)
			}
		}
		time.Sleep(time.Second)
	}
	for _, node := range nodes {
		if err := expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "no_traffic_seen"), 1),
			metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "node_port", "ip_family": ipv4}, arrivals)); err != nil {
			fatalf(t, "%s after %s: %v", d, since, err)
		}
	}
}

// loggedChecker: node's exporter logged the warning that only steady sources arrive at svc's dropped NodePort,
// naming sources. The log spans every exporter the suite ran on the node, so the line must name svc: an earlier
// scenario's checker, logged at the same address and cadence, proves nothing here.
func loggedChecker(c *cluster.Cluster, node string, svc *corev1.Service, sources string) bool {
	for _, line := range strings.Split(c.LogTail("exporter-"+node, 1<<20), "\n") {
		if strings.Contains(line, "only steady sources arrive") && strings.Contains(line, sources) &&
			strings.Contains(line, "namespace="+svc.Namespace) && strings.Contains(line, "service="+svc.Name) {
			return true
		}
	}
	return false
}
