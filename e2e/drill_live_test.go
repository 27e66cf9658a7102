package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
)

// TestDrillLive runs the drill word for word on the cluster with controllers: kubectl apply of the pinned
// Deployment, drill.md's observe commands unchanged from the outside client's namespace (the curl loop prints
// BLACKHOLE for every worker but the pinned one), the exporter's verdict agreeing with the loop on every
// worker, drill.md's two kubectl patch commands unchanged, kubectl rollout status, and every worker serving,
// one replica each.
func TestDrillLive(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	sh, tr := liveDrillOperator(t, c)
	pinned := c.Nodes()[0].Name
	if err := drill.ApplyLive(ctx, sh, tr, pinned); err != nil {
		fatalln(t, err)
	}
	out, err := sh.RunShown(ctx, tr, drill.ObservePods)
	if err != nil {
		fatalln(t, err)
	}
	if got := strings.Count(out, " "+pinned+" "); got != drill.Replicas {
		fatalf(t, "get pods -o wide shows %d replicas on %s, want %d", got, pinned, drill.Replicas)
	}
	if out, err := sh.RunShown(ctx, tr, drill.ObservePolicy); err != nil || strings.TrimSpace(out) != "Local" {
		fatalf(t, "policy: %q %v", out, err)
	}
	blackholed := map[string]bool{}
	for _, n := range c.Nodes() {
		if !n.ControlPlane && n.Name != pinned {
			blackholed[n.Name] = true
		}
	}
	observeAgrees(t, ctx, c, sh, tr, blackholed, "the pinned Deployment")

	for _, cmd := range drill.FixCommands() {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		_, err := sh.RunShown(cctx, tr, cmd)
		cancel()
		if err != nil {
			fatalln(t, err)
		}
	}
	replicas, err := drill.RunningReplicas(ctx, c, drill.Namespace, "app="+drill.Service)
	if err != nil {
		fatalln(t, err)
	}
	for n := range workers(c) {
		if replicas[n] != 1 {
			errorf(t, "after the fix %s runs %d replicas, want 1 (%v)", n, replicas[n], replicas)
		}
	}
	if _, err := sh.RunShown(ctx, tr, drill.ObservePods); err != nil {
		fatalln(t, err)
	}
	observeAgrees(t, ctx, c, sh, tr, nil, "the fix")
}

// observeAgrees runs the drill's curl loop until it prints BLACKHOLE for exactly the nodes in blackholed (ok
// for the other workers) and every worker's exporter says the same, then shows the last loop and the table.
func observeAgrees(t *testing.T, ctx context.Context, c *cluster.Cluster, sh *drill.Shell, tr drill.Transcript, blackholed map[string]bool, what string) {
	t.Helper()
	var rows []drill.LiveRow
	var loop string
	start := time.Now()
	eventually(t, converge, what+": curl loop and exporters agree", func() error {
		var err error
		rows, loop, err = drill.ObserveLive(ctx, c, sh)
		if err != nil {
			return err
		}
		var errs []error
		for _, r := range rows {
			want := "ok"
			if blackholed[r.Node] {
				want = "BLACKHOLE"
			}
			if r.Curl != want {
				errs = append(errs, fmt.Errorf("%s (%s): curl loop says %q, want %s", r.Node, r.IP, r.Curl, want))
			}
			if !r.Agrees() {
				errs = append(errs, fmt.Errorf("%s: exporter (blackhole=%g, known %v, %v) disagrees with the loop's %q", r.Node, r.Blackhole, r.Known, r.ScrapeErr, r.Curl))
			}
		}
		if len(errs) > 0 {
			var b bytes.Buffer
			drill.PrintLive(&b, rows)
			return fmt.Errorf("%w\n%s", errors.Join(errs...), b.String())
		}
		return nil
	})
	tr.Show(drill.ObserveTraffic, loop)
	var b bytes.Buffer
	drill.PrintLive(&b, rows)
	t.Logf("%s, settled after %s:\n%s", what, time.Since(start).Round(time.Millisecond), b.String())
}
