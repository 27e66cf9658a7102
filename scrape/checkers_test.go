package scrape

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
)

// A NodePort that only an HAProxy-style checker reaches: the blackhole is a warning (no_traffic_seen), and the
// exporter says once which steady sources it took as health checks and how to settle it. A client beside it
// makes it traffic_lost again; a declaration of none makes the checker a client.
func TestCheckersAtADroppedNodePort(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	probes := arrivals.DestCount{Attempts: 300, ActiveSince: t0.Add(-10 * time.Minute), LastSeen: t0.Add(-time.Second),
		SetAside: true, Checkers: []arrivals.CheckerSource{{Addr: netip.MustParseAddr("198.18.0.5"), Attempts: 300,
			Interval: 2 * time.Second, LastSeen: t0.Add(-time.Second)}}}
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: t0, Counts: map[arrivals.Dest]arrivals.DestCount{np: probes}}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-2", Found: true, InternalIPs: []string{"10.0.0.2"}},
		Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	var logs bytes.Buffer
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"10.0.0.2"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: meter, Grace: 2 * time.Minute, ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	reason := func() string {
		t.Helper()
		return string(g.Gather(context.Background()).Services[0].Verdict.Reason)
	}
	for i := range 3 {
		meter.Now = t0.Add(time.Duration(i) * time.Minute)
		if r := reason(); r != "no_traffic_seen" {
			t.Fatalf("scrape %d, only the checker: reason %q, want no_traffic_seen", i, r)
		}
	}
	if n := strings.Count(logs.String(), "only steady sources arrive"); n != 1 {
		t.Fatalf("%d warnings over three scrapes, want one:\n%s", n, logs.String())
	}
	for _, want := range []string{"198.18.0.5 every 2s", "service=checkout", "localtraffic.io/health-check=traffic-port", "NodePort 30090/TCP"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the warning does not say %q:\n%s", want, logs.String())
		}
	}

	withClient := probes
	withClient.Clients = arrivals.ClientCount{Attempts: 3, ActiveSince: meter.Now.Add(-20 * time.Second), LastSeen: meter.Now.Add(-2 * time.Second)}
	meter.Counts[np] = scrapetest.Repeating(withClient)
	if r := reason(); r != "traffic_lost" {
		t.Errorf("the checker and a client: reason %q, want traffic_lost", r)
	}

	probes.LastSeen = meter.Now.Add(-time.Second)
	meter.Counts[np] = scrapetest.Repeating(probes)
	view.Snap.Services[0].HealthCheck = announce.CheckNone
	if r := reason(); r != "traffic_lost" {
		t.Errorf("declared none: reason %q, want traffic_lost (the steady source is a client)", r)
	}
}
