package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestVerdictNFTablesLocalEndpoints: on the nftables node, Local NodePort Services with one and with two
// local endpoints (the second dual-stack). kube-proxy v1.37 writes their DNATs straight into the local-…
// chain (a plain dnat for one endpoint, a numgen map for two) rather than jumping to endpoint-… chains.
// Real traffic is served by the node's own pods (both of them, for two); the exporter's
// rules_local_endpoints must equal the API's count per family, with no rules_mismatch.
func TestVerdictNFTablesLocalEndpoints(t *testing.T) {
	c := sharedCluster(t)
	requireDualStack(t, c)
	ctx := testContext(t)
	nft := nftablesNode(t, c)
	const ns = "e2e-nft-local"
	single := serviceSpec(t, c, ns, "single", corev1.ServiceTypeNodePort, nil)
	setEndpoints(t, c, single, ready(startPods(t, c, single, nft.Name, "node-1")...))
	double := serviceSpec(t, c, ns, "double", corev1.ServiceTypeNodePort, cluster.DualStack)
	setEndpoints(t, c, double, ready(startPods(t, c, double, nft.Name, nft.Name)...))

	for _, tc := range []struct {
		svc      *corev1.Service
		local    int
		families []string
	}{
		{single, 1, []string{ipv4}},
		{double, 2, []string{ipv4, ipv6}},
	} {
		eventually(t, converge, fmt.Sprintf("%s: %d local endpoints on %s", tc.svc.Name, tc.local, nft.Name), func() error {
			for _, f := range tc.families {
				if err := servedByAll(ctx, c, nft, tc.svc, corev1.IPFamily(f), tc.local); err != nil {
					return err
				}
			}
			l := svcLabels(tc.svc, nft.Name)
			checks := []func(cluster.Metrics) error{
				metricIs("localtraffic_local_endpoints", l, float64(tc.local)),
				metricIs("localtraffic_rules_mismatch", l, 0),
				metricIs("localtraffic_blackhole", l, 0),
			}
			for _, f := range tc.families {
				pl := familyPortLabels(tc.svc, nft.Name, f)
				checks = append(checks,
					metricIs("localtraffic_rules_drop", pl, 0),
					metricIs("localtraffic_rules_local_endpoints", pl, float64(tc.local)))
			}
			return expectMetrics(ctx, c, nft.Name, checks...)
		})
	}
}

// servedByAll sends requests to the Service's NodePort on n in family f until each of the want local pods
// has answered at least once (kube-proxy picks at random), and fails on anything else.
func servedByAll(ctx context.Context, c *cluster.Cluster, n *cluster.Node, svc *corev1.Service, f corev1.IPFamily, want int) error {
	seen := map[string]bool{}
	for i := 0; i < 20*want && len(seen) < want; i++ {
		r := c.Request(ctx, nodePortAddrOf(n, svc, f))
		if err := wantServedLocally(r, n.Name); err != nil {
			return fmt.Errorf("%s %s: %w", svc.Name, f, err)
		}
		seen[strings.TrimSpace(r.Body)] = true
	}
	if len(seen) < want {
		return fmt.Errorf("%s %s on %s: served by %v, want %d distinct local pods", svc.Name, f, n.Name, seen, want)
	}
	return nil
}
