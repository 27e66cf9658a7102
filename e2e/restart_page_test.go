package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// firstVerdict scrapes n's exporter from the moment it answers until a scrape carries svc's verdict (before its
// informers have synced it knows no Service) and returns that scrape: the first a Prometheus could page on.
func firstVerdict(t *testing.T, ctx context.Context, c *cluster.Cluster, n *cluster.Node, svc *corev1.Service) cluster.Metrics {
	t.Helper()
	var first cluster.Metrics
	eventually(t, converge, n.Name+"'s restarted exporter reports "+svc.Name, func() error {
		m, err := c.Metrics(ctx, n.Name)
		if err != nil {
			return err
		}
		if _, ok, err := m.Value("localtraffic_blackhole", svcLabels(svc, n.Name)); err != nil || !ok {
			return fmt.Errorf("no verdict for %s yet (%v)", svc.Name, err)
		}
		first = m
		return nil
	})
	return first
}

// pagingWith is what a node that pages for svc with reason exports.
func pagingWith(svc *corev1.Service, node, reason string) []func(cluster.Metrics) error {
	return []func(cluster.Metrics) error{
		metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
		metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, reason), 1),
	}
}

func checkScrape(m cluster.Metrics, checks ...func(cluster.Metrics) error) error {
	var errs []error
	for _, c := range checks {
		errs = append(errs, c(m))
	}
	return errors.Join(errs...)
}

// TestRestartKeepsThePage: a page lasts as long as the loss, not as long as the exporter process. Two nodes page
// with real traffic from the outside client: node-2 (iptables) drops the NodePort of a Service whose only
// replica is on node-1 (traffic_lost), node-4 (nftables) keeps receiving a load balancer IP past the grace
// window although its health check answers 503 (health_check_ignored). node-2's exporter is then killed with
// SIGKILL (an OOM kill: no shutdown path) and node-4's stopped with SIGTERM (a rollout); each comes back with its
// state file and reports the same critical reason at the very first scrape that knows the Service, before a new
// grace window could have passed or a new attempt been found lost. Without the state file (--state.file=) that
// first scrape says no_traffic_seen on node-2 and no blackhole at all on node-4.
func TestRestartKeepsThePage(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2, n4 := c.Node("node-2"), c.Node("node-4")
	if n2.ProxyMode != cluster.IPTables || n4.ProxyMode != cluster.NFTables {
		fatalf(t, "node-2 runs %s and node-4 %s; want iptables and nftables", n2.ProxyMode, n4.ProxyMode)
	}
	const lbIP = "192.0.2.137"
	np := newService(t, c, "e2e-restart-page", "orders", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	setEndpoints(t, c, np, ready(startPods(t, c, np, "node-1")...))
	lb := serviceSpec(t, c, "e2e-restart-page", "checkout", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, lb, ready(startPods(t, c, lb, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, lb.Namespace, lb.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	// Both exporters as this test restarts them (node-4's with a short grace); each is given back its usual
	// one at the end.
	restartExporter(t, c, n2)
	restartExporter(t, c, n4, testGrace)
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, n4.Name, lbIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, nodePortAddr(n2, np), lbIP+":80")

	eventually(t, converge, "both nodes page", func() error {
		code, _, err := healthCheck(ctx, c, n4, lb)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-4: %d, want 503", code)
		}
		return errors.Join(
			wantVerdict(c.Request(ctx, nodePortAddr(n2, np)), cluster.Blackhole, "NodePort on node-2"),
			wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP via node-4"),
			expectMetrics(ctx, c, n2.Name, pagingWith(np, n2.Name, "traffic_lost")...),
			expectMetrics(ctx, c, n4.Name, pagingWith(lb, n4.Name, "health_check_ignored")...))
	})

	// An OOM kill on node-2: the state file holds what the model last wrote, every 5 s at most while it changes,
	// so the kill waits for a write since node-2 paged that holds the client's lost attempts as a client's; a
	// kill sooner finds the page's evidence not yet written, and one while the meter weighs the client's
	// cadence as a checker's finds them set aside (docs/rotation.md, "What a restart keeps").
	paged := time.Now()
	eventually(t, converge, "node-2's state file written since it paged, the client's attempts in it", func() error {
		if err := writtenSince(n2, paged); err != nil {
			return err
		}
		return clientRunSaved(n2, np.Spec.Ports[0].NodePort)
	})
	n2.KillExporter()
	if err := n2.StartExporter(ctx); err != nil {
		fatalln(t, err)
	}
	m := firstVerdict(t, ctx, c, n2, np)
	if err := checkScrape(m, append(pagingWith(np, n2.Name, "traffic_lost"),
		metricIs("localtraffic_state_file_state", cluster.Labels{"node": n2.Name, "state": "restored"}, 1))...); err != nil {
		errorf(t, "node-2's first scrape after an OOM kill: %v\n%s\n%s", err, m.Grep("localtraffic_blackhole"), m.Grep("localtraffic_state_file"))
	}

	// A rollout on node-4: SIGTERM, the state written on the way out, a new process.
	n4.StopExporter()
	if err := n4.StartExporter(ctx, testGrace); err != nil {
		fatalln(t, err)
	}
	start := time.Now()
	m = firstVerdict(t, ctx, c, n4, lb)
	if err := checkScrape(m, append(pagingWith(lb, n4.Name, "health_check_ignored"),
		metricIs("localtraffic_in_rotation", svcLabels(lb, n4.Name), 1),
		metricIs("localtraffic_state_file_state", cluster.Labels{"node": n4.Name, "state": "restored"}, 1))...); err != nil {
		errorf(t, "node-4's first scrape after a restart: %v\n%s\n%s", err, m.Grep("localtraffic_blackhole"), m.Grep("localtraffic_state_file"))
	}
	t.Logf("node-4's exporter reported %s's verdict %s after it was started again (the grace window is 15 s)",
		lb.Name, time.Since(start).Round(100*time.Millisecond))
}

// clientRunSaved: n's state file holds a run of its NodePort port whose attempts count as a client's: the meter
// told no checker there, or it did and kept client attempts beside them. A run saved while the meter weighed a
// client's cadence as a possible checker's holds none of them as a client's.
func clientRunSaved(n *cluster.Node, port int32) error {
	st, err := readStateFile(n.ExporterStateFile(cluster.ExporterPort))
	if err != nil {
		return err
	}
	for _, r := range st.Runs {
		if r.Port != port || (r.Address != "0.0.0.0" && r.Address != "::") {
			continue
		}
		if r.Told && r.ClientAttempts == 0 {
			return fmt.Errorf("the NodePort's run of %d attempts is saved with none a client's (its source weighed as a checker)", r.Attempts)
		}
		return nil
	}
	return fmt.Errorf("no run of NodePort %d saved", port)
}
