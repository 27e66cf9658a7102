package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRotationHealthCheckProbesOnLoadBalancerIP: some load balancers address their health checks to the load
// balancer IP, not the node's (GCE's L4 checks). The LB IP is held on node-2 (as GCE's guest agent does) and a
// prober outside the cluster asks its health check node port there: the probes are counted, and
// localtraffic_health_check_last_probe_timestamp_seconds follows them (before, only probes of the node's own
// addresses were, and such a node looked unchecked). The cluster's nodes have no cloud providerID and the
// Service no annotation: nothing is known to probe it (health_check_expected_services 0, so
// LocalTrafficNodeNotHealthChecked expects nothing) until the Service declares
// localtraffic.io/health-check: health-check-node-port.
func TestRotationHealthCheckProbesOnLoadBalancerIP(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.101"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-lbprobe", "maps", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	restartExporter(t, c, n2, testGrace)
	if err := n2.AddAddress(ctx, lbIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = n2.DelAddress(context.Background(), lbIP)
		_ = c.Unroute(context.Background(), lbIP)
	})
	if err := c.RouteVia(ctx, n2.Name, lbIP); err != nil {
		fatalln(t, err)
	}
	node := cluster.Labels{"node": n2.Name}
	if err := expectMetrics(ctx, c, n2.Name, metricAbsent("localtraffic_health_check_last_probe_timestamp_seconds", node),
		metricIs("localtraffic_health_check_expected_services", node, 0)); err != nil {
		fatalf(t, "before any probe, nothing known to probe: %v", err)
	}
	hcAddr := lbIP + ":" + strconv.Itoa(int(svc.Spec.HealthCheckNodePort))
	var first float64
	eventually(t, converge, "a probe of the health check node port on the LB IP is counted", func() error {
		if r := c.Request(ctx, hcAddr); r.Verdict != cluster.OK || r.Status != 200 {
			return fmt.Errorf("probe of %s: %s", hcAddr, r)
		}
		m, err := c.Metrics(ctx, n2.Name)
		if err != nil {
			return err
		}
		v, ok, err := m.Value("localtraffic_health_check_last_probe_timestamp_seconds", node)
		if err != nil || !ok {
			return fmt.Errorf("no last probe time (present %v): %v", ok, err)
		}
		first = v
		return nil
	})
	eventually(t, converge, "the last probe time follows the next probes", func() error {
		if r := c.Request(ctx, hcAddr); r.Verdict != cluster.OK {
			return fmt.Errorf("probe of %s: %s", hcAddr, r)
		}
		return expectMetrics(ctx, c, n2.Name, metricAbove("localtraffic_health_check_last_probe_timestamp_seconds", node, first))
	})
	patch := []byte(`{"metadata":{"annotations":{"localtraffic.io/health-check":"health-check-node-port"}}}`)
	if _, err := c.Admin().CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "declared: its probes are expected", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_health_check_expected_services", node, 1))
	})
}
