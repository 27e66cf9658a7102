package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// wallClock steps the machine's wall clock (CLOCK_REALTIME) ahead of the true time and back to it, as NTP or an
// operator's `date -s` does. The true time is the wall clock when it was made plus the monotonic time since,
// which no step moves. It never sets the clock behind the true time: certificates issued before would then not
// be valid yet.
type wallClock struct {
	origin time.Time // carries Go's monotonic reading
}

// newWallClock returns a wallClock whose cleanup sets the wall clock back to the true time, whatever the test
// did to it.
func newWallClock(t *testing.T) *wallClock {
	t.Helper()
	w := &wallClock{origin: time.Now()}
	t.Cleanup(func() {
		if err := w.set(0); err != nil {
			errorf(t, "wall clock not set back to the true time: %v", err)
		}
	})
	return w
}

// trueTime is the time no step moved: the wall clock at the start plus the monotonic time since.
func (w *wallClock) trueTime() time.Time { return w.origin.Add(time.Since(w.origin)) }

// set sets the wall clock to the true time plus ahead (0: the true time).
func (w *wallClock) set(ahead time.Duration) error {
	if ahead < 0 {
		return fmt.Errorf("wall clock: %s behind the true time is not allowed", -ahead)
	}
	ts := unix.NsecToTimespec(w.trueTime().Add(ahead).UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("clock_settime(CLOCK_REALTIME): %w", err)
	}
	return nil
}

// stepLogged matches the line a restored exporter logs when the wall clock was stepped since its state file's
// write, capturing the step.
var stepLogged = regexp.MustCompile(`the wall clock was stepped since the state file was written[^\n]* step=(-?[0-9][^ \n]*)`)

// TestRestartThroughWallClockSteps: a page outlives an exporter restart across which the node's wall clock was
// stepped (NTP correcting a drifted node, an operator's `date -s`), forward and back. node-2 (iptables) and node-3
// (nftables) each receive a load balancer IP of their own, whose Service's only replica is on node-1: the outside
// client keeps sending past the grace window although their health checks answer 503, and both page
// health_check_ignored, a page that needs the memory of how long attempts have kept arriving. Each exporter is
// killed (SIGKILL) once its state file holds the page, the machine's wall clock is stepped 3 minutes ahead
// (more than the 2-minute quiet period), and each restarted exporter must report health_check_ignored at the
// first scrape that knows the Service, its file restored, and log the step. Then, the file written again by the
// exporters on the stepped clock, they are killed, the clock set back 3 minutes to the true time, and the same
// must hold. Without the boot clock in the state file the forward step ages the runs past the quiet period and
// they are dropped on load: the first scrape has no page and logs no step. It steps the machine's clock, so
// run-e2e.sh runs it alone, after the shards.
func TestRestartThroughWallClockSteps(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	c, err := cluster.Up(ctx, cluster.Config{
		Name: "clock",
		Nodes: []cluster.NodeConfig{{Name: "node-1", ProxyMode: cluster.IPTables}, {Name: "node-2", ProxyMode: cluster.IPTables},
			{Name: "node-3", ProxyMode: cluster.NFTables}},
		StartExporters: true,
		ExporterArgs:   append(everySeries(), testGrace),
		Log:            os.Stderr,
	})
	if err != nil {
		fatalf(t, "cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	clock := newWallClock(t)
	droppers := []*cluster.Node{c.Node("node-2"), c.Node("node-3")}
	lbs := map[string]*corev1.Service{}
	var addrs []string
	for i, n := range droppers {
		lbIP := fmt.Sprintf("192.0.2.%d", 140+i)
		lb := serviceSpec(t, c, "e2e-clock", "checkout-"+n.Name, corev1.ServiceTypeLoadBalancer, nil)
		setEndpoints(t, c, lb, ready(startPods(t, c, lb, "node-1")...))
		if err := c.SetLoadBalancerIngress(ctx, lb.Namespace, lb.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
		if err := c.RouteVia(ctx, n.Name, lbIP); err != nil {
			fatalln(t, err)
		}
		lbs[n.Name] = lb
		addrs = append(addrs, lbIP+":80")
	}
	keepSending(t, c, addrs...)
	eventually(t, converge, "node-2 and node-3 page", func() error {
		var errs []error
		for _, n := range droppers {
			errs = append(errs, expectMetrics(ctx, c, n.Name, pagingWith(lbs[n.Name], n.Name, "health_check_ignored")...))
		}
		return errors.Join(errs...)
	})

	const step = 3 * time.Minute
	steps := 0
	for _, phase := range []struct {
		name  string
		ahead time.Duration // the wall clock after the step, ahead of the true time
		want  time.Duration // the step the restored exporter must log
	}{
		{"forward", step, step},
		{"back", 0, -step},
	} {
		// The state file holds what the model last wrote, every 5 s at most while it changes: the kill waits
		// for a write since the page (or since the last restart), as TestRestartKeepsThePage's does.
		since := time.Now()
		for _, n := range droppers {
			eventually(t, converge, n.Name+"'s state file written", func() error { return writtenSince(n, since) })
		}
		for _, n := range droppers {
			n.KillExporter()
		}
		if err := clock.set(phase.ahead); err != nil {
			fatalln(t, err)
		}
		steps++
		t.Logf("%s: the wall clock stepped to %s (the true time %s)", phase.name, time.Now().Format(time.TimeOnly),
			clock.trueTime().Format(time.TimeOnly))
		for _, n := range droppers {
			if err := n.StartExporter(ctx); err != nil {
				fatalln(t, err)
			}
		}
		for _, n := range droppers {
			m := firstVerdict(t, ctx, c, n, lbs[n.Name])
			if err := checkScrape(m, append(pagingWith(lbs[n.Name], n.Name, "health_check_ignored"),
				metricIs("localtraffic_state_file_state", cluster.Labels{"node": n.Name, "state": "restored"}, 1))...); err != nil {
				errorf(t, "%s: %s's first scrape after the wall clock stepped %s: %v\n%s\n%s", phase.name, n.Name, phase.want, err,
					m.Grep("localtraffic_blackhole"), m.Grep("localtraffic_state_file"))
			}
			logged := stepLogged.FindAllStringSubmatch(c.LogTail("exporter-"+n.Name, 1<<20), -1)
			if len(logged) != steps {
				errorf(t, "%s: %s's exporter logged %d wall clock steps, want %d", phase.name, n.Name, len(logged), steps)
				continue
			}
			got, err := time.ParseDuration(logged[steps-1][1])
			if err != nil || (got-phase.want).Abs() > 5*time.Second {
				errorf(t, "%s: %s's exporter logged a step of %q, want %s", phase.name, n.Name, logged[steps-1][1], phase.want)
			}
		}
	}
}

// writtenSince: n's usual exporter wrote its state file after since (by the wall clock, as the file's time is).
func writtenSince(n *cluster.Node, since time.Time) error {
	fi, err := os.Stat(n.ExporterStateFile(cluster.ExporterPort))
	if err != nil {
		return err
	}
	if !fi.ModTime().After(since) {
		return fmt.Errorf("written at %s, before %s", fi.ModTime().Format("15:04:05.000"), since.Format("15:04:05.000"))
	}
	return nil
}
