package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// Pod traffic to a Local Service's external addresses (docs/rotation.md, "What counts, once"): kube-proxy sends
// what its local detector calls pod traffic (--cluster-cidr in the default ClusterCIDR mode) to every endpoint,
// so a pod on a node without a replica that calls its Service's load balancer IP or NodePort is served, not
// dropped; with no detector it is dropped like a client. The exporter must count exactly what kube-proxy drops.

// keepSendingFrom makes pod open a new connection to each addr about once a second until the test ends, as an
// application calling its own Service's public address does.
func keepSendingFrom(t *testing.T, pod *cluster.Pod, addrs ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, a := range addrs {
				requestFrom(ctx, pod, a)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func requestFrom(ctx context.Context, pod *cluster.Pod, addr string) cluster.Result {
	return cluster.HTTPGet(ctx, netns.Dialer{NS: pod.NS, Timeout: cluster.ConnectTimeout}, "http://"+addr+"/")
}

// startPodAt starts a pod of svc on node with the given address, as an IPAM outside the Node's spec.podCIDRs
// allocates it (Calico's blocks, Cilium's cluster pool, AWS VPC CNI, Azure CNI), and routes the address's /24
// to the node from every other node and the control plane, as such a CNI announces its blocks.
func startPodAt(t *testing.T, c *cluster.Cluster, svc *corev1.Service, node, ip string) *cluster.Pod {
	t.Helper()
	ctx := testContext(t)
	p, err := c.StartPod(ctx, cluster.PodConfig{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%s", svc.Name, node),
		Node: node, Ports: []int{backendPort}, IPs: []string{ip}})
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), p.Namespace, p.Name) })
	block := ip[:len(ip)-len(".11")] + ".0/24"
	namespaces := []string{c.ControlPlaneNS}
	for _, n := range c.Nodes() {
		if n.Name != node {
			namespaces = append(namespaces, n.NS)
		}
	}
	for _, ns := range namespaces {
		if err := netns.IP(ctx, "-n", ns, "route", "replace", block, "via", c.Node(node).IP); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = netns.IP(context.Background(), "-n", ns, "route", "del", block) })
	}
	return p
}

// TestRotationPodTrafficOutsidePodCIDRsServed: pods whose addresses lie outside every Node's podCIDR but inside
// kube-proxy's --cluster-cidr (10.244.200.11 on node-2, iptables; 10.244.201.11 on node-4, nftables) call their
// Service's load balancer IP and their own node's NodePort once a second, on nodes without a replica, for three
// grace windows. kube-proxy short-circuits them to the endpoint on node-1: every request is answered. Neither
// node is ever in rotation or paged, and the meter counts none of it as an arrival (before the exporter read
// kube-proxy's detector, each node paged health_check_ignored once the grace window ran out).
func TestRotationPodTrafficOutsidePodCIDRsServed(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.97"
	n4 := nftablesNode(t, c)
	podIPs := map[string]string{"node-2": "10.244.200.11", n4.Name: "10.244.201.11"}
	svc := serviceSpec(t, c, "e2e-rotation-podtraffic", "storefront", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	lbArrivals := func(node string) (float64, error) {
		m, err := c.Metrics(ctx, node)
		if err != nil {
			return 0, err
		}
		v, _, err := m.Value("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "load_balancer_ip", "ip_family": ipv4})
		return v, err
	}
	before := map[string]float64{}
	for node, ip := range podIPs {
		n := c.Node(node)
		restartExporter(t, c, n, testGrace)
		caller := startPodAt(t, c, svc, node, ip)
		targets := []string{lbIP + ":80", nodePortAddr(n, svc)}
		eventually(t, converge, "the pod on "+node+" is served through its Service's public addresses", func() error {
			var errs []error
			for _, a := range targets {
				if r := requestFrom(ctx, caller, a); r.Verdict != cluster.OK || r.Status != 200 {
					errs = append(errs, fmt.Errorf("%s from %s on %s: %s", a, ip, node, r))
				}
			}
			return errors.Join(errs...)
		})
		var err error
		if before[node], err = lbArrivals(node); err != nil {
			fatalln(t, err)
		}
		keepSendingFrom(t, caller, targets...)
	}
	for i := 0; i < 50; i++ { // three grace windows and more, a sample a second
		for node := range podIPs {
			if err := expectMetrics(ctx, c, node,
				metricIs("localtraffic_in_rotation", svcLabels(svc, node), 0),
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 0)); err != nil {
				fatalf(t, "%ds into the pods' calls: %v", i, err)
			}
		}
		time.Sleep(time.Second)
	}
	for node, ip := range podIPs {
		after, err := lbArrivals(node)
		if err != nil {
			fatalln(t, err)
		}
		if after != before[node] {
			errorf(t, "%s: the pod's calls from %s counted as %v arrivals at the LB IP", node, ip, after-before[node])
		}
	}
}

// TestRotationPodTrafficWithoutLocalDetectorPages: kube-proxy on node-2 (iptables) and node-4 (nftables) runs
// with no --cluster-cidr, so it has no local detector and does not short-circuit pod traffic: a pod there
// calling its Service's load balancer IP, without a replica on its node, is dropped like any client. That is
// real loss, and the node pages (before, its pod CIDR was always left out as pod traffic and nothing paged).
func TestRotationPodTrafficWithoutLocalDetectorPages(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.99"
	nodes := []*cluster.Node{c.Node("node-2"), nftablesNode(t, c)}
	svc := serviceSpec(t, c, "e2e-rotation-nodetector", "wishlist", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	for _, n := range nodes {
		restartKubeProxy(t, c, n, cluster.KubeProxyOptions{NoClusterCIDR: true})
		restartExporter(t, c, n, testGrace) // reads the new /configz at once
		// Registered after the exporter's: kube-proxy is restored first, and the restored exporter reads it.
		t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
		caller := startPods(t, c, svc, n.Name)[0] // in the node's own pod CIDR
		eventually(t, converge, "kube-proxy on "+n.Name+" drops its pod's call", func() error {
			return wantVerdict(requestFrom(ctx, caller, lbIP+":80"), cluster.Blackhole, "LB IP from a pod on "+n.Name)
		})
		keepSendingFrom(t, caller, lbIP+":80")
	}
	for _, n := range nodes {
		eventually(t, converge, n.Name+" paged: its pods' calls are lost", func() error {
			return expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_in_rotation", svcLabels(svc, n.Name), 1),
				metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n.Name, "health_check_ignored"), 1))
		})
	}
}

// TestRotationVIPOnLoopbackIsNotAWayIn: the load balancer IP bound to node-2's lo (a direct-server-return VIP,
// kube-vip's in BGP mode), no replica there. An address on lo tells no neighbour anything: node-2 is not in
// rotation for it on that ground (before, it was paged no_traffic_seen as if an ARP announcer held it). Once the
// network does deliver it (a route via node-2) and clients keep arriving past the grace window, the meter puts
// node-2 in rotation and it pages.
func TestRotationVIPOnLoopbackIsNotAWayIn(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.100"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-lovip", "tickets", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	restartExporter(t, c, n2, testGrace)
	if _, err := n2.Exec(ctx, "ip", "addr", "add", lbIP+"/32", "dev", "lo"); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_, _ = n2.Exec(context.Background(), "ip", "addr", "del", lbIP+"/32", "dev", "lo")
		_ = c.Unroute(context.Background(), lbIP)
	})
	l := svcLabels(svc, n2.Name)
	for i := 0; i < 20; i++ {
		if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_in_rotation", l, 0), metricIs("localtraffic_blackhole", l, 0)); err != nil {
			fatalf(t, "%ds with the LB IP on node-2's lo, nothing routed there: %v", i, err)
		}
		time.Sleep(time.Second)
	}
	if err := c.RouteVia(ctx, n2.Name, lbIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, lbIP+":80")
	eventually(t, converge, "clients routed to node-2 keep arriving: paged", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_in_rotation", l, 1), metricIs("localtraffic_blackhole", l, 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "health_check_ignored"), 1))
	})
}
