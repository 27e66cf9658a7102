package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestFidelityKubeProxyConfigz: kube-proxy on node-2 runs as k3s and RKE2 run it, its health
// server bound to 127.0.0.1:10256, and with the AllowServiceExternalIPs feature gate off. The truth, from
// inside node-2: /livez answers on 127.0.0.1 and is refused on the node's address; kube-proxy writes no rule for
// an externalIP, so the address routed to node-2 is not dropped there (refused: routed on, unreachable).
// The exporter reads both from kube-proxy's /configz: kube_proxy_up is 1 (probed on 127.0.0.1), and the
// externalIP Service without a local endpoint on node-2 is neither a blackhole nor a mismatch. The control: an
// exporter told the old default (the node's address) sees kube-proxy down.
func TestFidelityKubeProxyConfigz(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-2")
	const extIP = "192.0.2.72"
	svc := serviceSpec(t, c, "e2e-fidelity-configz", "reports", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })

	// Cleanups run last first: kube-proxy back with its usual configuration, then node-2's exporter restarted, so
	// the next test does not wait for it to read /configz again.
	t.Cleanup(func() {
		n.StopExporter()
		if err := n.StartExporter(context.Background()); err != nil {
			errorf(t, "restart node-2's exporter: %v", err)
			return
		}
		if err := n.WaitExporter(context.Background(), converge); err != nil {
			errorf(t, "node-2's exporter: %v", err)
		}
	})
	n.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	if err := n.StartKubeProxy(ctx, cluster.KubeProxyOptions{ExtraArgs: []string{
		fmt.Sprintf("--healthz-bind-address=127.0.0.1:%d", cluster.KubeProxyHealthzPort),
		"--feature-gates=AllowServiceExternalIPs=false",
	}}); err != nil {
		fatalln(t, err)
	}
	loopback := fmt.Sprintf("http://127.0.0.1:%d/livez", cluster.KubeProxyHealthzPort)
	nodeAddr := fmt.Sprintf("http://%s:%d/livez", n.IP, cluster.KubeProxyHealthzPort)
	eventually(t, converge, "kube-proxy's health server on node-2's loopback only", func() error {
		if r := cluster.HTTPGet(ctx, n.Dialer(), loopback); r.Verdict != cluster.OK || r.Status != 200 {
			return fmt.Errorf("%s: %s", loopback, r)
		}
		if r := cluster.HTTPGet(ctx, n.Dialer(), nodeAddr); r.Verdict != cluster.Refused {
			return fmt.Errorf("%s: %s, want refused", nodeAddr, r)
		}
		return nil
	})
	configz, err := n.Exec(ctx, "curl", "-sS", "--max-time", "5", "http://127.0.0.1:10249/configz")
	if err != nil {
		fatalln(t, err)
	}
	t.Logf("kube-proxy's /configz on node-2:\n%s", configz)
	if !strings.Contains(configz, `"healthzBindAddress":"127.0.0.1:10256"`) || !strings.Contains(configz, `"AllowServiceExternalIPs":false`) {
		fatalf(t, "/configz does not show the settings: %s", configz)
	}

	l := svcLabels(svc, n.Name)
	eventually(t, converge, "node-2: kube-proxy up on loopback; the externalIP neither dropped nor mismatched", func() error {
		if err := c.RouteVia(ctx, n.Name, extIP); err != nil {
			return err
		}
		if err := wantVerdict(c.Request(ctx, extIP+":80"), cluster.Refused, "externalIP via node-2"); err != nil {
			return err
		}
		dump, err := ruleDump(ctx, n)
		if err != nil {
			return err
		}
		if !strings.Contains(dump, "KUBE-SERVICES") || strings.Contains(dump, extIP) {
			return errors.New("node-2's rules: want kube-proxy's rules and none for the externalIP")
		}
		return expectMetrics(ctx, c, n.Name,
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "livez"}, 1),
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "healthz"}, 1),
			metricIs("localtraffic_kube_proxy_programmed", nodeLabels(n.Name), 1),
			metricIs("localtraffic_blackhole", l, 0),
			metricIs("localtraffic_rules_mismatch", l, 0))
	})

	// Control: probed where kube-proxy listens by default (the node's address), as the exporter did before it
	// read healthzBindAddress, this kube-proxy looks down (a second exporter beside the usual one).
	const controlPort = 9747
	if err := n.StartExporterOn(ctx, controlPort, fmt.Sprintf("--kube-proxy.healthz-address=%s:%d", n.IP, cluster.KubeProxyHealthzPort)); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { n.StopExporterOn(controlPort) })
	eventually(t, converge, "an exporter probing the node's address sees kube-proxy refused", func() error {
		m, err := c.MetricsOn(ctx, n.Name, controlPort)
		if err != nil {
			return err
		}
		return errors.Join(
			m.Expect("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "livez"}, 0),
			m.Expect("localtraffic_kube_proxy_result", cluster.Labels{"node": n.Name, "endpoint": "livez", "result": "refused"}, 1))
	})
}
