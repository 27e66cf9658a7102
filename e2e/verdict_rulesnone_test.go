package e2e

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// apiOnlyPort is where the second exporter of TestVerdictRulesModeNoneAgrees listens.
const apiOnlyPort = 9747

// TestVerdictRulesModeNoneAgrees: beside each node's usual exporter (which reads kube-proxy's rules) a second
// one runs with --rules.mode=none and decides from the API view alone. For Local NodePort Services — one
// with endpoints on node-1 and node-2, one on node-3 only, and a dual-stack one whose node-2 pod lacks its
// IPv6 endpoint — real traffic says which nodes drop, and both exporters must give exactly that blackhole
// verdict on every node.
func TestVerdictRulesModeNoneAgrees(t *testing.T) {
	c := sharedCluster(t)
	requireDualStack(t, c)
	ctx := testContext(t)
	for _, n := range c.Nodes() {
		if err := n.StartExporterOn(ctx, apiOnlyPort, "--rules.mode=none"); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { n.StopExporterOn(apiOnlyPort) })
	}
	const ns = "e2e-rules-none"
	two := serviceSpec(t, c, ns, "two", corev1.ServiceTypeNodePort, nil)
	setEndpoints(t, c, two, ready(startPods(t, c, two, "node-1", "node-2")...))
	one := serviceSpec(t, c, ns, "one", corev1.ServiceTypeNodePort, nil)
	setEndpoints(t, c, one, ready(startPods(t, c, one, "node-3")...))
	ds := serviceSpec(t, c, ns, "ds", corev1.ServiceTypeNodePort, cluster.DualStack)
	dsPods := startPods(t, c, ds, "node-1", "node-2")
	setEndpoints(t, c, ds, []cluster.Endpoint{{Pod: dsPods[0]}, {Pod: dsPods[1], Families: []corev1.IPFamily{corev1.IPv4Protocol}}})

	for _, n := range c.Nodes() {
		eventually(t, converge, "both exporters agree with the traffic on "+n.Name, func() error {
			var errs []error
			for _, svc := range []*corev1.Service{two, one, ds} {
				drops := false
				families := []corev1.IPFamily{corev1.IPv4Protocol}
				if len(svc.Spec.IPFamilies) == 2 {
					families = svc.Spec.IPFamilies
				}
				for _, f := range families {
					b, err := trafficVerdict(c.Request(ctx, nodePortAddrOf(n, svc, f)), n.Name)
					if err != nil {
						return fmt.Errorf("%s %s: %w", svc.Name, f, err)
					}
					drops = drops || b
				}
				want := metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), boolGauge(drops))
				errs = append(errs, prefixed("rules exporter", expectMetrics(ctx, c, n.Name, want)))
				m, err := c.MetricsOn(ctx, n.Name, apiOnlyPort)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				errs = append(errs, prefixed("--rules.mode=none exporter", errors.Join(want(m),
					m.Expect("localtraffic_blackhole_source_info", cluster.Labels{"node": n.Name, "source": "api"}, 1))))
			}
			return errors.Join(errs...)
		})
	}
}

// prefixed wraps a non-nil err with what produced it.
func prefixed(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
