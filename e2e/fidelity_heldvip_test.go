package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestFidelityHeldVIPPluginCannotTell: a health-checked LoadBalancer Service with its only replica on node-1, its
// load balancer IP held on node-3's interface (an announcer in L2 mode) and routed there. Real traffic: node-3
// drops it although its health check answers 503, and node-3's exporter pages it. `kubectl localtraffic status`
// has the API alone, where node-3 looks drained: it must not say "drained" (a definite answer the exporter
// contradicts) but that it cannot tell, on every node without a replica (no cloud controller is known to run
// this load balancer, so the VIP may be held on any of them), exit 0, and call no node a blackhole.
func TestFidelityHeldVIPPluginCannotTell(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.93"
	n3 := c.Node("node-3")
	svc := serviceSpec(t, c, "e2e-fidelity-heldvip", "ledger", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	if err := n3.AddAddress(ctx, lbIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := n3.DelAddress(context.Background(), lbIP); err != nil {
			errorf(t, "restore node-3: %v", err)
		}
		_ = c.Unroute(context.Background(), lbIP)
	})
	if err := c.RouteVia(ctx, "node-3", lbIP); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "the VIP held on node-3: dropped there, paged there", func() error {
		if err := wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP held on node-3"); err != nil {
			return err
		}
		return expectMetrics(ctx, c, "node-3", metricIs("localtraffic_blackhole", svcLabels(svc, "node-3"), 1))
	})

	p := newPlugin(t, ctx, c)
	dest := fmt.Sprintf("load balancer IP %s:80/TCP", lbIP)
	eventually(t, converge, "the plugin cannot tell where the VIP is held", func() error {
		code, nodes, err := p.pluginStatus(t, ctx, svc.Namespace, svc.Name)
		if err != nil {
			return err
		}
		var errs []error
		if code != 0 {
			errs = append(errs, fmt.Errorf("status exit %d, want 0 (no blackhole known from the API)", code))
		}
		for _, n := range c.Nodes() {
			ps := nodes[n.Name]
			switch {
			case ps.Blackhole:
				errs = append(errs, fmt.Errorf("%s: the plugin says blackhole from the API alone", n.Name))
			case n.Name == "node-1" && (len(ps.CannotTell) > 0 || !ps.Serves):
				errs = append(errs, fmt.Errorf("node-1 holds the replica: plugin says %+v", ps))
			case n.Name != "node-1" && (len(ps.CannotTell) != 1 || ps.CannotTell[0] != dest):
				errs = append(errs, fmt.Errorf("%s: plugin says %+v, want cannot tell %q", n.Name, ps, dest))
			}
		}
		return errors.Join(errs...)
	})
}
