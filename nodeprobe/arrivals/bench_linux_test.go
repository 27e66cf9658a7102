package arrivals

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The meter's cost. Figures and the commands that reproduce them: docs/performance.md, "Arrivals meter".
// Benchmarks only measure; nothing here asserts a time.

// benchWatch is a node's watch with n Local Services: a dual-stack NodePort each, every fourth one a
// LoadBalancer with an ingress IP and a health check node port.
func benchWatch(n int) Watch {
	w := Watch{NodeAddrs: []netip.Addr{nodeV4, nodeV6}, Internal: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	for i := range n {
		port := uint16(30000 + i)
		w.Dests = append(w.Dests, NodeDest(TCP, false, port), NodeDest(TCP, true, port))
		if i%4 == 0 {
			w.Dests = append(w.Dests, Dest{Protocol: TCP, Addr: netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}), Port: 443})
			w.HealthChecks = append(w.HealthChecks, NodeDest(TCP, false, uint16(40000+i)))
		}
	}
	w.Dests = append(w.Dests, NodeDest(UDP, false, markerPort), NodeDest(UDP, true, markerPort))
	return w
}

// fakeBlock lays packets out as the kernel does in a TPACKET_V3 block.
func fakeBlock(pkts [][]byte) []byte {
	const hdr = 48 + 20 + 12 // tpacket3_hdr, sockaddr_ll, aligned to 16 below
	b := make([]byte, 1<<20)
	off := 64                                                 // after the block descriptor
	binary.NativeEndian.PutUint32(b[8+4:], uint32(len(pkts))) // num_pkts
	binary.NativeEndian.PutUint32(b[8+8:], uint32(off))       // offset_to_first_pkt
	for i, p := range pkts {
		mac := (hdr + 15) &^ 15
		next := (mac + len(p) + 15) &^ 15
		if i == len(pkts)-1 {
			next = 0
		}
		binary.NativeEndian.PutUint32(b[off:], uint32(next))
		binary.NativeEndian.PutUint32(b[off+12:], uint32(len(p))) // snaplen
		binary.NativeEndian.PutUint16(b[off+24:], uint16(mac))    // mac
		copy(b[off+mac:], p)
		off += next
	}
	return b
}

// BenchmarkUserSpace is the receive loop's work per packet that reached user space: walking the ring
// block, decoding, looking up the destination, counting. No root needed.
func BenchmarkUserSpace(b *testing.B) {
	w := benchWatch(1000)
	for _, c := range []struct {
		name string
		pkt  testPacket
	}{
		{"NodePort SYN", syn("198.18.0.1", nodeV4.String(), 30500)},
		{"IPv6 NodePort SYN", syn("2001:db8:9::1", nodeV6.String(), 30500)},
		{"LB SYN", syn("198.18.0.1", "203.0.1.244", 443)},
		{"health check probe", syn("198.18.0.1", nodeV4.String(), 40000)},
		{"unmatched (coarse filter)", syn("198.18.0.1", "192.0.2.99", 30500)},
	} {
		b.Run(c.name, func(b *testing.B) {
			tl := newTally(Config{}.withDefaults(), nil)
			nw, _ := w.normalize()
			tl.setWatch(nw, testNow)
			const perBlock = 1000
			pkts := make([][]byte, perBlock)
			for i := range pkts {
				p := c.pkt
				p.sport = uint16(1024 + i)
				pkts[i] = p.bytes()
			}
			blk := fakeBlock(pkts)
			var seen int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += perBlock {
				walkBlock(blk, func(data []byte, at int64, _ int32) {
					seen++
					if p, ok := decode(data); ok {
						tl.count(p, at, 0)
					}
				})
			}
			b.StopTimer()
			if seen < b.N {
				b.Fatalf("walked %d packets, want %d", seen, b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seen), "ns/packet")
		})
	}
}

// BenchmarkSnapshot is the gather step's call per scrape: the copy of every destination's counts, with the
// health checks' probers, and Watch with an unchanged Watch (the common case: compared, nothing rebuilt).
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		w := benchWatch(n)
		m := &Meter{cfg: Config{}.withDefaults(), since: time.Now(), done: make(chan struct{})}
		m.tally = newTally(m.cfg, nil)
		if err := m.Watch(w); err != nil {
			b.Fatal(err)
		}
		for i, h := range m.tally.watch.HealthChecks {
			for s := range 3 {
				p := packet{proto: TCP, src: netip.AddrFrom4([4]byte{10, 0, byte(s), byte(i)}), dst: nodeV4, dport: h.Port}
				m.tally.count(p, 1, 0)
			}
		}
		b.Run(fmt.Sprintf("services=%d/Snapshot", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = m.Snapshot()
			}
		})
		b.Run(fmt.Sprintf("services=%d/Watch-unchanged", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Watch(w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFilterBuild is a Watch change: compiling both families' filters for n Services.
func BenchmarkFilterBuild(b *testing.B) {
	for _, n := range []int{100, 1000} {
		nw, _ := benchWatch(n).normalize()
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, v6 := range []bool{false, true} {
					if _, _, err := compileFilter(specFor(nw, v6), FilterExact, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// benchBed is a node and a client linked by a veth pair. The client writes prebuilt IPv4 packets straight
// onto its link (a packet socket: no IP stack on the sending side), so the sending thread's CPU time is
// mostly the node's receive path, which a veth runs in the sender's softirq: the kernel half of the meter
// (its filter and the copy into the ring) shows there. The node drops everything from the client in
// netfilter's input hook, after the meter saw it, so it sends nothing back.
type benchBed struct {
	node, client testNetns
	fd           int // the client's packet socket
	sa           unix.RawSockaddrLinklayer
}

func newBenchBed(b *testing.B) *benchBed {
	bb := &benchBed{}
	bb.node, bb.client = newPair(b)
	bb.node.exec(b, `
table inet arrivals_bench {
	chain input {
		type filter hook input priority filter;
		ip saddr 192.0.2.1 udp dport != 30999 drop
		ip saddr 192.0.2.1 tcp flags & (syn | ack) != 0 drop
	}
}
`, "nft", "-f", "-")
	mac := linkMAC(b, bb.node, "eth0")
	bb.client.do(b, func() {
		ifi, err := net.InterfaceByName("c0")
		if err != nil {
			b.Fatal(err)
		}
		if bb.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			b.Fatal(err)
		}
		var be [2]byte
		binary.BigEndian.PutUint16(be[:], unix.ETH_P_IP)
		bb.sa = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Protocol: binary.NativeEndian.Uint16(be[:]), Ifindex: int32(ifi.Index), Halen: 6}
		copy(bb.sa.Addr[:], mac)
	})
	b.Cleanup(func() { unix.Close(bb.fd) })
	return bb
}

// packets prebuilds n packets to cycle through, each with its own source port.
func benchPackets(n int, mk func(i int) testPacket) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := mk(i)
		p.sport = uint16(1024 + i%60000)
		out[i] = p.bytes()
		ipv4Checksum(out[i])
	}
	return out
}

// unrelated is traffic a node carries that the meter must not count: segments of established connections
// (ACKs, to watched NodePorts and elsewhere), new connections to ports nobody watches, UDP elsewhere.
func unrelated(i int) testPacket {
	src := "192.0.2.1"
	switch i % 4 {
	case 0:
		return withACK(syn(src, nodeV4.String(), 30000+uint16(i%500)))
	case 1:
		p := syn(src, nodeV4.String(), 8443)
		p.tcpFlags = tcpACK | 0x08 // PSH
		return p
	case 2:
		return syn(src, nodeV4.String(), 9000+uint16(i%100))
	}
	return udp(src, nodeV4.String(), 5353)
}

func matchedSYN(i int) testPacket { return syn("192.0.2.1", nodeV4.String(), 30000+uint16(i%500)) }

// threadCPU and processCPU read the scheduler's exact run time (clock_gettime), not getrusage's
// tick-sampled figures, which are too coarse at these durations.
func threadCPU() time.Duration { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

func processCPU() time.Duration { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

func cpuClock(id int32) time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(id, &ts)
	return time.Duration(ts.Nano())
}

// sendOne writes one packet with a raw system call: the Go scheduler is not told about it, so a loop of
// them costs the process nothing but the calls (with syscall.Syscall the runtime's sysmon hands the
// processor off and wakes threads, about half a microsecond of CPU per packet that is not the meter's).
// A packet socket on a veth never blocks.
func (bb *benchBed) sendOne(pkt []byte) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(bb.fd), uintptr(unsafe.Pointer(&pkt[0])), uintptr(len(pkt)), 0,
		uintptr(unsafe.Pointer(&bb.sa)), unix.SizeofSockaddrLinklayer)
	if errno != 0 {
		return errno
	}
	return nil
}

// send writes n packets from pkts (starting at from), paced at rate per second when rate > 0, on the
// calling thread, and returns that thread's CPU time and how many packets the kernel refused.
func (bb *benchBed) send(pkts [][]byte, from, n int, rate float64) (cpu time.Duration, refused int, elapsed time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, t0 := time.Now(), threadCPU()
	for i := range n {
		if rate > 0 && i%64 == 0 {
			if ahead := time.Duration(float64(i)/rate*1e9) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		if bb.sendOne(pkts[(from+i)%len(pkts)]) != nil {
			refused++
		}
	}
	return threadCPU() - t0, refused, time.Since(start)
}

// floodSYN is the i-th SYN of a flood to NodePort 30080, each from a source of its own (10.0.0.0/9), as a
// SYN flood's spoofed sources are: the filter's sample of sources holds a share of them.
func floodSYN(i int) testPacket {
	return syn(netip.AddrFrom4([4]byte{10, byte(i>>16) & 0x7f, byte(i >> 8), byte(i)}).String(), nodeV4.String(), 30080)
}

// benchMarkerSrc is the marker's source: an address in every sample the filter draws below the cap, so the
// marker goes through while the meter samples a flood.
func benchMarkerSrc() netip.Addr {
	for i := uint32(0); ; i++ {
		a := netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
		if inSample(a, sampling{shift: maxSampleShift}) {
			return a
		}
	}
}

// settleMeter waits until the meter has read everything sent before: a marker datagram goes through the
// same ring after the test's packets. It polls one counter, not a Snapshot, so that its own CPU time stays
// out of what the benchmarks attribute to the meter.
func (bb *benchBed) settleMeter(b *testing.B, m *Meter) {
	d := NodeDest(UDP, false, markerPort)
	marks := func() uint64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		if i, ok := m.tally.idx[d]; ok && i >= 0 {
			return m.tally.dests[i].n
		}
		return 0
	}
	before := marks()
	marker := benchPackets(1, func(int) testPacket { return udp(benchMarkerSrc().String(), nodeV4.String(), markerPort) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		_ = bb.sendOne(marker[0])
		time.Sleep(20 * time.Millisecond)
		if marks() > before {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("the meter did not read the marker")
		}
	}
}

// BenchmarkKernel measures what the meter costs per packet sent onto the node's link, for unrelated traffic
// and for matched SYNs. Each iteration sends the same chunk of packets twice, once with nothing watched (the
// sockets unbound: no meter in the receive path) and once with 500 Services watched, in alternating order,
// so load from other jobs on the machine falls on both alike. Per packet it reports the sending thread's CPU
// time both ways (the node's receive path, which a veth runs in the sender's softirq: with the meter on, its
// filter and ring copy) and the rest of the process's CPU time (the meter's reader, its Snapshot calls and
// the Go runtime); the differences are the meter's cost.
func BenchmarkKernel(b *testing.B) {
	bb := newBenchBed(b)
	w := benchWatch(500)
	// No rate budget: this measures the cost of every packet the reader counts.
	m := openIn(b, bb.node, Config{MaxPacketRate: 1 << 30}, nil)
	for _, traffic := range []struct {
		name string
		pkts [][]byte
	}{
		{"unrelated", benchPackets(4096, unrelated)},
		{"matched-SYN", benchPackets(4096, matchedSYN)},
	} {
		b.Run(traffic.name, func(b *testing.B) {
			const chunk = 10000
			var sendCPU, restCPU [2]time.Duration // [off, on]
			var sent [2]int
			var counted, drops uint64
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for i := 0; i < b.N; i += chunk {
				n := min(chunk, b.N-i)
				for k := range 2 {
					on := (k+i/chunk)%2 == 1
					mode := 0
					watch := Watch{NodeAddrs: w.NodeAddrs, Dests: []Dest{NodeDest(UDP, false, markerPort)}}
					if on {
						mode, watch = 1, w
					}
					if err := m.Watch(watch); err != nil {
						b.Fatal(err)
					}
					before := m.Snapshot()
					p0 := processCPU()
					c, _, _ := bb.send(traffic.pkts, i, n, 0)
					bb.settleMeter(b, m)
					restCPU[mode] += processCPU() - p0 - c
					sendCPU[mode] += c
					sent[mode] += n
					after := m.Snapshot()
					drops += after.Families[0].Dropped - before.Families[0].Dropped
					if on {
						for j, d := range after.Dests {
							if d.Port != markerPort {
								counted += d.Attempts - before.Dests[j].Attempts
							}
						}
					}
				}
			}
			runtime.ReadMemStats(&ms1)
			per := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }
			b.ReportMetric(per(sendCPU[0], sent[0]), "off-send-ns/pkt")
			b.ReportMetric(per(sendCPU[1], sent[1]), "on-send-ns/pkt")
			b.ReportMetric(per(restCPU[0], sent[0]), "off-rest-ns/pkt")
			b.ReportMetric(per(restCPU[1], sent[1]), "on-rest-ns/pkt")
			b.ReportMetric(float64(counted)/float64(sent[1]), "counted/pkt")
			b.ReportMetric(float64(drops), "ring-drops")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(sent[0]+sent[1]), "heap-B/pkt")
		})
	}
}

// BenchmarkKernelFlood sends a paced SYN flood to one watched NodePort for LT_FLOOD (default 3 s) at 100,000
// packets/s, with the meter off and on (its default Config, rate budget included), while a scraper calls
// Snapshot every 10 ms. It reports what was sent, counted, dropped by the ring and shed by the budget, the
// meter's CPU share, the sending thread's (the node's receive path) and Snapshot's latency under the flood.
// Run it with -benchtime 1x: one iteration is one flood.
func BenchmarkKernelFlood(b *testing.B) {
	bb := newBenchBed(b)
	const rate = 100_000
	dur := 3 * time.Second
	if d, err := time.ParseDuration(getenv("LT_FLOOD", "3s")); err == nil {
		dur = d
	}
	// The sender loops in raw system calls, which never give its Go processor back: one more processor for
	// it, so the meter and the scraper have the ones an exporter would have (the flood is not the exporter's).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	pkts := benchPackets(60000, floodSYN)
	w := Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{NodeDest(TCP, false, 30080), NodeDest(UDP, false, markerPort)}}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("meter=%v", on), func(b *testing.B) {
			var m *Meter
			if on {
				m = openIn(b, bb.node, Config{}, nil)
				if err := m.Watch(w); err != nil {
					b.Fatal(err)
				}
				bb.settleMeter(b, m)
			}
			for range b.N {
				stop := make(chan struct{})
				lat := make(chan []time.Duration, 1)
				go func() {
					var l []time.Duration
					t := time.NewTicker(10 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-stop:
							lat <- l
							return
						case <-t.C:
							if m != nil {
								s := time.Now()
								_ = m.Snapshot()
								l = append(l, time.Since(s))
							}
						}
					}
				}()
				n := int(float64(rate) * dur.Seconds())
				p0 := processCPU()
				sendCPU, refused, elapsed := bb.send(pkts, 0, n, rate)
				wall := elapsed
				close(stop)
				l := <-lat
				if m != nil {
					bb.settleMeter(b, m)
				}
				other := processCPU() - p0 - sendCPU
				b.ReportMetric(float64(n-refused)/elapsed.Seconds(), "sent-pkt/s")
				b.ReportMetric(100*sendCPU.Seconds()/wall.Seconds(), "send-cpu-%")
				b.ReportMetric(100*other.Seconds()/wall.Seconds(), "rest-cpu-%")
				if m != nil {
					s := m.Snapshot()
					c, _ := s.Dest(NodeDest(TCP, false, 30080))
					b.ReportMetric(float64(c.Attempts), "counted")
					b.ReportMetric(float64(s.Families[0].Dropped), "ring-drops")
					b.ReportMetric(float64(s.Families[0].Shed), "shed")
					slices.Sort(l)
					if len(l) > 0 {
						b.ReportMetric(float64(l[len(l)/2].Microseconds()), "snapshot-p50-µs")
						b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), "snapshot-p99-µs")
						b.ReportMetric(float64(l[len(l)-1].Microseconds()), "snapshot-max-µs")
					}
				}
			}
		})
	}
}

// BenchmarkRetained is the heap the meter keeps for a Watch of n Services (benchWatch: 2.25 destinations
// per Service, a health check for every fourth), after a garbage collection: its counts, its index, and
// the two copies of the Watch it compares the next one with.
func BenchmarkRetained(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := benchWatch(n)
			var ms0, ms1 runtime.MemStats
			var keep []*Meter
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			for range b.N {
				m := &Meter{cfg: Config{}.withDefaults(), done: make(chan struct{})}
				m.tally = newTally(m.cfg, nil)
				if err := m.Watch(w); err != nil {
					b.Fatal(err)
				}
				keep = append(keep, m)
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/float64(b.N*n), "retained-B/service")
			runtime.KeepAlive(keep)
		})
	}
}

// BenchmarkSourceTracking is the cost of telling health checkers from clients (sources.go) per packet that
// reached user space: the same blocks of packets walked, decoded and counted by a tally that keeps no sources
// (Config.CheckerSources -1, the meter before it) and by one that keeps 16 per NodePort (the default),
// alternately in chunks of 1,000, so the machine's drift falls on both alike. Reported: ns/packet of each and
// their ratio. Traffic: SYNs of one source on new ports (a busy client or a NAT), of 4,096 sources in turn (a
// crowd, or a flood from many addresses: every packet a new source, the table full, one forgotten each time),
// and a checker's retransmitted SYNs.
func BenchmarkSourceTracking(b *testing.B) {
	w := benchWatch(1000)
	nw, _ := w.normalize()
	for _, c := range []struct {
		name string
		pkt  func(i int) testPacket
	}{
		{"one source", func(i int) testPacket {
			p := syn("198.18.0.1", nodeV4.String(), 30500)
			p.sport = uint16(1024 + i)
			return p
		}},
		{"4096 sources", func(i int) testPacket {
			p := syn(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8 & 15), byte(i)}).String(), nodeV4.String(), 30500)
			p.sport = uint16(1024 + i)
			return p
		}},
		{"retransmissions", func(i int) testPacket {
			p := syn("198.18.0.1", nodeV4.String(), 30500)
			p.sport = uint16(1024 + i%4)
			return p
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			const perBlock = 1000
			blocks := make([][]byte, 4096/perBlock+1)
			for k := range blocks {
				pkts := make([][]byte, perBlock)
				for i := range pkts {
					pkts[i] = c.pkt(k*perBlock + i).bytes()
				}
				blocks[k] = fakeBlock(pkts)
			}
			tallies := [2]*tally{newTally(Config{CheckerSources: -1}.withDefaults(), nil), newTally(Config{}.withDefaults(), nil)}
			for _, tl := range tallies {
				tl.setWatch(nw, testNow)
			}
			var spent [2]time.Duration
			var seen [2]int
			// Fake receive times a millisecond apart: the sources' intervals change as a real arrival's would.
			at := testNow.UnixNano()
			b.ReportAllocs()
			b.ResetTimer()
			for i, k := 0, 0; i < b.N; i, k = i+perBlock, k+1 {
				side := k % 2
				tl := tallies[side]
				start := time.Now()
				walkBlock(blocks[k/2%len(blocks)], func(data []byte, _ int64, _ int32) {
					seen[side]++
					at += int64(time.Millisecond)
					if p, ok := decode(data); ok {
						tl.count(p, at, 0)
					}
				})
				spent[side] += time.Since(start)
			}
			b.StopTimer()
			if seen[0] == 0 || seen[1] == 0 {
				return // b.N below two chunks: nothing to compare
			}
			off := float64(spent[0].Nanoseconds()) / float64(seen[0])
			on := float64(spent[1].Nanoseconds()) / float64(seen[1])
			b.ReportMetric(off, "ns/packet-off")
			b.ReportMetric(on, "ns/packet-on")
			b.ReportMetric(on/off, "on/off")
		})
	}
}
