package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRulesIdentityCounterBaseline: an externalIP's drop rule on node-2 counts real dropped
// SYNs while the address is routed there (node-2 is paged: its counter grew). The address then moves to node-1,
// which serves it, and kube-proxy on node-2 stops, so its rules — and their non-zero counters — stay as they
// are. node-2's exporter restarts: it finds a non-zero counter it never saw before. That is a baseline, not
// growth: not one scrape in a whole evidence window puts the address in rotation or pages, and the dropped-packet
// total starts at 0. Routed to node-2 again, new drops are growth: paged again. node-2's exporter runs without the
// arrivals meter: where it watches the address, its arrivals decide and the counter is no evidence of its own.
func TestRulesIdentityCounterBaseline(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.122"
	const window = 10 * time.Second
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-counter-baseline", "ledger", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })
	args := []string{"--externalip.evidence-window=" + window.String(), "--no-arrivals.enabled"}
	restartExporter(t, c, n2, args...)
	l, pl := svcLabels(svc, n2.Name), portLabels(svc, n2.Name)
	paged := func(what string) {
		t.Helper()
		eventually(t, converge, what, func() error {
			if err := c.RouteVia(ctx, n2.Name, extIP); err != nil {
				return err
			}
			return errors.Join(
				wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-2"),
				expectMetrics(ctx, c, n2.Name,
					metricIs("localtraffic_in_rotation", l, 1),
					metricIs("localtraffic_blackhole", l, 1),
					metricAbove("localtraffic_rules_dropped_packets_total", pl, 0)))
		})
	}
	paged("node-2 drops the routed externalIP and is paged")

	eventually(t, converge, "the address moved to node-1: served there, node-2 no longer paged", func() error {
		if err := c.RouteVia(ctx, "node-1", extIP); err != nil {
			return err
		}
		return errors.Join(
			wantServedLocally(c.Request(ctx, extIP+":80"), "node-1"),
			expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 0), metricIs("localtraffic_in_rotation", l, 0)))
	})
	n2.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n2, cluster.KubeProxyOptions{}) })
	raw, err := extDropCounter(ctx, n2, svc, extIP)
	if err != nil || raw == 0 {
		fatalf(t, "node-2's externalIP drop rule counts %d packets (%v): the test needs a non-zero counter", raw, err)
	}

	// The same flags again (restartExporter's clean-up, registered above, restores the usual exporter).
	n2.StopExporter()
	if err := n2.StartExporter(ctx, args...); err != nil {
		fatalln(t, err)
	}
	if err := n2.WaitExporter(ctx, time.Minute); err != nil {
		fatalln(t, err)
	}
	// The old exporter would have put the address in rotation at its first scrape and kept it there for the
	// evidence window: every scrape of a window and a half must say otherwise.
	deadline := time.Now().Add(window + window/2)
	scrapes := 0
	for time.Now().Before(deadline) {
		m, err := c.Metrics(ctx, n2.Name)
		if err != nil {
			fatalln(t, err)
		}
		if _, ok, _ := m.Value("localtraffic_blackhole", l); ok {
			scrapes++
			for _, check := range []func(cluster.Metrics) error{
				metricIs("localtraffic_blackhole", l, 0),
				metricIs("localtraffic_in_rotation", l, 0),
				metricIs("localtraffic_rules_dropped_packets_total", pl, 0),
			} {
				if err := check(m); err != nil {
					fatalf(t, "restarted exporter, scrape %d: %v", scrapes, err)
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if scrapes < 5 {
		fatalf(t, "only %d scrapes with the Service in a window and a half", scrapes)
	}
	if now, err := extDropCounter(ctx, n2, svc, extIP); err != nil || now != raw {
		fatalf(t, "drop counter %d (%v), %d at the restart: the rule must have held its count throughout", now, err, raw)
	}
	t.Logf("restarted exporter: %d scrapes over %v with a pre-existing drop counter of %d: not in rotation, total 0", scrapes, window+window/2, raw)

	// New drops after the baseline are growth (kube-proxy is still stopped: its rules count on).
	paged("routed to node-2 again: new drops page")
}

// extDropCounter reads the packet counter of the Service's "has no local endpoints" DROP rule for addr in
// node n's filter table (iptables-save -c).
func extDropCounter(ctx context.Context, n *cluster.Node, svc *corev1.Service, addr string) (uint64, error) {
	out, err := n.Exec(ctx, "iptables-save", "-c", "-t", "filter")
	if err != nil {
		return 0, err
	}
	re := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A KUBE-EXTERNAL-SERVICES -d ` + regexp.QuoteMeta(addr) + `/32 .*"` +
		regexp.QuoteMeta(svc.Namespace+"/"+svc.Name+":http") + ` has no local endpoints".* -j DROP$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no drop rule for %s on %s", addr, n.Name)
	}
	return strconv.ParseUint(m[1], 10, 64)
}

// TestRulesIdentityFirewallCounted: a Local LoadBalancer Service with
// loadBalancerSourceRanges and its only endpoint on node-1. node-2 answers its health check with 503, so a load
// balancer that checks it drains node-2; one that does not keeps sending. Traffic to the load balancer IP routed
// through node-2 times out, and kube-proxy v1.37.2 counts those drops on KUBE-PROXY-FIREWALL — the filter
// chain it puts first — not on the "has no local endpoints" rule for the address, which stays at 0. The
// exporter's dropped-packet counter (the signal of LocalTrafficOutOfRotationNodeDropsTraffic) must count them.
func TestRulesIdentityFirewallCounted(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.123"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-firewall-counted", "fenced", corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
		// The outside client (10.250.0.100) is allowed.
		s.Spec.LoadBalancerSourceRanges = []string{"10.250.0.0/24"}
	})
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	l, pl := svcLabels(svc, n2.Name), portLabels(svc, n2.Name)
	eventually(t, converge, "node-2 drains (503) and its firewall rule is in place", func() error {
		code, _, err := healthCheck(ctx, c, n2, svc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-2: %d, want 503", code)
		}
		if _, err := firewallCounter(ctx, n2, lbIP); err != nil {
			return err
		}
		return expectMetrics(ctx, c, n2.Name,
			metricIs("localtraffic_rules_drop", pl, 1),
			metricIs("localtraffic_in_rotation", l, 0),
			metricIs("localtraffic_blackhole", l, 0),
			metricIs("localtraffic_rules_dropped_packets_total", pl, 0))
	})
	eventually(t, converge, "the load balancer IP's drops through node-2 are counted", func() error {
		r := c.RequestVia(ctx, n2.Name, lbIP+":80")
		if err := wantVerdict(r, cluster.Blackhole, "LB IP via node-2"); err != nil {
			return err
		}
		fw, err := firewallCounter(ctx, n2, lbIP)
		if err != nil {
			return err
		}
		own, err := extDropCounter(ctx, n2, svc, lbIP)
		if err != nil {
			return err
		}
		// The premise: the firewall dropped them, the address's own drop rule saw nothing.
		if fw == 0 || own != 0 {
			return fmt.Errorf("KUBE-PROXY-FIREWALL counted %d, the address's no-local-endpoints rule %d", fw, own)
		}
		return expectMetrics(ctx, c, n2.Name, metricAbove("localtraffic_rules_dropped_packets_total", pl, 0))
	})
}

// firewallCounter reads the packet counter of KUBE-PROXY-FIREWALL's DROP for addr on node n.
func firewallCounter(ctx context.Context, n *cluster.Node, addr string) (uint64, error) {
	out, err := n.Exec(ctx, "iptables-save", "-c", "-t", "filter")
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A KUBE-PROXY-FIREWALL -d ` + regexp.QuoteMeta(addr) + `/32 .* -j DROP$`).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no KUBE-PROXY-FIREWALL rule for %s on %s", addr, n.Name)
	}
	return strconv.ParseUint(m[1], 10, 64)
}
