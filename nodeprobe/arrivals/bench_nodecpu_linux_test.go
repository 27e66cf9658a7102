package arrivals

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nodeBusy is the whole machine's busy CPU time so far from /proc/stat's first line: user, nice, system, irq,
// softirq and steal, in every core (idle and iowait left out). softirq is where a packet's receive path runs
// when it is not run in the sender's context; counted here either way.
func nodeBusy(b *testing.B) time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		b.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ, 100 on every Linux ABI
}

// BenchmarkKernelNodeCPU is the meter's cost to the whole node under matched SYNs to a watched NodePort (the
// node drops them in netfilter, as a blackhole does), at 1,000 per second and as fast as the veth pair takes
// them, meter off against meter on (its default Config: the reader's rate budget included). Each rate runs in
// alternating chunks, off and on, so the machine's drift falls on both alike; the figures are ratios of one run.
// It reports, per side, the machine's busy CPU (/proc/stat: every core, softirq included) and this process's
// exact CPU (the sending thread, which on a veth runs the node's receive path, the meter's filter and ring copy
// included; and the rest: the meter's reader), as shares of one core, and their differences, the meter's cost.
// Run it with -benchtime 1x: a rate's 8 chunks of 5 s each.
func BenchmarkKernelNodeCPU(b *testing.B) {
	bb := newBenchBed(b)
	const chunk = 5 * time.Second
	pkts := benchPackets(60000, floodSYN)
	m := openIn(b, bb.node, Config{}, nil)
	marker := Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{NodeDest(UDP, false, markerPort)}}
	on := Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{NodeDest(TCP, false, 30080), NodeDest(UDP, false, markerPort)}}
	for _, rate := range []float64{1000, 0} {
		name := fmt.Sprintf("rate=%.0f", rate)
		if rate == 0 {
			name = "rate=max"
		}
		b.Run(name, func(b *testing.B) {
			var node, proc, wall [2]time.Duration // [off, on]
			var sent [2]int
			for range b.N {
				for round := range 4 {
					for k := range 2 {
						side := (k + round) % 2
						w := marker
						if side == 1 {
							w = on
						}
						if err := m.Watch(w); err != nil {
							b.Fatal(err)
						}
						bb.settleMeter(b, m)
						n0, p0, t0 := nodeBusy(b), processCPU(), time.Now()
						n := 0
						if rate > 0 {
							n = int(rate * chunk.Seconds())
							_, _, _ = bb.send(pkts, 0, n, rate) // paced over the whole chunk
						}
						for rate == 0 && time.Since(t0) < chunk {
							_, _, _ = bb.send(pkts, n, 20000, 0)
							n += 20000
						}
						bb.settleMeter(b, m)
						node[side] += nodeBusy(b) - n0
						proc[side] += processCPU() - p0
						wall[side] += time.Since(t0)
						sent[side] += n
					}
				}
			}
			share := func(d, w time.Duration) float64 { return 100 * d.Seconds() / w.Seconds() }
			b.ReportMetric(float64(sent[1])/wall[1].Seconds(), "on-pkt/s")
			b.ReportMetric(float64(sent[0])/wall[0].Seconds(), "off-pkt/s")
			b.ReportMetric(share(node[0], wall[0]), "off-node-cpu-%")
			b.ReportMetric(share(node[1], wall[1]), "on-node-cpu-%")
			b.ReportMetric(share(proc[0], wall[0]), "off-proc-cpu-%")
			b.ReportMetric(share(proc[1], wall[1]), "on-proc-cpu-%")
			// Per packet: the meter's cost does not depend on how fast the two sides happened to send.
			per := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }
			b.ReportMetric(per(proc[1], sent[1])-per(proc[0], sent[0]), "meter-proc-ns/pkt")
			b.ReportMetric(per(node[1], sent[1])-per(node[0], sent[0]), "meter-node-ns/pkt")
			s := m.Snapshot()
			b.ReportMetric(float64(s.Families[0].Shed), "shed")
			b.ReportMetric(float64(s.Families[0].Dropped), "ring-drops")
		})
	}
}
