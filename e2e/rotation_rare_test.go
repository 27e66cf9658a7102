package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The rare client's clock, shortened: the meter's quiet period (a pause that ends a run of arrivals; 2 minutes
// by default) and the loss hold (15 minutes by default) scaled down so the scenario takes a minute or two, in
// the same order as the defaults: attempts further apart than the quiet period, closer than the hold.
const (
	rareQuiet = 10 * time.Second
	rareHold  = 45 * time.Second
	rareEvery = 25 * time.Second
)

// TestRotationRareClientStaysPaged: a NodePort Service whose only replica is on node-1; a client with a short
// connect timeout tries node-2's NodePort (iptables mode, no replica) once every rareEvery, longer than the
// meter's quiet period, and is dropped every time. Each attempt ends its run of arrivals before the next one
// comes; without the loss hold the reason went back to no_traffic_seen between attempts (a warning), which
// restarted LocalTrafficBlackhole's for: every time, so it never fired. With the hold the reason stays
// traffic_lost, sampled every second across three attempts; once the client gives up, it ends after the hold.
func TestRotationRareClientStaysPaged(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-rare", "quotes", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace, "--arrivals.quiet-period="+rareQuiet.String(), "--rotation.loss-hold="+rareHold.String())
	l := svcLabels(svc, n2.Name)
	addr := nodePortAddr(n2, svc)
	eventually(t, converge, "node-2 drops the NodePort, nobody has tried it yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})

	attempt := func() time.Time {
		t.Helper()
		at := time.Now()
		if err := wantVerdict(c.Request(ctx, addr), cluster.Blackhole, "NodePort on node-2"); err != nil {
			fatalln(t, err)
		}
		return at
	}
	last := attempt()
	eventually(t, converge, "the first dropped attempt pages node-2", func() error {
		return expectMetrics(ctx, c, n2.Name,
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "traffic_lost"), 1),
			metricAbove("localtraffic_arrivals_total", cluster.Labels{"node": n2.Name, "kind": "node_port", "ip_family": ipv4}, 0))
	})
	for i := 0; i < 3; i++ {
		// Sampled every second until the next attempt: the run of arrivals ends rareQuiet after each attempt,
		// and the reason must not fall back meanwhile.
		for time.Since(last) < rareEvery {
			if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "traffic_lost"), 1)); err != nil {
				fatalf(t, "%s after dropped attempt %d (the meter's quiet period is %s): %v", time.Since(last).Round(time.Second), i+1, rareQuiet, err)
			}
			time.Sleep(time.Second)
		}
		last = attempt()
	}

	// The client gives up: the page ends once the hold has passed since its last attempt, and not before.
	var ended time.Duration
	eventually(t, rareHold+converge, "the hold ends after the last attempt", func() error {
		if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1)); err != nil {
			return err
		}
		ended = time.Since(last)
		return nil
	})
	if ended < rareHold-5*time.Second {
		errorf(t, "the reason fell back %s after the last dropped attempt, before the hold of %s", ended.Round(time.Second), rareHold)
	}
	t.Logf("traffic_lost held across 4 attempts %s apart; it ended %s after the last", rareEvery, ended.Round(time.Second))
}
