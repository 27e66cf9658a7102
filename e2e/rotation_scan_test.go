package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// scanOnce is an internet scanner's visit from src (an address of the outside client, see AddClientSource):
// one SYN to each TCP addr and one datagram to each UDP addr, never again. The dial gives up after 300 ms,
// before the kernel's first SYN retransmission (1 s), so exactly one SYN leaves per address, as a scanner's.
func scanOnce(ctx context.Context, t *testing.T, c *cluster.Cluster, src string, tcp, udp []string) {
	t.Helper()
	for _, a := range tcp {
		if err := c.TCPCheck(ctx, src, a, 300*time.Millisecond); err == nil {
			fatalf(t, "scan of %s from %s: connected, want it dropped", a, src)
		}
	}
	for _, a := range udp {
		raddr, err := net.ResolveUDPAddr("udp4", a)
		if err != nil {
			fatalln(t, err)
		}
		if err := netns.Do(c.ClientNS, func() error {
			conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, raddr)
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = conn.Write([]byte("probe"))
			return err
		}); err != nil {
			fatalf(t, "datagram from %s to %s: %v", src, a, err)
		}
	}
}

// TestRotationPortScanIsNotAClient: a NodePort Service (a TCP and a UDP port) with an externalIP held on
// node-2's interface, its only replica on node-1: node-2 drops the NodePorts and the externalIP, all of them in
// rotation (declared), a blackhole nobody is sent to yet (no_traffic_seen). Internet scanners visit: every 4 s a
// new source address sends one SYN to each TCP destination and one datagram to each UDP destination, and never
// comes back; no SYN is retransmitted. Sampled every second for 40 s (at the externalIP, where no cadence is
// followed, each scan counts at once; at a NodePort a new source is set aside for 66 s while it may prove one),
// node-2 never reports a critical reason, and the scans are counted as arrivals. Before
// the meter required a source to come again, the first scan paged traffic_lost at once (at the externalIP) and
// held it for the loss hold. Then a real client, whose dropped SYNs the kernel retransmits from the same port,
// tries the externalIP: node-2 pages (traffic_lost) as before.
func TestRotationPortScanIsNotAClient(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.103"
	n2 := c.Node("node-2")
	svc := serviceSpec(t, c, "e2e-rotation-scan", "catalog", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53,
			TargetPort: s.Spec.Ports[0].TargetPort})
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	restartExporter(t, c, n2, testGrace)
	if err := n2.AddAddress(ctx, extIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = n2.DelAddress(context.Background(), extIP)
		_ = c.Unroute(context.Background(), extIP)
	})
	if err := c.RouteVia(ctx, n2.Name, extIP); err != nil {
		fatalln(t, err)
	}
	l := svcLabels(svc, n2.Name)
	eventually(t, converge, "node-2 drops the Service, nobody sent anything yet", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole", l, 1),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1))
	})
	arrived := func() (float64, error) {
		m, err := c.Metrics(ctx, n2.Name)
		if err != nil {
			return 0, err
		}
		var sum float64
		for _, kind := range []string{"node_port", "external_ip"} {
			v, _, err := m.Value("localtraffic_arrivals_total", cluster.Labels{"node": n2.Name, "kind": kind, "ip_family": ipv4})
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
	before, err := arrived()
	if err != nil {
		fatalln(t, err)
	}

	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	npUDP := strconv.Itoa(int(svc.Spec.Ports[1].NodePort))
	tcp := []string{extIP + ":80", n2.IP + ":" + np}
	udp := []string{extIP + ":53", n2.IP + ":" + npUDP}
	start := time.Now()
	scans := 0
	for time.Since(start) < 40*time.Second {
		if time.Since(start) >= time.Duration(scans)*4*time.Second {
			src := fmt.Sprintf("10.250.0.%d", 211+scans)
			if err := c.AddClientSource(ctx, src); err != nil {
				fatalln(t, err)
			}
			t.Cleanup(func() { _ = c.RemoveClientSource(context.Background(), src) })
			scanOnce(ctx, t, c, src, tcp, udp)
			scans++
		}
		if err := expectMetrics(ctx, c, n2.Name, noCriticalReason(svc, n2.Name)); err != nil {
			fatalf(t, "%s after the first scan (%d scanners so far): %v", time.Since(start).Round(time.Second), scans, err)
		}
		time.Sleep(time.Second)
	}
	after, err := arrived()
	if err != nil {
		fatalln(t, err)
	}
	if got, want := after-before, float64(scans*(len(tcp)+len(udp))); got < want {
		errorf(t, "the scans are arrivals: %v counted, want at least %v", got, want)
	}
	if err := expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "no_traffic_seen"), 1)); err != nil {
		fatalf(t, "after %d scans: %v", scans, err)
	}

	// A real client: its dropped SYN is retransmitted from the same source port a second later.
	paging := time.Now()
	keepSending(t, c, extIP+":80")
	eventually(t, converge, "a real client pages node-2", func() error {
		return expectMetrics(ctx, c, n2.Name, metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n2.Name, "traffic_lost"), 1))
	})
	t.Logf("%d scanners paged nothing for %s; a real client paged %s after its first attempt", scans,
		40*time.Second, time.Since(paging).Round(time.Second))
}
