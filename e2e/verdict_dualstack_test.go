package e2e

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestVerdictDualStackFamilyMissing: a dual-stack Local NodePort Service whose pods on node-2 (iptables) and
// node-4 (nftables) publish only their IPv4 endpoint. kube-proxy runs one proxier per family, each reading
// only its family's EndpointSlice: there IPv4 is served and IPv6 is dropped — real IPv4 and IPv6 packets show
// it. node-1 has both families' endpoints (served twice over), node-3 none (both families drop). The exporter
// must say blackhole where any family drops, report the families apart in the per-port rule series
// (ip_family), and see no rules_mismatch where both families agree with the API.
func TestVerdictDualStackFamilyMissing(t *testing.T) {
	c := sharedCluster(t)
	requireDualStack(t, c)
	ctx := testContext(t)
	svc := serviceSpec(t, c, "e2e-dualstack", "catalog", corev1.ServiceTypeNodePort, cluster.DualStack)
	if len(svc.Spec.ClusterIPs) != 2 {
		fatalf(t, "dual-stack Service got clusterIPs %v, want one per family", svc.Spec.ClusterIPs)
	}
	pods := startPods(t, c, svc, "node-1", "node-2", "node-4")
	onlyIPv4 := []corev1.IPFamily{corev1.IPv4Protocol}
	setEndpoints(t, c, svc, []cluster.Endpoint{
		{Pod: pods[0]},
		{Pod: pods[1], Families: onlyIPv4},
		{Pod: pods[2], Families: onlyIPv4},
	})
	// Per node and family: does it have a local endpoint of that family (else its proxier drops)?
	local := map[string]map[corev1.IPFamily]bool{
		"node-1": {corev1.IPv4Protocol: true, corev1.IPv6Protocol: true},
		"node-2": {corev1.IPv4Protocol: true},
		"node-3": {},
		"node-4": {corev1.IPv4Protocol: true},
	}
	for _, n := range c.Nodes() {
		eventually(t, converge, "dual-stack NodePort on "+n.Name, func() error {
			var errs []error
			anyDrop := false
			for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
				addr := nodePortAddrOf(n, svc, f)
				r := c.Request(ctx, addr)
				has := local[n.Name][f]
				if has {
					if err := wantServedLocally(r, n.Name); err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", addr, err))
					}
				} else {
					anyDrop = true
					errs = append(errs, wantVerdict(r, cluster.Blackhole, addr))
				}
			}
			if err := errors.Join(errs...); err != nil {
				return err // the cluster has not converged yet: the exporter is judged only on settled traffic
			}
			l := svcLabels(svc, n.Name)
			localEPs := 0.0 // the smallest family's count (docs/metrics.md)
			if local[n.Name][corev1.IPv4Protocol] && local[n.Name][corev1.IPv6Protocol] {
				localEPs = 1
			}
			checks := []func(cluster.Metrics) error{
				metricIs("localtraffic_blackhole", l, boolGauge(anyDrop)),
				metricIs("localtraffic_in_rotation", l, 1),
				metricIs("localtraffic_local_endpoints", l, localEPs),
				metricIs("localtraffic_has_local_endpoint", l, localEPs),
				// Each family's rules agree with that family's slice: no mismatch anywhere.
				metricIs("localtraffic_rules_mismatch", l, 0),
			}
			for _, f := range []string{ipv4, ipv6} {
				has := local[n.Name][corev1.IPFamily(f)]
				pl := familyPortLabels(svc, n.Name, f)
				checks = append(checks,
					metricIs("localtraffic_rules_drop", pl, boolGauge(!has)),
					metricIs("localtraffic_rules_local_endpoints", pl, boolGauge(has)))
				if !has && n.ProxyMode == cluster.IPTables {
					// The client's dropped SYNs were counted by that family's DROP rule.
					checks = append(checks, metricAbove("localtraffic_rules_dropped_packets_total", pl, 0))
				}
			}
			return expectMetrics(ctx, c, n.Name, checks...)
		})
	}
}
