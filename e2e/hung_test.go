package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestKubeProxyHung: a kube-proxy that accepts connections and never answers (frozen with SIGSTOP) is the
// hostile health endpoint for real. A scrape that carries Prometheus' timeout header still answers, with the
// probes given up at its deadline and reported as timeouts; the stale rules keep serving. Thawed, it recovers.
func TestKubeProxyHung(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-3")
	svc := newService(t, c, "e2e-kube-proxy-hung", "ledger", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, n.Name)
	setEndpoints(t, c, svc, ready(pods...))
	eventually(t, converge, "served before the freeze", func() error {
		return wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name)
	})

	if err := n.FreezeKubeProxy(); err != nil {
		fatalln(t, err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := n.ThawKubeProxy(); err != nil {
				errorln(t, err)
			}
		}
	}
	t.Cleanup(thaw)

	client := &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext, DisableKeepAlives: true},
		Timeout: 30 * time.Second} // a hang guard only: the exporter's own deadline is 2.5 s
	eventually(t, converge, "hung kube-proxy reported as timeouts on "+n.Name, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.MetricsURL(), nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "3")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("scrape: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("scrape: %s", resp.Status)
		}
		m, err := cluster.ParseMetrics(string(body))
		if err != nil {
			return err
		}
		return errors.Join(
			wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name), // stale rules still forward
			metricIs("localtraffic_kube_proxy_result", cluster.Labels{"node": n.Name, "endpoint": "healthz", "result": "timeout"}, 1)(m),
			metricIs("localtraffic_kube_proxy_result", cluster.Labels{"node": n.Name, "endpoint": "livez", "result": "timeout"}, 1)(m),
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "livez"}, 0)(m),
			metricIs("localtraffic_kube_proxy_healthy", cluster.Labels{"node": n.Name}, 0)(m),
			metricIs("localtraffic_scrape_collector_success", cluster.Labels{"node": n.Name, "collector": "kube_proxy"}, 1)(m),
			metricIs("localtraffic_blackhole", cluster.Labels{"node": n.Name, "namespace": svc.Namespace, "service": svc.Name}, 0)(m))
	})

	thaw()
	eventually(t, converge, "kube-proxy answers again on "+n.Name, func() error {
		return expectMetrics(ctx, c, n.Name,
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "livez"}, 1),
			metricIs("localtraffic_kube_proxy_result", cluster.Labels{"node": n.Name, "endpoint": "livez", "result": "ok"}, 1))
	})
}
