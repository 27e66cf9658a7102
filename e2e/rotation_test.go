package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// Rotation from evidence (docs/rotation.md): a node is in rotation when the declared model says so or
// when the arrivals meter sees new connection attempts keep arriving past --rotation.grace. The exporters under
// test run with a short grace (testGrace) so a scenario takes seconds, not the default two minutes.
const testGrace = "--rotation.grace=15s"

// keepSending makes the outside client open new connections to each addr, one after another with a pause of
// about a second between them (clientPause: irregular, as real clients are), until the test ends: a router or
// load balancer that keeps forwarding clients. Each attempt a node drops times out after
// cluster.ConnectTimeout; what is answered returns at once. Each addr has its own sender, so its cadence is
// its own: a sender that waited for every address in turn would reach each at the clock-like cadence of the
// whole round, which the meter takes for a health checker (docs/rotation.md).
func keepSending(t *testing.T, c *cluster.Cluster, addrs ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for k, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; ; i++ {
				c.Request(ctx, a)
				select {
				case <-ctx.Done():
					return
				case <-time.After(clientPause(i)):
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func reasonLabels(svc *corev1.Service, node, reason string) cluster.Labels {
	l := svcLabels(svc, node)
	out := maps.Clone(l)
	out["reason"] = reason
	return out
}

// TestRotationLoadBalancerIgnoresHealthCheck: a LoadBalancer Service with its only endpoint on node-1 and two
// ingress IPs, one routed to node-2 (iptables) and one to node-4 (nftables), as a router in front of a load
// balancer that does not honour healthCheckNodePort would keep sending. Both nodes answer 503 on the health
// check (declared out of rotation: no page from the declared model alone, and nothing at all in nftables mode, whose
// drops carry no counters). The client's new connections keep arriving and are dropped: past the grace window
// both nodes are in rotation, blackholed, with reason health_check_ignored.
func TestRotationLoadBalancerIgnoresHealthCheck(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	lbIPs := map[string]string{"node-2": "192.0.2.90", "node-4": "192.0.2.94"}
	svc := serviceSpec(t, c, "e2e-rotation-ignored", "checkout", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name,
		corev1.LoadBalancerIngress{IP: lbIPs["node-2"]}, corev1.LoadBalancerIngress{IP: lbIPs["node-4"]}); err != nil {
		fatalln(t, err)
	}
	var addrs []string
	for node, ip := range lbIPs {
		restartExporter(t, c, c.Node(node), testGrace)
		t.Cleanup(func() { _ = c.Unroute(context.Background(), ip) })
		if err := c.RouteVia(ctx, node, ip); err != nil {
			fatalln(t, err)
		}
		addrs = append(addrs, ip+":80")
	}
	// Before any client: drained by the 503, as declared.
	for node := range lbIPs {
		n := c.Node(node)
		eventually(t, converge, node+" drained by its health check", func() error {
			code, _, err := healthCheck(ctx, c, n, svc)
			if err != nil {
				return err
			}
			if code != http.StatusServiceUnavailable {
				return fmt.Errorf("health check on %s: %d, want 503", node, code)
			}
			return expectMetrics(ctx, c, node, metricIs("localtraffic_in_rotation", svcLabels(svc, node), 0),
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 0))
		})
	}
	keepSending(t, c, addrs...)
	for node, ip := range lbIPs {
		eventually(t, converge, node+" paged: the load balancer ignores its health check", func() error {
			if err := wantVerdict(c.Request(ctx, ip+":80"), cluster.Blackhole, "LB IP via "+node); err != nil {
				return err
			}
			return expectMetrics(ctx, c, node,
				metricIs("localtraffic_in_rotation", svcLabels(svc, node), 1),
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "health_check_ignored"), 1),
				metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "load_balancer_ip", "ip_family": ipv4}, 0))
		})
	}
	// node-1 serves; node-3 receives nothing and stays drained.
	if err := expectMetrics(ctx, c, "node-3", metricIs("localtraffic_blackhole", svcLabels(svc, "node-3"), 0)); err != nil {
		errorln(t, err)
	}
}

// TestRotationLoadBalancerIPHeldOnNode: an announcer (kube-vip in ARP mode, keepalived) holds the load balancer
// IP on node-3, which has no replica. node-3 answers 503 on its health check, yet the network delivers every
// packet of the address to it: in rotation for that IP whatever the health check says. With no client yet the
// blackhole is a warning (no_traffic_seen); once clients arrive, traffic_lost. node-2, which does not hold it,
// is never paged.
func TestRotationLoadBalancerIPHeldOnNode(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.91"
	n3 := c.Node("node-3")
	svc := serviceSpec(t, c, "e2e-rotation-held", "ledger", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
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
	l := svcLabels(svc, "node-3")
	eventually(t, converge, "node-3 holds the LB IP, no client yet", func() error {
		code, _, err := healthCheck(ctx, c, n3, svc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-3: %d, want 503", code)
		}
		return errors.Join(
			expectMetrics(ctx, c, "node-3", metricIs("localtraffic_in_rotation", l, 1),
				metricIs("localtraffic_blackhole", l, 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-3", "no_traffic_seen"), 1)),
			expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole", svcLabels(svc, "node-2"), 0)))
	})
	if err := c.RouteVia(ctx, "node-3", lbIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, lbIP+":80")
	eventually(t, converge, "clients reach node-3 and are dropped", func() error {
		if err := wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP held on node-3"); err != nil {
			return err
		}
		return errors.Join(
			expectMetrics(ctx, c, "node-3", metricIs("localtraffic_blackhole", l, 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-3", "traffic_lost"), 1)),
			expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole", svcLabels(svc, "node-2"), 0)))
	})
}

// TestRotationIPVSDummyHoldsExternalIPEverywhere: as IPVS mode (kube-ipvs0) and kube-router (kube-dummy-if) do,
// every node binds the externalIP to a NOARP dummy link; the network routes it to node-2 alone. Bound is not
// assigned: only node-2, where the client's connections really arrive (and are dropped past the grace window),
// is paged; node-3 and node-4 hold the address on their dummy, drop it in their rules, and are never in
// rotation (a rule-only verdict would page every node holding it).
func TestRotationIPVSDummyHoldsExternalIPEverywhere(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.92"
	svc := serviceSpec(t, c, "e2e-rotation-ipvs", "reports", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	for _, n := range c.Nodes() {
		// kube-proxy's IPVS mode creates kube-ipvs0 as a dummy link (NOARP). This kernel has no dummy driver
		// (no module to load in the test's container), so a NOARP veth of that name, with its peer in the same
		// namespace, stands in: an address bound to a link nothing routes to the node.
		if _, err := n.Exec(ctx, "ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kube-ipvs0-peer"); err != nil {
			fatalf(t, "%s: %v", n.Name, err)
		}
		for _, args := range [][]string{{"link", "set", "kube-ipvs0", "arp", "off", "up"}, {"link", "set", "kube-ipvs0-peer", "arp", "off", "up"}} {
			if _, err := n.Exec(ctx, "ip", args...); err != nil {
				fatalf(t, "%s: %v", n.Name, err)
			}
		}
		t.Cleanup(func() {
			if _, err := n.Exec(context.Background(), "ip", "link", "del", "kube-ipvs0"); err != nil {
				errorf(t, "restore %s: %v", n.Name, err)
			}
		})
		if _, err := n.Exec(ctx, "ip", "addr", "add", extIP+"/32", "dev", "kube-ipvs0"); err != nil {
			fatalf(t, "%s: %v", n.Name, err)
		}
	}
	restartExporter(t, c, c.Node("node-2"), testGrace)
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })
	if err := c.RouteVia(ctx, "node-2", extIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, extIP+":80")
	eventually(t, converge, "only node-2, where the address is routed, is paged", func() error {
		if err := wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-2"); err != nil {
			return err
		}
		errs := []error{expectMetrics(ctx, c, "node-2",
			metricIs("localtraffic_blackhole", svcLabels(svc, "node-2"), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-2", "traffic_lost"), 1))}
		for _, node := range []string{"node-3", "node-4"} {
			checks := []func(cluster.Metrics) error{
				metricIs("localtraffic_in_rotation", svcLabels(svc, node), 0),
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 0),
			}
			if c.Node(node).ProxyMode == cluster.IPTables {
				// It does drop the address: only rotation keeps it from paging.
				checks = append(checks, metricIs("localtraffic_rules_drop", portLabels(svc, node), 1))
			}
			errs = append(errs, expectMetrics(ctx, c, node, checks...))
		}
		return errors.Join(errs...)
	})
}

// TestRotationNodePortAddressesLeaveNodeOut: kube-proxy on node-4 (nftables) runs with --nodeport-addresses
// that match none of its addresses, so it serves no NodePort there: a client is refused, not dropped. The
// exporters of node-2 and node-4 judge drops from the API view (--rules.mode=none, as in IPVS mode), which says
// both lack a local endpoint: node-2 is a blackhole; node-4, with no NodePort address in kube-proxy's /configz,
// is out of rotation. (In iptables mode kube-proxy's no-endpoint filter rule matches every local address,
// whatever --nodeport-addresses says, so a client there times out; but it would not be served with an endpoint
// either: no NodePort is DNATed on that address. Not this node's Local blackhole.)
func TestRotationNodePortAddressesLeaveNodeOut(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2, n4 := c.Node("node-2"), nftablesNode(t, c)
	svc := serviceSpec(t, c, "e2e-rotation-npa", "search", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartKubeProxy(t, c, n4, cluster.KubeProxyOptions{ExtraArgs: []string{"--nodeport-addresses=198.18.0.0/24,fd00:198:18::/64"}})
	t.Cleanup(func() { restartKubeProxy(t, c, n4, cluster.KubeProxyOptions{}) })
	restartExporter(t, c, n2, "--rules.mode=none")
	restartExporter(t, c, n4, "--rules.mode=none")
	eventually(t, converge, n4.Name+" serves no NodePort; node-2 drops it", func() error {
		return errors.Join(
			wantVerdict(c.Request(ctx, nodePortAddr(n4, svc)), cluster.Refused, "NodePort on "+n4.Name),
			wantVerdict(c.Request(ctx, nodePortAddr(n2, svc)), cluster.Blackhole, "NodePort on node-2"),
			expectMetrics(ctx, c, n4.Name,
				metricIs("localtraffic_in_rotation", svcLabels(svc, n4.Name), 0),
				metricIs("localtraffic_blackhole", svcLabels(svc, n4.Name), 0)),
			expectMetrics(ctx, c, "node-2", metricIs("localtraffic_blackhole", svcLabels(svc, "node-2"), 1)))
	})
}

// TestRotationTrafficPortHealthCheckerNoPage: the Service's load balancer checks the traffic port (AWS
// healthcheck-port: traffic-port), so its prober opens a connection to every node's NodePort every second or
// two, and no client sends anything. node-2 has no replica and drops the probes, which is how the load
// balancer drains it: those SYNs are health checks, not lost traffic. The meter counts them (arrivals at the
// NodePort), and well past the grace window node-2 is still out of rotation. Control: without the annotation,
// the same probes are a load balancer that ignores healthCheckNodePort, and node-2 is paged.
func TestRotationTrafficPortHealthCheckerNoPage(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const annotation = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-trafficport", "catalog", corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
		s.Annotations = map[string]string{annotation: "traffic-port"}
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	var probes []string
	for _, n := range c.Nodes() {
		probes = append(probes, nodePortAddr(n, svc))
	}
	keepSending(t, c, probes...)

	// Wait until the meter has seen the probes arrive for three grace windows since node-2 started dropping.
	l := svcLabels(svc, "node-2")
	arrivals := cluster.Labels{"node": "node-2", "kind": "node_port", "ip_family": ipv4}
	start := time.Now()
	eventually(t, converge+time.Minute, "probes arrive at node-2 for three grace windows", func() error {
		if err := expectMetrics(ctx, c, "node-2", metricAbove("localtraffic_arrivals_total", arrivals, 0)); err != nil {
			return err
		}
		if time.Since(start) < 45*time.Second {
			return errors.New("probes arriving, waiting past the grace window")
		}
		return nil
	})
	if err := expectMetrics(ctx, c, "node-2",
		metricIs("localtraffic_in_rotation", l, 0),
		metricIs("localtraffic_blackhole", l, 0),
		metricIs("localtraffic_rules_drop", portLabels(svc, "node-2"), 1)); err != nil {
		fatalf(t, "traffic-port probes past grace: %v", err)
	}

	// Control: the same probes, no annotation: arrivals past grace on a node answering 503.
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, annotation))
	if _, err := c.Admin().CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "without the annotation the probes page node-2", func() error {
		return expectMetrics(ctx, c, "node-2",
			metricIs("localtraffic_blackhole", l, 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-2", "health_check_ignored"), 1))
	})
}

// TestRotationLoadBalancerHonoursHealthCheckDuringDrain: a load balancer that honours the health check. The LB
// IP is routed to node-2 while node-2 serves it, and the client keeps connecting. node-2's only endpoint goes
// away: its health check answers 503, and a few seconds later (well within the grace window, as a real load
// balancer's interval × threshold) the load balancer deregisters it and sends node-1 instead. The connections
// node-2 dropped meanwhile were arriving for less than the grace window since the drop: node-2 is never in
// rotation, never paged, sampled every second for three grace windows.
func TestRotationLoadBalancerHonoursHealthCheckDuringDrain(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const lbIP = "192.0.2.93"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-drain", "orders", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	restartExporter(t, c, n2, testGrace)
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, n2.Name, lbIP); err != nil {
		fatalln(t, err)
	}
	keepSending(t, c, lbIP+":80")
	l := svcLabels(svc, n2.Name)
	eventually(t, converge, "node-2 serves the LB IP", func() error {
		return errors.Join(wantServedLocally(c.Request(ctx, lbIP+":80"), n2.Name),
			expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_in_rotation", l, 1), metricIs("localtraffic_blackhole", l, 0)))
	})

	// The drain: node-2 loses its endpoint and answers 503; the load balancer takes it out after a few checks.
	setEndpoints(t, c, svc, ready(pods[0]))
	eventually(t, converge, "node-2's health check answers 503 and it drops", func() error {
		code, _, err := healthCheck(ctx, c, n2, svc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-2: %d, want 503", code)
		}
		return wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP via node-2 after the drain")
	})
	time.Sleep(5 * time.Second) // the load balancer's interval × unhealthy threshold, shortened
	if err := c.RouteVia(ctx, "node-1", lbIP); err != nil {
		fatalln(t, err)
	}
	for i := 0; i < 45; i++ {
		if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 0), metricIs("localtraffic_in_rotation", l, 0)); err != nil {
			fatalf(t, "%ds after the load balancer deregistered node-2: %v", i, err)
		}
		time.Sleep(time.Second)
	}
	if err := expectMetrics(ctx, c, n2.Name,
		metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": n2.Name, "kind": "load_balancer_ip", "ip_family": ipv4}, 0)); err != nil {
		errorf(t, "the meter saw none of the client's connections: %v", err)
	}
}

// TestRotationBusyClusterSparseClients: kube-proxy on every node resyncs about every second (another Service's
// endpoints flip readiness each second), which rewrites its rules and resets iptables' drop counters, and a
// client opens one connection every 5 seconds to an externalIP routed to node-2 (iptables) and another routed
// to node-4 (nftables, whose drops carry no counters at all). Neither node holds its address; only the arrivals
// meter sees the connections: both nodes are paged, traffic_lost.
func TestRotationBusyClusterSparseClients(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	extIPs := map[string]string{"node-2": "192.0.2.95", "node-4": "192.0.2.96"}
	svc := serviceSpec(t, c, "e2e-rotation-busy", "billing", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIPs["node-2"], extIPs["node-4"]}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))

	churn := serviceSpec(t, c, "e2e-rotation-busy", "churn", corev1.ServiceTypeNodePort, nil)
	churnPods := startPods(t, c, churn, "node-3")
	churnCtx, stopChurn := context.WithCancel(context.Background())
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		for i := 0; churnCtx.Err() == nil; i++ {
			_ = c.SetEndpoints(churnCtx, churn.Namespace, churn.Name, []cluster.Endpoint{{Pod: churnPods[0], Ready: cluster.Bool(i%2 == 0)}})
			select {
			case <-churnCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		stopChurn()
		<-churnDone
	})

	var addrs []string
	for node, ip := range extIPs {
		restartExporter(t, c, c.Node(node), testGrace)
		t.Cleanup(func() { _ = c.Unroute(context.Background(), ip) })
		if err := c.RouteVia(ctx, node, ip); err != nil {
			fatalln(t, err)
		}
		addrs = append(addrs, ip+":80")
	}
	sendCtx, stopSending := context.WithCancel(context.Background())
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for sendCtx.Err() == nil {
			for _, a := range addrs {
				c.Request(sendCtx, a)
			}
			select {
			case <-sendCtx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		stopSending()
		<-sendDone
	})
	for node := range extIPs {
		eventually(t, converge+time.Minute, node+" paged for one connection every 5s in a busy cluster", func() error {
			return expectMetrics(ctx, c, node,
				metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, "traffic_lost"), 1))
		})
	}
	if err := expectMetrics(ctx, c, "node-3", metricIs("localtraffic_blackhole", svcLabels(svc, "node-3"), 0)); err != nil {
		errorln(t, err)
	}
}

// TestRotationHealthCheckProberStops: a prober outside the cluster checks node-2's health check node port
// every second, as a load balancer does, then stops. While it probes, the meter counts the probes and
// localtraffic_health_check_last_probe_timestamp_seconds follows them; once it stops, the timestamp stands still
// (what LocalTrafficNodeNotHealthChecked reads: no outside probe for 10 minutes; its promtool test covers the
// rule). The exporter's own probes of the port, sent from the node itself, are never counted.
func TestRotationHealthCheckProberStops(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-prober", "inventory", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	probes := cluster.Labels{"node": n2.Name, "kind": "health_check", "ip_family": ipv4}
	lastProbe := func() (float64, error) {
		m, err := c.Metrics(ctx, n2.Name)
		if err != nil {
			return 0, err
		}
		v, ok, err := m.Value("localtraffic_health_check_last_probe_timestamp_seconds", cluster.Labels{"node": n2.Name})
		if err != nil || !ok {
			return 0, fmt.Errorf("no last probe time (present %v): %v", ok, err)
		}
		return v, nil
	}
	eventually(t, converge, "an outside probe is counted", func() error {
		code, _, err := healthCheck(ctx, c, n2, svc) // from the client: outside the node
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("health check on node-2: %d %v", code, err)
		}
		return expectMetrics(ctx, c, n2.Name, metricAbove("localtraffic_arrivals_total", probes, 0))
	})
	proberCtx, stopProber := context.WithCancel(context.Background())
	proberDone := make(chan struct{})
	go func() {
		defer close(proberDone)
		for proberCtx.Err() == nil {
			_, _, _ = healthCheck(proberCtx, c, n2, svc)
			select {
			case <-proberCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		stopProber()
		<-proberDone
	})
	first, err := lastProbe()
	if err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "the last probe time follows the prober", func() error {
		v, err := lastProbe()
		if err != nil {
			return err
		}
		if v <= first {
			return fmt.Errorf("last probe %v, not after %v", v, first)
		}
		return nil
	})
	stopProber()
	<-proberDone
	// Give the meter's ring time to hand over any probe still in flight (BlockTimeout 200ms) and the node model
	// time to take the meter's counts after it (at most once a second while arrivals come), then hold the
	// timestamp still over ten scrapes, while the exporter probes the port itself (from the node: not an
	// outside probe).
	time.Sleep(3 * time.Second)
	stopped, err := lastProbe()
	if err != nil {
		fatalln(t, err)
	}
	for range 10 {
		time.Sleep(time.Second)
		v, err := lastProbe()
		if err != nil {
			fatalln(t, err)
		}
		if v != stopped {
			fatalf(t, "last probe moved from %v to %v after the prober stopped", stopped, v)
		}
	}
}
