package arrivals

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testbed is a node with clients and a pod, each in a network namespace of its own:
//
//	client  c0 192.0.2.1, 2001:db8:2::1 ── eth0 ⊂ br-ext 192.0.2.10, 2001:db8:2::10   (node)
//	client2 c1 198.51.100.1, 2001:db8:3::1 ── eth1 198.51.100.10, 2001:db8:3::10, promiscuous
//	pod     p0 10.244.0.5, fd00:244::5 ── vpod ⊂ cni0 10.244.0.1, fd00:244::1
//	        lo 203.0.113.7, 2001:db8:7::7 (an LB IP the node routes to the pod)
//
// The client's link ends in a bridge port, so every frame from it is received twice below IP (eth0, then
// br-ext, which has eth0's MAC); whatever the node forwards to the pod leaves through another bridge and a
// veth. The node forwards, DNATs NodePort 30100 to the pod's :8080, and drops NodePort 30090 the way
// kube-proxy drops a Service without local endpoints. br_netfilter is on, its default and what Kubernetes
// nodes run with.
type testbed struct {
	node, client, client2, pod testNetns
}

var (
	nodeV4   = netip.MustParseAddr("192.0.2.10")
	nodeV6   = netip.MustParseAddr("2001:db8:2::10")
	node2V4  = netip.MustParseAddr("198.51.100.10")
	node2V6  = netip.MustParseAddr("2001:db8:3::10")
	clientV4 = netip.MustParseAddr("192.0.2.1")
	clientV6 = netip.MustParseAddr("2001:db8:2::1")
	podV4    = netip.MustParseAddr("10.244.0.5")
	podV6    = netip.MustParseAddr("fd00:244::5")
	lbV4     = netip.MustParseAddr("203.0.113.7")
	lbV6     = netip.MustParseAddr("2001:db8:7::7")
)

func newTestbed(t *testing.T) testbed {
	t.Helper()
	requireRoot(t)
	tb := testbed{node: newTestNetns(t, "node"), client: newTestNetns(t, "cl"), client2: newTestNetns(t, "cl2"), pod: newTestNetns(t, "pod")}
	n, c, c2, p := tb.node, tb.client, tb.client2, tb.pod
	for _, ns := range []testNetns{n, c, c2, p} {
		ns.sysctl(t, "net.ipv6.conf.all.accept_dad=0")
		ns.sysctl(t, "net.ipv6.conf.default.accept_dad=0")
	}
	n.sysctl(t, "net.ipv4.ip_forward=1")
	n.sysctl(t, "net.ipv6.conf.all.forwarding=1")

	veth(t, c, "c0", n, "eth0")
	n.ip(t, "link add br-ext type bridge")
	n.ip(t, "link set eth0 master br-ext")
	veth(t, c2, "c1", n, "eth1")
	veth(t, p, "p0", n, "vpod")
	n.ip(t, "link add cni0 type bridge")
	n.ip(t, "link set vpod master cni0")
	for _, l := range []string{"eth0", "br-ext", "eth1", "vpod", "cni0"} {
		n.ip(t, "link set "+l+" up")
	}
	n.ip(t, "link set eth1 promisc on")
	n.ip(t, "addr add 192.0.2.10/24 dev br-ext")
	n.ip(t, "addr add 2001:db8:2::10/64 dev br-ext nodad")
	n.ip(t, "addr add 198.51.100.10/24 dev eth1")
	n.ip(t, "addr add 2001:db8:3::10/64 dev eth1 nodad")
	n.ip(t, "addr add 10.244.0.1/24 dev cni0")
	n.ip(t, "addr add fd00:244::1/64 dev cni0 nodad")
	n.ip(t, "route add 203.0.113.7/32 via 10.244.0.5")
	n.ip(t, "-6 route add 2001:db8:7::7/128 via fd00:244::5")

	c.ip(t, "link set c0 up")
	c.ip(t, "addr add 192.0.2.1/24 dev c0")
	c.ip(t, "addr add 2001:db8:2::1/64 dev c0 nodad")
	c.ip(t, "route add default via 192.0.2.10")
	c.ip(t, "-6 route add default via 2001:db8:2::10")
	c2.ip(t, "link set c1 up")
	c2.ip(t, "addr add 198.51.100.1/24 dev c1")
	c2.ip(t, "addr add 2001:db8:3::1/64 dev c1 nodad")
	c2.ip(t, "route add default via 198.51.100.10")
	c2.ip(t, "-6 route add default via 2001:db8:3::10")
	p.ip(t, "link set p0 up")
	p.ip(t, "addr add 10.244.0.5/24 dev p0")
	p.ip(t, "addr add fd00:244::5/64 dev p0 nodad")
	p.ip(t, "addr add 203.0.113.7/32 dev lo")
	p.ip(t, "addr add 2001:db8:7::7/128 dev lo")
	p.ip(t, "route add default via 10.244.0.1")
	p.ip(t, "-6 route add default via fd00:244::1")

	n.exec(t, `
table inet arrivals_test {
	chain prerouting {
		type nat hook prerouting priority dstnat;
		ip daddr { 192.0.2.10, 198.51.100.10 } tcp dport 30100 dnat ip to 10.244.0.5:8080
		ip6 daddr { 2001:db8:2::10, 2001:db8:3::10 } tcp dport 30100 dnat ip6 to [fd00:244::5]:8080
	}
	chain input {
		type filter hook input priority filter;
		tcp dport 30090 drop
	}
}
`, "nft", "-f", "-")
	listenTCP(t, p, ":8080")
	listenTCP(t, p, ":80")
	listenTCP(t, n, ":31000") // the health check node port answers, as kube-proxy's would
	return tb
}

const markerPort = 30999

func testbedWatch() Watch {
	both := func(p Protocol, port uint16) []Dest { return []Dest{NodeDest(p, false, port), NodeDest(p, true, port)} }
	w := Watch{
		NodeAddrs: []netip.Addr{nodeV4, nodeV6, node2V4, node2V6},
		Internal:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/64")},
		Dests: []Dest{
			{Protocol: TCP, Addr: lbV4, Port: 80}, {Protocol: TCP, Addr: lbV6, Port: 80},
			// The client's own address: only the node's outgoing SYNs go there.
			{Protocol: TCP, Addr: clientV4, Port: 30080}, {Protocol: TCP, Addr: clientV6, Port: 30080},
		},
		HealthChecks: both(TCP, 31000),
	}
	for _, d := range [][]Dest{both(TCP, 30080), both(TCP, 30090), both(TCP, 30100), both(UDP, 30053), both(SCTP, 30132), both(UDP, markerPort)} {
		w.Dests = append(w.Dests, d...)
	}
	return w
}

// settle waits until every packet sent before it has been counted: a marker datagram per family goes
// through the same socket and ring as the test's packets, and the ring is read in order.
func settle(t *testing.T, m *Meter, from testNetns, v4, v6 netip.Addr) {
	t.Helper()
	for _, dst := range []netip.Addr{v4, v6} {
		d := NodeDest(UDP, dst.Is6(), markerPort)
		before, _ := m.Snapshot().Dest(d)
		sendUDP(t, from, netip.AddrPortFrom(dst, markerPort), 1)
		eventually(t, 10*time.Second, "marker counted", func() bool {
			c, _ := m.Snapshot().Dest(d)
			return c.Attempts > before.Attempts
		})
	}
}

func attempts(m *Meter, d Dest) uint64 {
	c, _ := m.Snapshot().Dest(d)
	return c.Attempts
}

// TestKernelCountsArrivalsOnce: on a real kernel, in namespaces the test creates, every new connection
// attempt that reaches the node is counted exactly once, whether the node refuses it, drops it in
// netfilter, DNATs it to a pod or routes it on; what the node sends and what it sends itself is not counted;
// health check probes are counted with their source unless they come from the node or a pod.
func TestKernelCountsArrivalsOnce(t *testing.T) {
	tb := newTestbed(t)
	m := openIn(t, tb.node, Config{BlockTimeout: 20 * time.Millisecond}, nil)
	if err := m.Watch(testbedWatch()); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Snapshot().Families {
		if f.Filter != FilterExact {
			t.Fatalf("%s filter %v, want exact", f.Family, f.Filter)
		}
	}
	const rounds = 3
	for _, fam := range []struct {
		name        string
		node, node2 netip.Addr
		client, lb  netip.Addr
		pod         netip.Addr
		ipv6        bool
	}{
		{"IPv4", nodeV4, node2V4, clientV4, lbV4, podV4, false},
		{"IPv6", nodeV6, node2V6, clientV6, lbV6, podV6, true},
	} {
		t.Run(fam.name, func(t *testing.T) {
			ap := netip.AddrPortFrom
			t.Run("refused NodePort SYN", func(t *testing.T) {
				d := NodeDest(TCP, fam.ipv6, 30080)
				before := attempts(m, d)
				for range rounds {
					if err := dialTCP(t, tb.client, ap(fam.node, 30080), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Fatalf("dial: %v, want refused", err)
					}
				}
				// The other client reaches the node's other address, on a link without a bridge.
				if err := dialTCP(t, tb.client2, ap(fam.node2, 30080), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("dial: %v, want refused", err)
				}
				settle(t, m, tb.client, nodeV4, nodeV6)
				if got := attempts(m, d) - before; got != rounds+1 {
					t.Fatalf("counted %d attempts, want %d", got, rounds+1)
				}
			})
			t.Run("SYN dropped by netfilter", func(t *testing.T) {
				d := NodeDest(TCP, fam.ipv6, 30090)
				before := attempts(m, d)
				for range rounds {
					// Under the kernel's 1 s initial retransmission timeout: one SYN per dial.
					if err := dialTCP(t, tb.client, ap(fam.node, 30090), 300*time.Millisecond); !isTimeout(err) {
						t.Fatalf("dial: %v, want a timeout (dropped)", err)
					}
				}
				settle(t, m, tb.client, nodeV4, nodeV6)
				if got := attempts(m, d) - before; got != rounds {
					t.Fatalf("counted %d attempts, want %d: the meter sees packets before netfilter drops them", got, rounds)
				}
			})
			t.Run("DNAT to a pod behind a bridge and a veth", func(t *testing.T) {
				d := NodeDest(TCP, fam.ipv6, 30100)
				dnat := func(from testNetns, to netip.Addr) uint64 {
					t.Helper()
					before := attempts(m, d)
					for range rounds {
						if err := dialTCP(t, from, ap(to, 30100), 2*time.Second); err != nil {
							t.Fatalf("dial through DNAT: %v", err)
						}
					}
					settle(t, m, tb.client, nodeV4, nodeV6)
					return attempts(m, d) - before
				}
				// A plain uplink: DNAT happens in IP's PREROUTING, after the meter saw the packet.
				if got := dnat(tb.client2, fam.node2); got != rounds {
					t.Errorf("plain uplink: counted %d attempts, want %d", got, rounds)
				}
				// A bridged uplink with br_netfilter (on by default): the bridge runs IP's PREROUTING hooks, DNAT
				// included, before it hands the packet to IP. A connection the node serves is seen with the
				// pod's address and not counted (docs: package doc, "Bridged uplinks"). One the node drops is
				// not DNATed and is counted ("SYN dropped by netfilter" comes in through the same bridge).
				if got := dnat(tb.client, fam.node); got != 0 {
					t.Errorf("bridged uplink with br_netfilter: counted %d attempts; the docs say DNATed connections are not seen there", got)
				}
				brnf := "net.bridge.bridge-nf-call-iptables"
				if fam.ipv6 {
					brnf = "net.bridge.bridge-nf-call-ip6tables"
				}
				tb.node.sysctl(t, brnf+"=0")
				defer tb.node.sysctl(t, brnf+"=1")
				if got := dnat(tb.client, fam.node); got != rounds {
					t.Errorf("bridged uplink without br_netfilter: counted %d attempts, want %d", got, rounds)
				}
			})
			t.Run("LB IP routed to a pod, forwarded unchanged", func(t *testing.T) {
				// The forwarded SYN still matches the LB destination on cni0 and vpod: counted once anyway.
				d := Dest{Protocol: TCP, Addr: fam.lb, Port: 80}
				before := attempts(m, d)
				for range rounds {
					if err := dialTCP(t, tb.client, ap(fam.lb, 80), 2*time.Second); err != nil {
						t.Fatalf("dial the routed LB IP: %v", err)
					}
				}
				settle(t, m, tb.client, nodeV4, nodeV6)
				if got := attempts(m, d) - before; got != rounds {
					t.Fatalf("counted %d attempts, want %d", got, rounds)
				}
			})
			t.Run("UDP and SCTP", func(t *testing.T) {
				u, s := NodeDest(UDP, fam.ipv6, 30053), NodeDest(SCTP, fam.ipv6, 30132)
				bu, bs := attempts(m, u), attempts(m, s)
				sendUDP(t, tb.client, ap(fam.node, 30053), 5)
				sendSCTP(t, tb.client, ap(fam.node, 30132), sctpINIT)
				sendSCTP(t, tb.client, ap(fam.node, 30132), 0) // DATA: not a new association
				settle(t, m, tb.client, nodeV4, nodeV6)
				if got := attempts(m, u) - bu; got != 5 {
					t.Errorf("UDP: counted %d, want 5", got)
				}
				if got := attempts(m, s) - bs; got != 1 {
					t.Errorf("SCTP: counted %d, want 1 (the INIT)", got)
				}
			})
			t.Run("what the node sends is not counted", func(t *testing.T) {
				out := Dest{Protocol: TCP, Addr: fam.client, Port: 30080}
				np := NodeDest(TCP, fam.ipv6, 30080)
				lb := Dest{Protocol: TCP, Addr: fam.lb, Port: 80}
				bo, bn, bl := attempts(m, out), attempts(m, np), attempts(m, lb)
				// To the client (out of a bridge), to itself (through lo), to the LB IP (routed to the pod).
				if err := dialTCP(t, tb.node, ap(fam.client, 30080), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("dial from the node: %v", err)
				}
				if err := dialTCP(t, tb.node, ap(fam.node, 30080), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("dial from the node to itself: %v", err)
				}
				if err := dialTCP(t, tb.node, ap(fam.lb, 80), 2*time.Second); err != nil {
					t.Fatalf("dial from the node to the LB IP: %v", err)
				}
				settle(t, m, tb.client, nodeV4, nodeV6)
				if got := attempts(m, out) - bo; got != 0 {
					t.Errorf("outgoing SYNs counted: %d", got)
				}
				if got := attempts(m, np) - bn; got != 0 {
					t.Errorf("the node's SYNs to itself counted: %d", got)
				}
				if got := attempts(m, lb) - bl; got != 0 {
					t.Errorf("the node's SYNs to the LB IP counted: %d", got)
				}
			})
			t.Run("health check probers", func(t *testing.T) {
				hc := NodeDest(TCP, fam.ipv6, 31000)
				before, _ := m.Snapshot().HealthCheck(hc)
				internalBefore := m.Snapshot().Families[b2i(fam.ipv6)].Internal
				for range rounds {
					if err := dialTCP(t, tb.client, ap(fam.node, 31000), 2*time.Second); err != nil {
						t.Fatalf("probe from the client: %v", err)
					}
				}
				if err := dialTCP(t, tb.node, ap(fam.node, 31000), 2*time.Second); err != nil {
					t.Fatalf("probe from the node: %v", err)
				}
				if err := dialTCP(t, tb.pod, ap(fam.node, 31000), 2*time.Second); err != nil {
					t.Fatalf("probe from the pod: %v", err)
				}
				settle(t, m, tb.client, nodeV4, nodeV6)
				s := m.Snapshot()
				h, _ := s.HealthCheck(hc)
				if got := h.Probes - before.Probes; got != rounds {
					t.Errorf("counted %d probes, want %d (the client's; not the node's, not the pod's)", got, rounds)
				}
				if len(h.Sources) != 1 || h.Sources[0].Addr != fam.client || h.Sources[0].Probes != rounds {
					t.Errorf("sources %+v, want only the client with %d probes", h.Sources, rounds)
				}
				if since := time.Since(h.LastSeen); since < 0 || since > time.Minute {
					t.Errorf("last seen %v, not a receive time of now", h.LastSeen)
				}
				if got := s.Families[b2i(fam.ipv6)].Internal - internalBefore; got != 1 {
					t.Errorf("internal packets %d, want 1 (the pod's probe)", got)
				}
			})
		})
	}
	t.Run("a frame for another host", func(t *testing.T) {
		// eth1 is promiscuous: a frame addressed to another MAC reaches the packet taps as PACKET_OTHERHOST.
		// The same packet addressed to eth1's MAC is counted, so the packet itself is an arrival.
		d := NodeDest(TCP, false, 30080)
		before := attempts(m, d)
		pkt := syn(netip.MustParseAddr("198.51.100.1").String(), node2V4.String(), 30080)
		b := pkt.bytes()
		ipv4Checksum(b)
		sendFrame(t, tb.client2, "c1", []byte{0x02, 0, 0, 0, 0, 0x99}, b)
		settle(t, m, tb.client, nodeV4, nodeV6)
		if got := attempts(m, d) - before; got != 0 {
			t.Fatalf("a frame for another host counted: %d", got)
		}
		sendFrame(t, tb.client2, "c1", linkMAC(t, tb.node, "eth1"), b)
		settle(t, m, tb.client, nodeV4, nodeV6)
		if got := attempts(m, d) - before; got != 1 {
			t.Fatalf("the frame for the node counted %d times, want 1", got)
		}
	})
	s := m.Snapshot()
	for _, f := range s.Families {
		if f.Dropped != 0 {
			t.Errorf("%s: %d packets dropped by the ring", f.Family, f.Dropped)
		}
		t.Logf("%s: received %d, unmatched %d, internal %d", f.Family, f.Received, f.Unmatched, f.Internal)
		if f.Unmatched != 0 {
			t.Errorf("%s: %d packets passed the exact filter but matched nothing", f.Family, f.Unmatched)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ipv4Checksum(b []byte) {
	ihl := int(b[0]&0x0f) * 4
	b[10], b[11] = 0, 0
	var sum uint32
	for i := 0; i < ihl; i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	b[10], b[11] = byte(^sum>>8), byte(^sum)
}

// newPair is a node (eth0 192.0.2.10) and a client (c0 192.0.2.1) linked by a veth pair.
func newPair(t testing.TB) (node, client testNetns) {
	t.Helper()
	requireRoot(t)
	node, client = newTestNetns(t, "node"), newTestNetns(t, "cl")
	veth(t, client, "c0", node, "eth0")
	node.ip(t, "link set eth0 up")
	node.ip(t, "addr add 192.0.2.10/24 dev eth0")
	client.ip(t, "link set c0 up")
	client.ip(t, "addr add 192.0.2.1/24 dev c0")
	return node, client
}

// TestKernelOverloadCountsDrops: a reader that falls behind loses packets in the kernel, never silently:
// the ring is bounded, and what did not fit is in Dropped. The test holds the reader while it sends.
func TestKernelOverloadCountsDrops(t *testing.T) {
	node, client := newPair(t)
	hold := make(chan struct{})
	var release sync.Once
	m := openIn(t, node, Config{BlockSize: 4096, Blocks: 2, BlockTimeout: 10 * time.Millisecond}, func() { <-hold })
	// Cleanups run last-in first-out: the reader is released before openIn's cleanup closes the meter.
	t.Cleanup(func() { release.Do(func() { close(hold) }) })
	d := NodeDest(UDP, false, 30053)
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{d}}); err != nil {
		t.Fatal(err)
	}
	// Fewer than the receive backlog (net.core.netdev_max_backlog, 1000) so the veth loses none on the way
	// in, more than the 8 KiB ring holds (about 70 such datagrams).
	const sent = 300
	sendUDP(t, client, netip.AddrPortFrom(nodeV4, 30053), sent)
	eventually(t, 10*time.Second, "kernel accounting", func() bool { return m.Snapshot().Families[0].Received >= sent })
	s := m.Snapshot()
	if !s.Overloaded() || s.Families[0].Dropped == 0 {
		t.Fatalf("no drops with a held reader and an 8 KiB ring: %+v", s.Families[0])
	}
	release.Do(func() { close(hold) })
	eventually(t, 10*time.Second, "counted or dropped", func() bool {
		s := m.Snapshot()
		c, _ := s.Dest(d)
		return c.Attempts+s.Families[0].Dropped >= sent
	})
	s = m.Snapshot()
	c, _ := s.Dest(d)
	t.Logf("sent %d: counted %d, dropped %d, received %d", sent, c.Attempts, s.Families[0].Dropped, s.Families[0].Received)
	if c.Attempts+s.Families[0].Dropped != sent || s.Families[0].Received != sent {
		t.Fatalf("counted %d + dropped %d, received %d; want %d", c.Attempts, s.Families[0].Dropped, s.Families[0].Received, sent)
	}
}

// TestKernelShedsAboveMaxPacketRate: above its rate budget the meter gives whole blocks back uncounted and
// says how many packets it shed; counted and shed add up to what was sent.
func TestKernelShedsAboveMaxPacketRate(t *testing.T) {
	node, client := newPair(t)
	// 4 KiB blocks of about 35 datagrams; a budget of 50 packets/s has 5 saved up: the first block passes,
	// the next ones within the same tenth of a second are shed.
	m := openIn(t, node, Config{BlockSize: 4096, Blocks: 64, BlockTimeout: 10 * time.Millisecond, MaxPacketRate: 50}, nil)
	d := NodeDest(UDP, false, 30053)
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{d}}); err != nil {
		t.Fatal(err)
	}
	const sent = 300
	sendUDP(t, client, netip.AddrPortFrom(nodeV4, 30053), sent)
	eventually(t, 10*time.Second, "counted or shed", func() bool {
		s := m.Snapshot()
		c, _ := s.Dest(d)
		return c.Attempts+s.Families[0].Shed+s.Families[0].Dropped >= sent
	})
	s := m.Snapshot()
	c, _ := s.Dest(d)
	f := s.Families[0]
	t.Logf("sent %d: counted %d, shed %d, dropped %d", sent, c.Attempts, f.Shed, f.Dropped)
	if f.Shed == 0 || !s.Overloaded() {
		t.Errorf("nothing shed at 300 packets against a budget of 50/s")
	}
	if c.Attempts+f.Shed+f.Dropped != sent {
		t.Errorf("counted %d + shed %d + dropped %d != sent %d", c.Attempts, f.Shed, f.Dropped, sent)
	}
}

// TestPermissionDenied: without CAP_NET_RAW the meter is a state, not an error nobody sees and not zero
// arrivals. Capabilities are per thread: the test drops CAP_NET_RAW on one OS thread and opens the meter
// there (as a non-root user it has none to drop).
func TestPermissionDenied(t *testing.T) {
	var m *Meter
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, its capabilities with it
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_RAW
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		m = New(Config{})
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("dropping CAP_NET_RAW: %v", err)
	}
	defer m.Close()
	s := m.Snapshot()
	if s.Status != StatusPermissionDenied || s.Err == nil {
		t.Fatalf("status %v, err %v; want permission_denied", s.Status, s.Err)
	}
	if err := m.Watch(testWatch); err != nil {
		t.Errorf("Watch on an unavailable meter: %v", err)
	}
	if s := m.Snapshot(); s.Status != StatusPermissionDenied || len(s.Dests)+len(s.Idle) != len(testWatch.Dests) {
		t.Errorf("after Watch: status %v, %d destinations", s.Status, len(s.Dests)+len(s.Idle))
	}
}

// ringResident is how many bytes of ring's mapping are resident in this process (its socket:[inode] mapping
// in /proc/self/smaps): the ring's pages count in the process's RSS from the mmap on.
func ringResident(t *testing.T, r *ring) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	name, in, kib := fmt.Sprintf("socket:[%d]", st.Ino), false, 0
	for line := range strings.Lines(string(smaps)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			in = len(f) == 6 && f[5] == name // a mapping's first line; only the ring's is named for its socket
		case in && len(f) == 3 && f[0] == "Rss:":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			kib += n
		}
	}
	return kib << 10
}

// TestKernelMapsARingPerWatchedFamily: a family's ring is kernel memory resident in the exporter from its
// mmap, so it is mapped when the family is first watched, not when the meter opens: a single-stack node never
// pays for the other family's. Mapped late, it counts at once.
func TestKernelMapsARingPerWatchedFamily(t *testing.T) {
	node, client := newPair(t)
	node.ip(t, "addr add 2001:db8:2::10/64 dev eth0 nodad")
	client.ip(t, "addr add 2001:db8:2::1/64 dev c0 nodad")
	cfg := Config{BlockSize: 64 << 10, Blocks: 4, BlockTimeout: 10 * time.Millisecond}
	m := openIn(t, node, cfg, nil)
	resident := func() [2]int { return [2]int{ringResident(t, m.sys.rings[0]), ringResident(t, m.sys.rings[1])} }
	if got := resident(); got != [2]int{} {
		t.Fatalf("rings resident before any Watch: %v bytes, want none", got)
	}
	d4, d6 := NodeDest(UDP, false, 30053), NodeDest(UDP, true, 30053)
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{d4}}); err != nil {
		t.Fatal(err)
	}
	ringSize := cfg.BlockSize * cfg.Blocks
	if got := resident(); got != [2]int{ringSize, 0} {
		t.Fatalf("rings resident with IPv4 watched: %v bytes, want [%d 0]", got, ringSize)
	}
	sendUDP(t, client, netip.AddrPortFrom(nodeV4, 30053), 3)
	eventually(t, 10*time.Second, "IPv4 datagrams counted", func() bool { return attempts(m, d4) == 3 })
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4, nodeV6}, Dests: []Dest{d4, d6}}); err != nil {
		t.Fatal(err)
	}
	if got := resident(); got != [2]int{ringSize, ringSize} {
		t.Fatalf("rings resident with both families watched: %v bytes, want [%d %d]", got, ringSize, ringSize)
	}
	sendUDP(t, client, netip.AddrPortFrom(nodeV6, 30053), 2)
	eventually(t, 10*time.Second, "IPv6 datagrams counted", func() bool { return attempts(m, d6) == 2 })
}
