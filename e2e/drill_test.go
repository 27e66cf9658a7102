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

// checkRows wants, per node, the client's verdict and the exporter's verdict to be blackhole exactly on the
// nodes in blackholed; where traffic is served it must be served by a pod on that same node (Local policy).
func checkRows(rows []drill.Row, blackholed map[string]bool) error {
	var errs []error
	for _, r := range rows {
		if blackholed[r.Node] {
			if r.Traffic.Verdict != cluster.Blackhole {
				errs = append(errs, fmt.Errorf("%s: client got %s, want blackhole", r.Node, r.Traffic))
			}
		} else {
			if r.Traffic.Verdict != cluster.OK || r.Traffic.Status != 200 {
				errs = append(errs, fmt.Errorf("%s: client got %s, want ok (200)", r.Node, r.Traffic))
			} else if !strings.HasSuffix(strings.TrimSpace(r.Traffic.Body), " on "+r.Node) {
				errs = append(errs, fmt.Errorf("%s: served by %q, want a pod on this node", r.Node, r.Traffic.Body))
			}
		}
		switch {
		case r.ScrapeErr != nil:
			errs = append(errs, fmt.Errorf("%s: scrape: %w", r.Node, r.ScrapeErr))
		case !r.Known:
			errs = append(errs, fmt.Errorf("%s: exporter has no localtraffic_blackhole series for %s/%s", r.Node, drill.Namespace, drill.Service))
		case r.ExporterSaysBlackhole() != blackholed[r.Node]:
			errs = append(errs, fmt.Errorf("%s: exporter localtraffic_blackhole=%g, want blackhole=%v", r.Node, r.Blackhole, blackholed[r.Node]))
		}
	}
	if len(errs) > 0 {
		var b bytes.Buffer
		drill.Print(&b, rows)
		return fmt.Errorf("%w\n%s", errors.Join(errs...), b.String())
	}
	return nil
}

// TestDrillAndFix: three replicas on node-1 blackhole the NodePort on every other node (iptables and nftables
// alike) and the exporter on each node says so; one replica per node ends it.
func TestDrillAndFix(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	start := time.Now()
	if err := drill.Apply(ctx, c); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := drill.Cleanup(context.Background(), c); err != nil {
			errorf(t, "drill cleanup: %v", err)
		}
	})
	blackholed := map[string]bool{}
	for _, n := range c.Nodes()[1:] {
		blackholed[n.Name] = true
	}
	var rows []drill.Row
	eventually(t, 90*time.Second, "drill: blackhole on every node but the first", func() error {
		rows = drill.Observe(ctx, c)
		return checkRows(rows, blackholed)
	})
	var b bytes.Buffer
	drill.Print(&b, rows)
	t.Logf("drill after %s:\n%s", time.Since(start).Round(time.Millisecond), b.String())

	start = time.Now()
	if err := drill.Fix(ctx, c); err != nil {
		fatalln(t, err)
	}
	eventually(t, 90*time.Second, "fix: every node serves", func() error {
		rows = drill.Observe(ctx, c)
		return checkRows(rows, nil)
	})
	b.Reset()
	drill.Print(&b, rows)
	t.Logf("fix after %s:\n%s", time.Since(start).Round(time.Millisecond), b.String())
}
