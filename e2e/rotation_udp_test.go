package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// udpFlow sends a datagram about every half second from one source port of the outside client to dst (an IP
// and port) until the test ends: one flow, as a load balancer that tracks UDP flows keeps it on one node.
func udpFlow(t *testing.T, c *cluster.Cluster, dst string) {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", dst)
	if err != nil {
		fatalln(t, err)
	}
	var conn *net.UDPConn
	// The socket belongs to the namespace it is created in, whichever thread writes to it later.
	if err := netns.Do(c.ClientNS, func() error {
		var err error
		conn, err = net.ListenUDP("udp4", nil)
		return err
	}); err != nil {
		fatalf(t, "udp socket in %s: %v", c.ClientNS, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			// Not connected: a connected socket fails its next write after the ICMP port unreachable a pod
			// without a UDP listener answers.
			_, _ = conn.WriteToUDP([]byte("datagram"), raddr)
			select {
			case <-ctx.Done():
				return
			case <-time.After(clientPause(i) / 2):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = conn.Close()
	})
}

// TestRotationUDPFlowPinned: a UDP LoadBalancer Service whose load balancer keeps a flow on the node it chose
// (AWS NLB, Azure LB: until the flow goes idle) after the node's health check starts failing. Its only replica
// is on node-2 (iptables) and node-4 (nftables), one ingress IP routed to each; one flow sends to each. The
// replicas move to node-1: both nodes answer 503 and drop, and the flows keep arriving past the grace window.
// That is lost traffic (critical), named udp_flow_pinned: every datagram belongs to a flow that began before
// the node dropped, so the load balancer honours the check for new flows and the fix is its flow handling,
// not its health check. A new flow (another source port) then arriving at the dropping nodes is one the load
// balancer chose despite the failing check: health_check_ignored.
func TestRotationUDPFlowPinned(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	lbIPs := map[string]string{"node-2": "192.0.2.96", "node-4": "192.0.2.97"}
	svc := serviceSpec(t, c, "e2e-rotation-udp", "dns", corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
		s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		s.Spec.Ports[0].Port = 53
	})
	pods := startPods(t, c, svc, "node-1", "node-2", "node-4")
	setEndpoints(t, c, svc, ready(pods[1], pods[2]))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name,
		corev1.LoadBalancerIngress{IP: lbIPs["node-2"]}, corev1.LoadBalancerIngress{IP: lbIPs["node-4"]}); err != nil {
		fatalln(t, err)
	}
	for node, ip := range lbIPs {
		// A quiet period shorter than the default so the flows are past the meter's first look (a flow seen
		// within a quiet period of it may be older than the meter) before the drop.
		restartExporter(t, c, c.Node(node), testGrace, "--arrivals.quiet-period=20s")
		t.Cleanup(func() { _ = c.Unroute(context.Background(), ip) })
		if err := c.RouteVia(ctx, node, ip); err != nil {
			fatalln(t, err)
		}
	}
	time.Sleep(20 * time.Second)
	for _, ip := range lbIPs {
		udpFlow(t, c, ip+":53")
	}
	for node := range lbIPs {
		eventually(t, converge, node+" serves the flow", func() error {
			return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", svcLabels(svc, node), 0),
				metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "load_balancer_ip", "ip_family": ipv4}, 0))
		})
	}
	setEndpoints(t, c, svc, ready(pods[0]))
	for node := range lbIPs {
		n := c.Node(node)
		eventually(t, converge, node+" drained by its health check, its pinned flow lost and named", func() error {
			code, _, err := healthCheck(ctx, c, n, svc)
			if err != nil {
				return err
			}
			if code != http.StatusServiceUnavailable {
				return fmt.Errorf("health check on %s: %d, want 503", node, code)
			}
			return expectMetrics(ctx, c, node,
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "udp_flow_pinned"), 1))
		})
	}
	// A new flow: the load balancer sends new flows to the dropping nodes too.
	for _, ip := range lbIPs {
		udpFlow(t, c, ip+":53")
	}
	for node := range lbIPs {
		eventually(t, converge, node+" paged: a new flow despite the failing check", func() error {
			return expectMetrics(ctx, c, node,
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "health_check_ignored"), 1))
		})
	}
}
