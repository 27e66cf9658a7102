package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRotationNoMeterCounterPages: the arrivals meter is off (--no-arrivals.enabled, as on a node without
// CAP_NET_RAW) on node-2 (iptables) and node-4 (nftables); a NodePort Service's only replica is on node-1. With
// no client yet both are declared blackholes nothing can see: not_observed, a warning. Clients then try both
// NodePorts and are dropped. On node-2 kube-proxy's NodePort drop rule counts them: the counter's growth is
// the evidence of lost traffic, traffic_lost, a page (before, the blind node stayed not_observed however fast
// the counter climbed). nftables mode's drops carry no counter: node-4 stays not_observed, the one case where
// nothing can be seen.
func TestRotationNoMeterCounterPages(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2, n4 := c.Node("node-2"), nftablesNode(t, c)
	svc := serviceSpec(t, c, "e2e-rotation-counter", "rates", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	nodes := []*cluster.Node{n2, n4}
	for _, n := range nodes {
		restartExporter(t, c, n, "--no-arrivals.enabled")
	}
	for _, n := range nodes {
		eventually(t, converge, n.Name+" drops the NodePort, and has no meter", func() error {
			return expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_arrivals_meter_state", cluster.Labels{"node": n.Name, "state": "disabled"}, 1),
				metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n.Name, "not_observed"), 1))
		})
	}
	keepSending(t, c, nodePortAddr(n2, svc), nodePortAddr(n4, svc))
	eventually(t, converge, "node-2's drop counter grows: traffic_lost", func() error {
		return errors.Join(
			wantVerdict(c.Request(ctx, nodePortAddr(n2, svc)), cluster.Blackhole, "NodePort on node-2"),
			expectMetrics(ctx, c, n2.Name,
				metricIs("localtraffic_blackhole", svcLabels(svc, n2.Name), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "traffic_lost"), 1)))
	})
	if err := errors.Join(
		wantVerdict(c.Request(ctx, nodePortAddr(n4, svc)), cluster.Blackhole, "NodePort on "+n4.Name),
		expectMetrics(ctx, c, n4.Name,
			metricIs("localtraffic_blackhole", svcLabels(svc, n4.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n4.Name, "not_observed"), 1))); err != nil {
		errorf(t, "nftables mode, no meter: nothing can see the clients: %v", err)
	}
}

// TestRotationExternalIPWithdrawnWithinGrace: an externalIP routed to node-2 (iptables, meter on) while node-2
// serves it; the client keeps connecting. node-2's endpoint goes away and, seconds later, the route is withdrawn
// and moves to node-1 (a BGP speaker or keepalived following the endpoint). In between, node-2 dropped the
// client's attempts and kube-proxy's drop rule counted them: the exporter scrapes twice in that window and sees
// the counter grow. Before, that growth put the address in rotation for the whole evidence window (10 minutes
// of traffic_lost for a route gone in seconds); now the meter, which saw the same attempts, decides, and they
// lasted less than the grace window: node-2 is never in rotation nor paged, sampled every second for three grace
// windows.
func TestRotationExternalIPWithdrawnWithinGrace(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.97"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-withdrawn", "fx", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	// The drop counters are read every 2 s, not 15: the route moves on once the exporter saw the counter grow,
	// which must come within the grace window.
	restartExporter(t, c, n2, testGrace, "--rules.counters-interval=2s")
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })
	if err := c.RouteVia(ctx, n2.Name, extIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, extIP+":80")
	l := svcLabels(svc, n2.Name)
	eventually(t, converge, "node-2 serves the externalIP", func() error {
		return errors.Join(wantServedLocally(c.Request(ctx, extIP+":80"), n2.Name),
			expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_in_rotation", l, 1), metricIs("localtraffic_blackhole", l, 0)))
	})

	setEndpoints(t, c, svc, ready(pods[0]))
	eventually(t, converge, "node-2 drops the externalIP", func() error {
		return wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-2")
	})
	// Two scrapes while the route still points at node-2: the first is the drop counter's baseline, the second
	// sees it grow.
	dropped := func() (float64, error) {
		m, err := c.Metrics(ctx, n2.Name)
		if err != nil {
			return 0, err
		}
		if err := m.Expect("localtraffic_blackhole", l, 0); err != nil {
			return 0, err
		}
		v, _, err := m.Value("localtraffic_rules_dropped_packets_total", portLabels(svc, n2.Name))
		return v, err
	}
	first, err := dropped()
	if err != nil {
		fatalln(t, err)
	}
	var grown float64
	eventually(t, 20*time.Second, "node-2's drop counter grows while the route still points at it", func() error {
		v, err := dropped()
		if err != nil {
			return err
		}
		if v <= first {
			return fmt.Errorf("dropped packets %v, want above %v", v, first)
		}
		grown = v
		return nil
	})
	if err := c.RouteVia(ctx, "node-1", extIP); err != nil {
		fatalln(t, err)
	}
	for i := 0; i < 45; i++ {
		if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 0), metricIs("localtraffic_in_rotation", l, 0)); err != nil {
			fatalf(t, "%ds after the route moved to node-1 (node-2 counted %v dropped packets): %v", i, grown, err)
		}
		time.Sleep(time.Second)
	}
}
