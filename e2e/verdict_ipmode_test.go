package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestVerdictLoadBalancerIPModeProxy: a Local LoadBalancer Service with allocateLoadBalancerNodePorts false
// whose ingress address has ipMode Proxy (the load balancer proxies itself). kube-proxy programs no rule for
// the address and there is no NodePort, so nothing external reaches the node through kube-proxy: the address
// routed to any node is not DNATed (no rule: the node has no route for it and answers unreachable), the rules
// hold no trace of it, and no exporter reports a drop, a mismatch or a blackhole. The same address in VIP mode
// is the control: kube-proxy programs it, served where the endpoint is and dropped elsewhere.
func TestVerdictLoadBalancerIPModeProxy(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.50"
	svc := serviceSpec(t, c, "e2e-ipmode", "gateway", corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
		s.Spec.AllocateLoadBalancerNodePorts = new(bool)
	})
	if np := svc.Spec.Ports[0].NodePort; np != 0 {
		fatalf(t, "allocateLoadBalancerNodePorts false, yet nodePort %d", np)
	}
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	t.Cleanup(func() { _ = c.Unroute(ctx, lbIP) })

	// The control first: in VIP mode the address is programmed, so the harness can tell "no rule" apart.
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, cluster.VIPIngress(lbIP)); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "VIP mode: programmed", func() error {
		return errors.Join(
			wantServedLocally(c.RequestVia(ctx, "node-1", lbIP+":80"), "node-1"),
			wantVerdict(c.RequestVia(ctx, "node-2", lbIP+":80"), cluster.Blackhole, "VIP via node-2"))
	})

	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, cluster.ProxyIngress(lbIP)); err != nil {
		fatalln(t, err)
	}
	for _, n := range c.Nodes() {
		eventually(t, converge, "Proxy mode on "+n.Name, func() error {
			var errs []error
			// Not DNATed, not dropped: without a rule the node routes the packet, has no route for it and
			// answers ICMP unreachable.
			errs = append(errs, wantVerdict(c.RequestVia(ctx, n.Name, lbIP+":80"), cluster.Refused, "Proxy-mode IP via "+n.Name))
			rules, err := ruleDump(ctx, n)
			if err != nil {
				errs = append(errs, err)
			} else if strings.Contains(rules, lbIP) {
				errs = append(errs, fmt.Errorf("%s: kube-proxy's rules mention the Proxy-mode address %s", n.Name, lbIP))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			l := svcLabels(svc, n.Name)
			return expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_service_info", cluster.Labels{"node": n.Name, "namespace": svc.Namespace, "service": svc.Name, "type": "LoadBalancer"}, 1),
				metricIs("localtraffic_rules_mismatch", l, 0),
				metricIs("localtraffic_blackhole", l, 0))
		})
	}
}
