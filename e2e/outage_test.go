package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// apiOutage is how long kube-apiserver stays down: long enough that client-go's own retry backoff would have
// grown to 30-60 s, so a prompt recovery afterwards is the exporter's doing.
const apiOutage = 40 * time.Second

// informerAges reads, per resource, time() minus localtraffic_informer_last_success_timestamp_seconds, and the
// sum of the list and watch error counters.
func informerAges(m cluster.Metrics, node string) (map[string]float64, float64, error) {
	ages := map[string]float64{}
	var errs float64
	for _, r := range []string{"services", "endpointslices", "nodes"} {
		ts, ok, err := m.Value("localtraffic_informer_last_success_timestamp_seconds", cluster.Labels{"node": node, "resource": r})
		if err != nil || !ok {
			return nil, 0, fmt.Errorf("last success of %s: present %v, %v", r, ok, err)
		}
		ages[r] = float64(time.Now().UnixNano())/1e9 - ts
		for _, name := range []string{"localtraffic_informer_list_total", "localtraffic_informer_watch_total"} {
			v, ok, err := m.Value(name, cluster.Labels{"node": node, "resource": r, "result": "error"})
			if err != nil || !ok {
				return nil, 0, fmt.Errorf("%s{resource=%q,result=\"error\"}: present %v, %v", name, r, ok, err)
			}
			errs += v
		}
	}
	return ages, errs, nil
}

// TestAPIServerOutage stops kube-apiserver for 40 s. Meanwhile every exporter keeps answering scrapes with its
// last known state, says how old that state is (the informers' last success stops, its age grows, list and
// watch errors count up), and real traffic still flows (kube-proxy keeps its rules too). When kube-apiserver
// returns, the informers resume without a restart: a Service created and an EndpointSlice changed right after
// show in the exporter's API view within seconds, and the verdict follows kube-proxy's new rules.
func TestAPIServerOutage(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n1, n2 := c.Node("node-1"), c.Node("node-2")
	stable := newService(t, c, "e2e-outage", "steady", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	moving := newService(t, c, "e2e-outage", "moving", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	setEndpoints(t, c, stable, ready(startPods(t, c, stable, n1.Name)...))
	movingPods := startPods(t, c, moving, n1.Name, n2.Name)
	setEndpoints(t, c, moving, ready(movingPods...))
	eventually(t, converge, "both Services served on node-1 before the outage", func() error {
		return errors.Join(
			wantServedLocally(c.Request(ctx, nodePortAddr(n1, stable)), n1.Name),
			wantServedLocally(c.Request(ctx, nodePortAddr(n1, moving)), n1.Name),
			expectMetrics(ctx, c, n1.Name,
				metricIs("localtraffic_local_endpoints", svcLabels(moving, n1.Name), 1),
				metricIs("localtraffic_blackhole", svcLabels(stable, n1.Name), 0)))
	})
	m, err := c.Metrics(ctx, n1.Name)
	if err != nil {
		fatalln(t, err)
	}
	_, errsBefore, err := informerAges(m, n1.Name)
	if err != nil {
		fatalln(t, err)
	}

	c.StopAPIServer()
	stopped := time.Now()
	t.Cleanup(func() {
		// Whatever happened, the next test gets its API server back.
		if err := c.StartAPIServer(testContext(t)); err != nil && err.Error() != "kube-apiserver already runs" {
			errorf(t, "restarting kube-apiserver: %v", err)
		}
	})
	var lastAges map[string]float64
	var lastErrs float64
	for time.Since(stopped) < apiOutage {
		time.Sleep(2 * time.Second)
		for _, n := range c.Nodes() {
			m, err := c.Metrics(ctx, n.Name)
			if err != nil {
				fatalf(t, "%s: scrape during the outage: %v", n.Name, err)
			}
			if err := errors.Join(
				// The last known state, still served.
				metricIs("localtraffic_informer_synced", cluster.Labels{"node": n.Name, "resource": "services"}, 1)(m),
				metricIs("localtraffic_local_endpoints", svcLabels(stable, n.Name), map[string]float64{n1.Name: 1}[n.Name])(m),
				metricIs("localtraffic_scrape_collector_success", cluster.Labels{"node": n.Name, "collector": "services"}, 1)(m),
			); err != nil {
				fatalf(t, "%s, %s into the outage: %v", n.Name, time.Since(stopped).Round(time.Second), err)
			}
			if n != n1 {
				continue
			}
			ages, errs, err := informerAges(m, n.Name)
			if err != nil {
				fatalln(t, err)
			}
			for r, age := range ages {
				// Nothing answered since the stop: the age is at least the time since (a second's slack for
				// the scrape and the clocks' rounding).
				if age < time.Since(stopped).Seconds()-1 {
					errorf(t, "%s: %s view %.1fs old, %.1fs into the outage", n.Name, r, age, time.Since(stopped).Seconds())
				}
				if lastAges != nil && age <= lastAges[r] {
					errorf(t, "%s: %s age did not grow: %.1f then %.1f", n.Name, r, lastAges[r], age)
				}
			}
			lastAges, lastErrs = ages, errs
		}
		if err := wantServedLocally(c.Request(ctx, nodePortAddr(n1, stable)), n1.Name); err != nil {
			errorf(t, "during the outage: %v", err) // kube-proxy keeps its rules: traffic must still flow
		}
	}
	t.Logf("after %s without kube-apiserver: node-1's view is %.0fs old (services), %.0f list/watch errors (%.0f before)",
		apiOutage, lastAges["services"], lastErrs, errsBefore)
	if lastErrs <= errsBefore {
		errorf(t, "list/watch error counters did not move during the outage: %.0f before, %.0f after", errsBefore, lastErrs)
	}

	if err := c.StartAPIServer(ctx); err != nil {
		fatalln(t, err)
	}
	changed := time.Now()
	created := newService(t, c, "e2e-outage", "created-after", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	setEndpoints(t, c, moving, ready(movingPods[1])) // only node-2 keeps an endpoint
	var seen time.Duration
	eventually(t, converge, "the exporter sees the changes made after kube-apiserver returned", func() error {
		err := expectMetrics(ctx, c, n1.Name,
			metricIs("localtraffic_local_endpoints", svcLabels(moving, n1.Name), 0),
			metricIs("localtraffic_local_endpoints", svcLabels(created, n1.Name), 0),
			func(m cluster.Metrics) error {
				if len(m.Series("localtraffic_service_info", svcLabels(created, n1.Name))) != 1 {
					return fmt.Errorf("no service_info for %s", created.Name)
				}
				return nil
			})
		if err == nil {
			seen = time.Since(changed)
		}
		return err
	})
	// Measured, and bounded only by what "within seconds" must mean: client-go's backoff alone would be 30-60 s.
	t.Logf("changes visible in node-1's API view %.1fs after they were made", seen.Seconds())
	if seen > 20*time.Second {
		errorf(t, "changes took %s to show after kube-apiserver returned, want seconds", seen.Round(time.Second))
	}
	// kube-proxy recovers on client-go's own backoff (30 to 60 s after a 40 s outage), then syncs: allow twice
	// the usual convergence.
	eventually(t, 2*converge, "verdict and real traffic follow kube-proxy's new rules", func() error {
		return errors.Join(
			wantVerdict(c.Request(ctx, nodePortAddr(n1, moving)), cluster.Blackhole, "moving via node-1"),
			wantServedLocally(c.Request(ctx, nodePortAddr(n2, moving)), n2.Name),
			expectMetrics(ctx, c, n1.Name, metricIs("localtraffic_blackhole", svcLabels(moving, n1.Name), 1)))
	})
	t.Logf("verdict matched real traffic %.1fs after the change (kube-proxy's own recovery included)", time.Since(changed).Seconds())
	m, err = c.Metrics(ctx, n1.Name)
	if err != nil {
		fatalln(t, err)
	}
	// The services informer heard from kube-apiserver after it returned (a second's slack for the scrape and the
	// clocks' rounding). Its age keeps growing while no Service changes, so how long kube-proxy took to recover
	// must not count against it.
	if ages, _, err := informerAges(m, n1.Name); err != nil || ages["services"] > time.Since(changed).Seconds()+1 {
		errorf(t, "after the return the services view is %v s old, older than kube-apiserver's return %.0fs ago (%v)",
			ages["services"], time.Since(changed).Seconds(), err)
	}
	// The outage reached every node's kube-proxy: the test hands the next one a cluster whose kube-proxies all
	// follow the API again (each drops the moving Service's NodePort but node-2), not one still backing off.
	eventually(t, 4*converge, "every node's kube-proxy follows the API again", func() error {
		var errs []error
		for _, n := range c.Nodes() {
			if n.Name == n2.Name {
				continue
			}
			errs = append(errs, wantVerdict(c.Request(ctx, nodePortAddr(n, moving)), cluster.Blackhole, "moving via "+n.Name))
		}
		return errors.Join(errs...)
	})
}
