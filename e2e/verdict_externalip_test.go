package e2e

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestVerdictExternalIPRouted: a Local ClusterIP Service with an externalIP and its only endpoint on node-1.
// kube-proxy writes the externalIP's drop rule on every other node, but traffic arrives only where the network
// routes it. Routed to node-2 (a static route), node-2 really drops it and only node-2 is paged; routed to
// node-3 instead, node-3 drops it and is paged (its drop counter is the evidence) and node-2, whose counter
// stopped growing, is not once the evidence window has passed (10s here, restarted with that flag; the
// default is 10m). Their exporters run without the arrivals meter: where it watches an address, its arrivals
// decide, held to the grace window, and the counter is no evidence of its own. Then the address is held on node-4's lo (keepalived, kube-vip) and routed there: nftables
// mode has no counters, the assigned address is the evidence, and node-4 is paged. Nodes the address does not
// reach are never paged.
func TestVerdictExternalIPRouted(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.70"
	svc := serviceSpec(t, c, "e2e-externalip", "reports", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })
	n4 := c.Node("node-4")
	t.Cleanup(func() {
		if err := n4.DelAddress(context.Background(), extIP); err != nil {
			errorf(t, "restore node-4: %v", err)
		}
	})

	for _, name := range []string{"node-2", "node-3"} {
		restartExporter(t, c, c.Node(name), "--externalip.evidence-window=10s", "--no-arrivals.enabled")
	}

	// paged checks that the client's traffic routed through target is dropped and that exactly target is
	// paged (node-1 serves; the others do not see the address, or no longer).
	paged := func(target string) {
		t.Helper()
		eventually(t, converge, "externalIP routed via "+target, func() error {
			if err := c.RouteVia(ctx, target, extIP); err != nil {
				return err
			}
			if err := wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via "+target); err != nil {
				return err
			}
			var errs []error
			for _, n := range c.Nodes() {
				if n.Name == "node-1" {
					continue
				}
				l := svcLabels(svc, n.Name)
				want := boolGauge(n.Name == target)
				checks := []func(cluster.Metrics) error{
					metricIs("localtraffic_rules_drop", portLabels(svc, n.Name), 1),
					metricIs("localtraffic_in_rotation", l, want),
					metricIs("localtraffic_blackhole", l, want),
				}
				if n.Name == target && n.ProxyMode == cluster.IPTables {
					// kube-proxy's own drop rule counted the client's SYNs: the drop is the rule's doing.
					checks = append(checks, metricAbove("localtraffic_rules_dropped_packets_total", portLabels(svc, n.Name), 0))
				}
				errs = append(errs, expectMetrics(ctx, c, n.Name, checks...))
			}
			errs = append(errs, expectMetrics(ctx, c, "node-1", metricIs("localtraffic_blackhole", svcLabels(svc, "node-1"), 0)))
			return errors.Join(errs...)
		})
	}

	// Control: routed to node-1, the address is served by its local pod.
	eventually(t, converge, "externalIP served via node-1", func() error {
		return wantServedLocally(c.RequestVia(ctx, "node-1", extIP+":80"), "node-1")
	})
	paged("node-2")
	paged("node-3")
	if err := n4.AddAddress(ctx, extIP); err != nil {
		fatalln(t, err)
	}
	paged("node-4")
}
