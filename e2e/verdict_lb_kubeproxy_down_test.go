package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestVerdictLoadBalancerKubeProxyStopped: a Local LoadBalancer Service whose only endpoint is on node-1.
// kube-proxy on node-2 is stopped: the rules it left keep dropping the load balancer IP (real traffic routed
// through node-2 times out), but its health check node port is closed, so a load balancer checking it drains
// node-2. That is no blackhole page (in_rotation 0): the kube-proxy alert (kube_proxy_up 0) is the signal.
// kube-proxy is restarted afterwards.
func TestVerdictLoadBalancerKubeProxyStopped(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.60"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-lb-kp-down", "payments", corev1.ServiceTypeLoadBalancer, nil)
	if svc.Spec.HealthCheckNodePort == 0 {
		fatalln(t, "apiserver allocated no healthCheckNodePort")
	}
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Unroute(ctx, lbIP) })
	l := svcLabels(svc, n2.Name)
	eventually(t, converge, "node-2 drains by its 503 before the stop", func() error {
		code, _, err := healthCheck(ctx, c, n2, svc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-2: %d, want 503", code)
		}
		return errors.Join(
			wantVerdict(c.RequestVia(ctx, n2.Name, lbIP+":80"), cluster.Blackhole, "LB IP via node-2"),
			expectMetrics(ctx, c, n2.Name,
				metricIs("localtraffic_in_rotation", l, 0),
				metricIs("localtraffic_blackhole", l, 0)))
	})

	n2.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n2, cluster.KubeProxyOptions{}) })
	eventually(t, converge, "kube-proxy down on node-2", func() error {
		var errs []error
		// The health check node port is closed now …
		if r := c.Request(ctx, cluster.HostPort(n2.IP, svc.Spec.HealthCheckNodePort)); r.Verdict != cluster.Refused {
			errs = append(errs, fmt.Errorf("health check on node-2: %s, want refused", r))
		}
		// … while the stale rules still drop the load balancer's traffic.
		errs = append(errs, wantVerdict(c.RequestVia(ctx, n2.Name, lbIP+":80"), cluster.Blackhole, "LB IP via node-2"))
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return expectMetrics(ctx, c, n2.Name,
			metricIs("localtraffic_health_check_result", withResult(l, "refused"), 1),
			metricIs("localtraffic_health_check_up", l, 0),
			metricIs("localtraffic_rules_drop", portLabels(svc, n2.Name), 1),
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n2.Name, "endpoint": "healthz"}, 0),
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n2.Name, "endpoint": "livez"}, 0),
			// Drained by the unanswered check: no page.
			metricIs("localtraffic_in_rotation", l, 0),
			metricIs("localtraffic_blackhole", l, 0))
	})
	// node-1 keeps serving throughout.
	if err := wantServedLocally(c.RequestVia(ctx, "node-1", lbIP+":80"), "node-1"); err != nil {
		errorln(t, err)
	}
}
