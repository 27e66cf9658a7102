package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestAnnouncerKubeVIPStaleAnnotation: kube-vip in BGP mode writes kube-vip.io/vipHost on the Service when a
// node takes it, and leaves it there after that node withdraws its route. Here the annotation names node-2,
// which has no replica, while the route sends the load balancer IP to node-1, which serves the clients. An
// exporter on node-2 with a 20 s quiet period first pages announced_here (its meter has not watched the address
// for a quiet period yet), then, nothing arriving, stops paging: the annotation alone, contradicted by the
// node's arrivals, no longer puts the node in rotation. Before the change it paged for as long as the
// annotation stayed. Then the route comes back to node-2 (kube-vip advertises from it again): the clients'
// repeated attempts end the silence and the page returns within seconds.
func TestAnnouncerKubeVIPStaleAnnotation(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const (
		lbIP   = "192.0.2.153"
		named  = "node-2"
		port   = 9751
		quiet  = 20 * time.Second
		margin = 10 * time.Second
	)
	svc := serviceSpec(t, c, "e2e-kubevip-stale", "vip", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, "node-1", lbIP); err != nil {
		fatalln(t, err)
	}
	// kube-vip's record as it writes it: the node's name in the annotation (the address on no interface).
	if err := annotated(c, "kube_vip", "kube-vip.io/vipHost", func(node, _ string) string { return node }).hold(ctx, svc, named); err != nil {
		fatalln(t, err)
	}
	n := c.Node(named)
	if err := n.StartExporterOn(ctx, port, "--arrivals.quiet-period="+quiet.String()); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { n.StopExporterOn(port) })
	started := time.Now()
	keepSending(t, c, lbIP+":80")
	scrape := func(checks ...func(cluster.Metrics) error) error {
		return expectMetricsOn(ctx, c, named, port, checks...)
	}
	paged := func() error {
		return scrape(metricIs("localtraffic_blackhole", svcLabels(svc, named), 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, named, "announced_here"), 1))
	}
	eventually(t, converge, "node-2 named by the annotation, its meter not yet watching for a quiet period: announced_here", func() error {
		if err := wantServedLocally(c.Request(ctx, lbIP+":80"), "node-1"); err != nil {
			return err
		}
		return paged()
	})
	// Nothing arrives at node-2: a quiet period after its meter began watching, the annotation is contradicted.
	eventually(t, time.Until(started.Add(quiet+margin)), "node-2 silent for the quiet period: no page", func() error {
		return scrape(metricIs("localtraffic_blackhole", svcLabels(svc, named), 0))
	})
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if err := scrape(metricIs("localtraffic_blackhole", svcLabels(svc, named), 0)); err != nil {
			fatalf(t, "the stale annotation paged again with nothing arriving: %v", err)
		}
	}
	// kube-vip advertises from node-2 again: the clients' attempts reach it and are dropped.
	if err := c.RouteVia(ctx, named, lbIP); err != nil {
		fatalln(t, err)
	}
	eventually(t, announcedWithin+margin, "the clients' attempts at node-2 end the silence: announced_here", paged)
}
