package e2e

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// defaultsPort is where TestSeriesBudgetLive's exporters with the default collectors listen.
const defaultsPort = 9748

// TestSeriesBudgetLive: exporters with their default flags (as the DaemonSet runs them) on the real cluster,
// beside the usual ones, for a Local NodePort Service and a Local LoadBalancer Service with their only
// endpoint on node-2. Once the verdicts have settled (node-1 blackholes the NodePort Service; the
// LoadBalancer Service's health check drains node-1 and keeps node-2), each node exports at most 4 series for
// the NodePort Service and 6 for the LoadBalancer one (docs/metrics.md, "Series budget"), the verdict's
// contract among them.
func TestSeriesBudgetLive(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	nodes := []string{"node-1", "node-2"}
	for _, name := range nodes {
		n := c.Node(name)
		if err := n.StartExporterOn(ctx, defaultsPort); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { n.StopExporterOn(defaultsPort) })
	}
	const ns = "e2e-series-budget"
	np := serviceSpec(t, c, ns, "np", corev1.ServiceTypeNodePort, nil)
	setEndpoints(t, c, np, ready(startPods(t, c, np, "node-2")...))
	lb := serviceSpec(t, c, ns, "lb", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, lb, ready(startPods(t, c, lb, "node-2")...))

	budget := map[string]int{np.Name: 4, lb.Name: 6}
	for _, name := range nodes {
		serving := name == "node-2"
		eventually(t, converge, "the default exporter's verdicts on "+name, func() error {
			m, err := c.MetricsOn(ctx, name, defaultsPort)
			if err != nil {
				return err
			}
			errs := []error{
				m.Expect("localtraffic_blackhole", svcLabels(np, name), boolGauge(!serving)),
				m.Expect("localtraffic_in_rotation", svcLabels(lb, name), boolGauge(serving)),
				m.Expect("localtraffic_health_check_up", svcLabels(lb, name), boolGauge(serving)),
				m.Expect("localtraffic_blackhole", svcLabels(lb, name), 0),
			}
			for svc, limit := range budget {
				if svc == np.Name && !serving {
					limit++ // localtraffic_blackhole_reason, while node-1 blackholes it (collector/budget_test.go)
				}
				got := seriesOf(m, ns, svc)
				if len(got) > limit {
					errs = append(errs, fmt.Errorf("%s/%s: %d series on %s, budget %d: %v", ns, svc, len(got), name, limit, got))
				}
			}
			return errors.Join(errs...)
		})
		m, err := c.MetricsOn(ctx, name, defaultsPort)
		if err != nil {
			fatalln(t, err)
		}
		for svc, limit := range budget {
			t.Logf("%s: %s/%s has %d series (budget %d): %v", name, ns, svc, len(seriesOf(m, ns, svc)), limit, seriesOf(m, ns, svc))
		}
	}
}

// seriesOf lists the metric names of every series m has for the Service ns/svc.
func seriesOf(m cluster.Metrics, ns, svc string) []string {
	var out []string
	for name, fam := range m.Families {
		for _, s := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["service"] == svc {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}
