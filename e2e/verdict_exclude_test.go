package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// excludeLabel is the label the cloud service controller reads to leave a node out of load balancers.
const excludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// TestVerdictExcludeLabelValues: node-2 carries exclude-from-external-load-balancers=false (a value that
// parses as false: the cloud service controller keeps the node) and node-3 the empty value kubeadm puts on
// control-plane nodes (present: excluded). kube-proxy ignores the label, so both really drop a Local
// NodePort Service whose only endpoint is on node-1. node-2 is still in rotation and paged; node-3 is out of
// load balancers, and out of rotation while no NodePort client uses it. The label takes a node out of load
// balancers only: once clients keep using node-3's NodePort past the grace window, node-3 is in
// rotation by their arrivals and paged, traffic_lost.
func TestVerdictExcludeLabelValues(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2, n3 := c.Node("node-2"), c.Node("node-3")
	for n, v := range map[*cluster.Node]string{n2: "false", n3: ""} {
		if err := n.SetLabel(ctx, excludeLabel, v); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() {
			if err := n.RemoveLabel(context.Background(), excludeLabel); err != nil {
				errorf(t, "restore %s: %v", n.Name, err)
			}
		})
	}
	svc := serviceSpec(t, c, "e2e-exclude", "ledger", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))

	excluded := map[string]bool{"node-2": false, "node-3": true}
	for _, n := range []*cluster.Node{n2, n3} {
		eventually(t, converge, "exclusion label on "+n.Name, func() error {
			if err := wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Blackhole, n.Name); err != nil {
				return err
			}
			l := svcLabels(svc, n.Name)
			return expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_node_excluded", nodeLabels(n.Name), boolGauge(excluded[n.Name])),
				metricIs("localtraffic_rules_drop", portLabels(svc, n.Name), 1),
				metricIs("localtraffic_in_rotation", l, boolGauge(!excluded[n.Name])),
				metricIs("localtraffic_blackhole", l, boolGauge(!excluded[n.Name])))
		})
	}

	restartExporter(t, c, n3, testGrace)
	keepSending(t, c, nodePortAddr(n3, svc))
	eventually(t, converge, "NodePort clients keep using excluded node-3", func() error {
		return expectMetrics(ctx, c, n3.Name,
			metricIs("localtraffic_node_excluded", nodeLabels(n3.Name), 1),
			metricIs("localtraffic_in_rotation", svcLabels(svc, n3.Name), 1),
			metricIs("localtraffic_blackhole", svcLabels(svc, n3.Name), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n3.Name, "traffic_lost"), 1))
	})
}
