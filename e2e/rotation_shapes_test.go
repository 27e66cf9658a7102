package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	svc := serviceSpec(t, c, "e2e-rotation-twocheckers", "ledger", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			t.Error(err)
		}
	})
	eventually(t, converge, "node-2 drops the Service, nothing sent yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n2.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})

	probes := []string{nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc)}
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, probes...)
	time.Sleep(700 * time.Millisecond)
	checkEvery(t, c, cluster.CheckerIP, 3*time.Second, probes...)

	start := time.Now()
	for time.Since(start) < 45*time.Second {
		if err := expectMetrics(ctx, c, n2.Name, noCriticalReason(svc, n2.Name)); err != nil {
			t.Fatalf("%s after the checkers started: %v", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	if err := expectMetrics(ctx, c, n2.Name,
		metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1),
		metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": n2.Name, "kind": "node_port", "ip_family": ipv4}, 30)); err != nil {
		t.Fatalf("probed for 45 s: %v", err)
	}
	// The warning, once, names the address at the cadence it proved first.
	log := c.LogTail("exporter-"+n2.Name, 1<<20)
	if !strings.Contains(log, "only steady sources arrive") || !strings.Contains(log, cluster.CheckerIP+" every ") {
		t.Errorf("node-2's exporter log does not name the checkers' address %s", cluster.CheckerIP)
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
	svc := serviceSpec(t, c, "e2e-rotation-slowchecker", "billing", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			t.Error(err)
		}
	})
	eventually(t, converge, "node-2 drops the Service, nothing sent yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n2.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})

	checkEvery(t, c, cluster.CheckerIP, 30*time.Second, nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc))
	start := time.Now()
	for time.Since(start) < 130*time.Second {
		if err := expectMetrics(ctx, c, n2.Name, noCriticalReason(svc, n2.Name)); err != nil {
			t.Fatalf("%s after the checker started: %v", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	if err := expectMetrics(ctx, c, n2.Name,
		metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1),
		metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": n2.Name, "kind": "node_port", "ip_family": ipv4}, 8)); err != nil {
		t.Fatalf("probed five times: %v", err)
	}
	if log := c.LogTail("exporter-"+n2.Name, 1<<20); !strings.Contains(log, cluster.CheckerIP+" every 30s") {
		t.Errorf("node-2's exporter log does not name the checker %s every 30s", cluster.CheckerIP)
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
	svc := serviceSpec(t, c, "e2e-rotation-checkerrestart", "payroll", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			t.Error(err)
		}
	})
	eventually(t, converge, "node-2 drops the Service, nothing sent yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n2.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, nodePortAddr(c.Node("node-1"), svc), nodePortAddr(n2, svc))
	eventually(t, converge, "node-2 takes the checker for one", func() error {
		if !strings.Contains(c.LogTail("exporter-"+n2.Name, 1<<20), cluster.CheckerIP+" every 2s") {
			return fmt.Errorf("node-2's exporter has not logged the checker %s yet", cluster.CheckerIP)
		}
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})
	// Past a state file write (every 5 s at most when it changed) with the checker proven.
	time.Sleep(6 * time.Second)

	n2.StopExporter()
	if err := n2.StartExporter(ctx, testGrace); err != nil {
		t.Fatal(err)
	}
	if err := n2.WaitExporter(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		if err := expectMetrics(ctx, c, n2.Name, noCriticalReason(svc, n2.Name),
			metricIs("localtraffic_state_file_state", cluster.Labels{"node": n2.Name, "state": "restored"}, 1)); err != nil {
			t.Fatalf("%s after the restart: %v", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1)); err != nil {
		t.Fatalf("30 s after the restart: %v", err)
	}
}
