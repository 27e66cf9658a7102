package e2e

import (
	"errors"
	"testing"

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
		t.Errorf("nftables mode, no meter: nothing can see the clients: %v", err)
	}
}
