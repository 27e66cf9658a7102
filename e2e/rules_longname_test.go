package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRulesIdentityLongNameNFT: two Services whose "namespace/name:port" is 143 bytes — a
// 63-character namespace and name and a 15-character port name, all valid — with their only endpoint on node-1.
// kube-proxy v1.37.2 in nftables mode (node-4) cuts its element comments to nftables' 128 bytes, so the comment
// of their no-endpoint-* elements no longer names the port. One Service is a NodePort (no-endpoint-nodeports),
// the other a ClusterIP Service whose only way in is an externalIP held on node-4's lo (no-endpoint-services).
// Real requests to node-4 time out; node-4's exporter must see each drop (by the element's key) and say
// blackhole, with no mismatch. node-1 serves both.
func TestRulesIdentityLongNameNFT(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n4 := nftablesNode(t, c)
	ns := "e2e-long-names-" + strings.Repeat("n", 63-len("e2e-long-names-"))
	const port = "http-metrics-01"
	const extIP = "192.0.2.121"
	long := func(name string) string { return name + "-" + strings.Repeat("s", 62-len(name)) }
	withLongPort := func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: port, Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(backendPort)}}
	}
	np := serviceSpec(t, c, ns, long("np"), corev1.ServiceTypeNodePort, withLongPort)
	ext := serviceSpec(t, c, ns, long("ext"), corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		withLongPort(s)
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	for _, svc := range []*corev1.Service{np, ext} {
		if n := len(svc.Namespace + "/" + svc.Name + ":" + port); n != 143 {
			fatalf(t, "%s/%s:%s is %d bytes, want 143", svc.Namespace, svc.Name, port, n)
		}
		setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	}
	if err := n4.AddAddress(ctx, extIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Unroute(context.Background(), extIP)
		if err := n4.DelAddress(context.Background(), extIP); err != nil {
			errorf(t, "restore node-4: %v", err)
		}
	})
	labels := func(svc *corev1.Service) cluster.Labels {
		return cluster.Labels{"node": n4.Name, "namespace": svc.Namespace, "service": svc.Name, "port": port, "ip_family": ipv4}
	}

	eventually(t, converge, "node-4 drops both long-named Services, and says so", func() error {
		if err := c.RouteVia(ctx, n4.Name, extIP); err != nil {
			return err
		}
		var errs []error
		// The comments really are cut: the rules prove the premise.
		rules, err := n4.Exec(ctx, "nft", "list", "map", "ip", "kube-proxy", "no-endpoint-nodeports")
		if err != nil {
			return err
		}
		if full := np.Namespace + "/" + np.Name + ":" + port; strings.Contains(rules, full) || !strings.Contains(rules, full[:128]) {
			errs = append(errs, errors.New("no-endpoint-nodeports does not hold the NodePort's comment cut at 128 bytes:\n"+rules))
		}
		errs = append(errs,
			wantVerdict(c.Request(ctx, nodePortAddr(n4, np)), cluster.Blackhole, "NodePort on node-4"),
			wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-4"),
			wantServedLocally(c.Request(ctx, nodePortAddr(c.Node("node-1"), np)), "node-1"))
		for _, svc := range []*corev1.Service{np, ext} {
			l := svcLabels(svc, n4.Name)
			errs = append(errs, expectMetrics(ctx, c, n4.Name,
				metricIs("localtraffic_rules_drop", labels(svc), 1),
				metricIs("localtraffic_rules_mismatch", l, 0),
				metricIs("localtraffic_in_rotation", l, 1),
				metricIs("localtraffic_blackhole", l, 1)))
		}
		return errors.Join(errs...)
	})
}
