package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestCadenceIndependentVerdicts: the same events give the same reasons and the same times however often
// Prometheus scrapes. Three exporters run side by side on node-2 over the same real traffic: one scraped every
// 2 s by two scrapers at once (two Prometheus servers), one scraped twice a minute apart (a long interval:
// longer than the quiet period that ends a run of arrivals), one not scraped at all until the end. A
// LoadBalancer Service's address is routed to node-2, whose local endpoint is then taken away: kube-proxy drops,
// the health check answers 503, and the client's connections keep arriving (a load balancer that ignores the
// health check). Past the grace window every exporter must page health_check_ignored, and must have found the
// address dropped at the same moment (their state files say when, within a few seconds of each other). An
// exporter that decided only when scraped forgot, over a gap longer than the quiet period, when the drop
// began, and paged late or not at all. The windows are shortened by flag (grace 15 s, quiet 20 s) so that the
// gaps outlast them in a minute.
func TestCadenceIndependentVerdicts(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	node := c.Node("node-2")
	const lbIP = "192.0.2.161"
	flags := []string{testGrace, "--arrivals.quiet-period=20s", "--rotation.loss-hold=1m"}
	svc := serviceSpec(t, c, "e2e-cadence", "web", corev1.ServiceTypeLoadBalancer, nil)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, node.Name, lbIP); err != nil {
		fatalln(t, err)
	}
	// dense: the usual exporter, with the windows shortened; sparse and unscraped beside it, on their own ports
	// and state files.
	restartExporter(t, c, node, flags...)
	const sparsePort, unscrapedPort = cluster.ExporterPort + 71, cluster.ExporterPort + 72
	for _, port := range []int{sparsePort, unscrapedPort} {
		if err := node.StartExporterOn(ctx, port, flags...); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { node.StopExporterOn(port) })
	}
	reason := func(m cluster.Metrics) string {
		for _, r := range []string{"health_check_ignored", "traffic_lost", "no_traffic_seen", "not_observed", "health_check_passing", "announced_here"} {
			if v, ok, _ := m.Value("localtraffic_blackhole_reason", reasonLabels(svc, node.Name, r)); ok && v == 1 {
				return r
			}
		}
		return "none"
	}
	// Before the drop every exporter sees node-2 serve.
	for _, port := range []int{cluster.ExporterPort, sparsePort, unscrapedPort} {
		eventually(t, converge, fmt.Sprintf("exporter :%d sees node-2 serve", port), func() error {
			m, err := c.MetricsOn(ctx, node.Name, port)
			if err != nil {
				return err
			}
			return m.Expect("localtraffic_local_endpoints", svcLabels(svc, node.Name), 1)
		})
	}

	// Two Prometheus servers scrape the dense exporter every 2 s from now on.
	scrapeCtx, stopScrapes := context.WithCancel(ctx)
	var scrapers sync.WaitGroup
	defer func() { stopScrapes(); scrapers.Wait() }()
	for range 2 {
		scrapers.Go(func() {
			for scrapeCtx.Err() == nil {
				_, _ = c.MetricsOn(scrapeCtx, node.Name, cluster.ExporterPort)
				select {
				case <-scrapeCtx.Done():
				case <-time.After(2 * time.Second):
				}
			}
		})
	}
	keepSending(t, c, lbIP+":80")
	time.Sleep(3 * time.Second) // attempts arrive while node-2 serves: a run that began before the drop
	dropped := time.Now()
	setEndpoints(t, c, svc, ready(pods[0])) // node-1's only: node-2 drops the address
	eventually(t, converge, "kube-proxy on node-2 drops the load balancer IP", func() error {
		code, _, err := healthCheck(ctx, c, node, svc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on node-2: %d, want 503", code)
		}
		return wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP via node-2")
	})
	// The sparse exporter is scraped once early on, then not for a minute.
	time.Sleep(5 * time.Second)
	if _, err := c.MetricsOn(ctx, node.Name, sparsePort); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "the dense exporter pages health_check_ignored", func() error {
		m, err := c.MetricsOn(ctx, node.Name, cluster.ExporterPort)
		if err != nil {
			return err
		}
		if r := reason(m); r != "health_check_ignored" {
			return fmt.Errorf("reason %s", r)
		}
		return nil
	})
	if wait := time.Until(dropped.Add(time.Minute)); wait > 0 {
		time.Sleep(wait) // both gaps now outlast the quiet period and the grace window
	}
	for _, port := range []int{cluster.ExporterPort, sparsePort, unscrapedPort} {
		m, err := c.MetricsOn(ctx, node.Name, port)
		if err != nil {
			fatalln(t, err)
		}
		if r := reason(m); r != "health_check_ignored" {
			errorf(t, "exporter :%d, scraped %s: reason %s, want health_check_ignored as the dense one's\n%s", port,
				map[int]string{cluster.ExporterPort: "every 2 s twice", sparsePort: "after a minute's gap", unscrapedPort: "first now"}[port],
				r, m.Grep(svc.Name))
		}
	}
	// The same times: each exporter's state file says when it found the address dropped.
	since := map[int]time.Time{}
	for _, port := range []int{cluster.ExporterPort, sparsePort, unscrapedPort} {
		eventually(t, 30*time.Second, fmt.Sprintf("exporter :%d's state file holds the drop", port), func() error {
			at, err := droppedSinceIn(node.ExporterStateFile(port), svc, lbIP)
			since[port] = at
			return err
		})
	}
	for port, at := range since {
		if d := at.Sub(since[cluster.ExporterPort]); d > 3*time.Second || d < -3*time.Second {
			errorf(t, "exporter :%d found the drop at %s, the dense one at %s: %s apart", port,
				at.Format(time.RFC3339Nano), since[cluster.ExporterPort].Format(time.RFC3339Nano), d)
		}
		if at.Before(dropped) || at.After(dropped.Add(20*time.Second)) {
			errorf(t, "exporter :%d found the drop at %s; the endpoint went at %s", port, at.Format(time.RFC3339Nano), dropped.Format(time.RFC3339Nano))
		}
	}
}

// droppedSinceIn reads, from an exporter's state file, when it found svc's load balancer IP dropped.
func droppedSinceIn(path string, svc *corev1.Service, ip string) (time.Time, error) {
	st, err := readStateFile(path)
	if err != nil {
		return time.Time{}, err
	}
	for _, d := range st.Dropped {
		if d.Namespace == svc.Namespace && d.Service == svc.Name && d.Kind == "load_balancer_ip" && d.Address == ip {
			return time.Unix(0, d.Since), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: no dropped-since time for %s", path, ip)
}
