package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// floodSources are addresses of the outside client that flood a busy UDP Service: a crowd, as a busy Service's
// clients are, each one flow.
var floodSources = []string{"10.250.0.110", "10.250.0.111", "10.250.0.112", "10.250.0.113",
	"10.250.0.114", "10.250.0.115", "10.250.0.116", "10.250.0.117"}

// udpFlood sends a datagram every 20 ms from each of srcs (addresses of the outside client, see
// cluster.AddClientSource) to dst until the test ends: 50 a second per source.
func udpFlood(t *testing.T, c *cluster.Cluster, dst string, srcs ...string) {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", dst)
	if err != nil {
		fatalln(t, err)
	}
	var conns []*net.UDPConn
	for _, src := range srcs {
		if err := c.AddClientSource(testContext(t), src); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.RemoveClientSource(context.Background(), src) })
		// The socket belongs to the namespace it is created in, whichever thread writes to it later.
		if err := netns.Do(c.ClientNS, func() error {
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)})
			conns = append(conns, conn)
			return err
		}); err != nil {
			fatalf(t, "udp socket from %s in %s: %v", src, c.ClientNS, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, conn := range conns {
				_, _ = conn.WriteToUDP([]byte("query"), raddr)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, conn := range conns {
			_ = conn.Close()
		}
	})
}

// TestRotationCheckerWhileSampling: node-2's meter runs with a packet budget of 300 a second
// (--arrivals.max-packet-rate), and a busy UDP Service with a replica on node-2 receives 400 datagrams a second
// there from eight sources: the meter gives packets back and its kernel filter passes a sample. Beside it, an
// HAProxy-style checker probes node-2's NodePort of a TCP Service whose only replica is on node-1, every 2 s,
// each dropped probe retransmitted once. The sample is of sources, each source's packets in full, so the
// checker keeps its cadence: sampled every second for three grace windows while the meter samples, node-2 never
// reports a critical reason for the checked Service, and its exporter names the checker. A sample drawn per
// packet broke the checker's cadence and paged.
func TestRotationCheckerWhileSampling(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const node = "node-2"
	svc := serviceSpec(t, c, "e2e-rotation-sampling", "storefront", corev1.ServiceTypeNodePort, nil)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	busy := serviceSpec(t, c, "e2e-rotation-sampling", "dns", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		s.Spec.Ports[0].Port = 53
	})
	busyPods := startPods(t, c, busy, node)
	setEndpoints(t, c, busy, ready(busyPods...))
	restartExporter(t, c, c.Node(node), testGrace, "--arrivals.max-packet-rate=300")
	eventually(t, converge, node+" drops the checked Service and serves the busy one", func() error {
		return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
			metricIs("localtraffic_blackhole", svcLabels(busy, node), 0))
	})

	udpFlood(t, c, nodePortAddr(c.Node(node), busy), floodSources...)
	sampled := cluster.Labels{"node": node, "ip_family": ipv4, "cause": "sampled"}
	eventually(t, converge, node+"'s meter samples the flood", func() error {
		return expectMetrics(ctx, c, node, metricAbove("localtraffic_arrivals_missed_total", sampled, 0))
	})
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			errorln(t, err)
		}
	})
	// At the meter's first salt cluster.CheckerIP is in every sample up to one source in 4, and four of the
	// eight flood sources are in the one-in-2 sample (200 datagrams a second, within the budget): the meter
	// settles at one in 2, and the checker is seen whole. The log check below fails if it was left out.
	checkEvery(t, c, cluster.CheckerIP, 2*time.Second, nodePortAddr(c.Node(node), svc))

	// Three grace windows (testGrace is 15 s), sampled every second: never critical, and the meter still
	// samples. A per-packet sample paged 24 s after the checker started.
	start := time.Now()
	for time.Since(start) < 45*time.Second {
		if err := expectMetrics(ctx, c, node, noCriticalReason(svc, node)); err != nil {
			fatalf(t, "%s after the checker started, the meter sampling: %v", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	m, err := c.Metrics(ctx, node)
	if err != nil {
		fatalln(t, err)
	}
	before, _, _ := m.Value("localtraffic_arrivals_missed_total", sampled)
	time.Sleep(2 * time.Second)
	if err := expectMetrics(ctx, c, node, metricAbove("localtraffic_arrivals_missed_total", sampled, before)); err != nil {
		fatalf(t, "the meter stopped sampling while the flood went on, so the window proved nothing: %v", err)
	}
	// The checker was seen with its cadence, not left out of the sample.
	if log := c.LogTail("exporter-"+node, 1<<20); !strings.Contains(log, cluster.CheckerIP+" every 2s") {
		errorf(t, "%s's exporter log does not name the checker %q: the sample left it out, and the window proved nothing",
			node, fmt.Sprintf("%s every 2s", cluster.CheckerIP))
	}
}
