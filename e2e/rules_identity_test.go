package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRulesIdentityStaleDNAT: kube-proxy is stopped on node-2 (iptables) and node-4
// (nftables), and every local pod of three NodePort/Local Services is replaced on the same node: the API lists
// the new pods, kube-proxy's rules still DNAT to the deleted ones. The rule layouts covered: iptables KUBE-SVL
// jumps to KUBE-SEP chains; nftables' plain "dnat to" (one endpoint), "numgen random mod 2 map" (two), and
// endpoint-* chains (session affinity). The count of local endpoints still agrees with the API (1 = 1, 2 = 2)
// and no drop rule exists, yet real requests to the NodePort time out: the exporter must say mismatch and (a
// NodePort is in rotation) blackhole, with every rule endpoint gone. kube-proxy restarted, the rules follow the
// API: served, no mismatch, no blackhole.
func TestRulesIdentityStaleDNAT(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	nodes := []*cluster.Node{c.Node("node-2"), nftablesNode(t, c)}
	if nodes[0].ProxyMode != cluster.IPTables || nodes[1].Name != "node-4" {
		fatalf(t, "want node-2 in iptables mode and node-4 in nftables mode, got %s and %s", nodes[0].ProxyMode, nodes[1].Name)
	}
	const ns = "e2e-stale-dnat"
	plain := serviceSpec(t, c, ns, "plain", corev1.ServiceTypeNodePort, nil)
	multi := serviceSpec(t, c, ns, "multi", corev1.ServiceTypeNodePort, nil)
	sticky := serviceSpec(t, c, ns, "sticky", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	perNode := map[string]int{plain.Name: 1, multi.Name: 2, sticky.Name: 1}
	svcs := []*corev1.Service{plain, multi, sticky}
	// podsOn starts each Service's pods on node-2 and node-4 and makes them its only endpoints.
	podsOn := func() {
		for _, svc := range svcs {
			var where []string
			for _, n := range nodes {
				for range perNode[svc.Name] {
					where = append(where, n.Name)
				}
			}
			setEndpoints(t, c, svc, ready(startPods(t, c, svc, where...)...))
		}
	}
	podsOn()
	agree := func(what string) {
		t.Helper()
		eventually(t, converge, what, func() error {
			var errs []error
			for _, n := range nodes {
				for _, svc := range svcs {
					errs = append(errs, servedByAll(ctx, c, n, svc, corev1.IPv4Protocol, perNode[svc.Name]))
					l, pl := svcLabels(svc, n.Name), familyPortLabels(svc, n.Name, ipv4)
					errs = append(errs, expectMetrics(ctx, c, n.Name,
						metricIs("localtraffic_rules_mismatch", l, 0),
						metricIs("localtraffic_blackhole", l, 0),
						metricIs("localtraffic_rules_local_endpoints", pl, float64(perNode[svc.Name])),
						metricIs("localtraffic_rules_gone_endpoints", pl, 0)))
				}
			}
			return errors.Join(errs...)
		})
	}
	agree("served by the local pods before kube-proxy stops")

	for _, n := range nodes {
		n.StopKubeProxy()
		t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	}
	// Replace every pod on the same nodes: delete the old ones, start new ones (new addresses), and point the
	// EndpointSlices at them, as a Deployment's rollout does.
	for _, svc := range svcs {
		for i := range 2 * perNode[svc.Name] {
			if err := c.DeletePod(ctx, svc.Namespace, fmt.Sprintf("%s-%d", svc.Name, i)); err != nil {
				fatalln(t, err)
			}
		}
	}
	podsOn()

	// The exporter calls the endpoints gone only once its API view has heard from the API server since it first
	// read the rules that way (a watch event or bookmark: the API server sends a bookmark about every minute).
	eventually(t, converge+time.Minute, "stale DNAT to the deleted pods: requests time out, the exporter says so", func() error {
		var errs []error
		for _, n := range nodes {
			for _, svc := range svcs {
				r := c.Request(ctx, nodePortAddr(n, svc))
				errs = append(errs, wantVerdict(r, cluster.Blackhole, fmt.Sprintf("%s NodePort on %s (stale DNAT)", svc.Name, n.Name)))
				l, pl := svcLabels(svc, n.Name), familyPortLabels(svc, n.Name, ipv4)
				errs = append(errs, expectMetrics(ctx, c, n.Name,
					// The API: one (two) ready local endpoints, as before; the rules: as many, and no drop.
					metricIs("localtraffic_local_endpoints", l, float64(perNode[svc.Name])),
					metricIs("localtraffic_rules_local_endpoints", pl, float64(perNode[svc.Name])),
					metricIs("localtraffic_rules_drop", pl, 0),
					// By identity: every endpoint the rules send to is gone.
					metricIs("localtraffic_rules_gone_endpoints", pl, float64(perNode[svc.Name])),
					metricIs("localtraffic_rules_mismatch", l, 1),
					metricIs("localtraffic_in_rotation", l, 1),
					metricIs("localtraffic_blackhole", l, 1)))
			}
		}
		return errors.Join(errs...)
	})

	for _, n := range nodes {
		restartKubeProxy(t, c, n, cluster.KubeProxyOptions{})
	}
	agree("kube-proxy restarted: the rules follow the API again")
}
