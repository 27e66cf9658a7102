package arrivals

import (
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
)

var testWatch = Watch{
	NodeAddrs: addrs("192.0.2.10", "198.51.100.10", "2001:db8::10"),
	Dests: []Dest{
		NodeDest(TCP, false, 30080), NodeDest(TCP, true, 30080),
		NodeDest(UDP, false, 30053), NodeDest(SCTP, false, 30132), NodeDest(SCTP, true, 30132),
		lb(TCP, "203.0.113.7", 80), lb(TCP, "203.0.113.8", 443), lb(UDP, "203.0.113.7", 53),
		lb(TCP, "2001:db8:1::7", 80),
	},
	HealthChecks: []Dest{NodeDest(TCP, false, 31000), NodeDest(TCP, true, 31000)},
}

type filterCase struct {
	name string
	pkt  testPacket
	want bool
}

func filterCases() []filterCase {
	withFlags := func(p testPacket, f byte) testPacket { p.tcpFlags = f; return p }
	withChunk := func(p testPacket, c byte) testPacket { p.chunk = c; return p }
	withFrag := func(p testPacket, f uint16) testPacket { p.frag = f; return p }
	withOpts := func(p testPacket, n int) testPacket { p.ipv4Options = n; return p }
	cut := func(p testPacket, n int) testPacket { p.truncate = n; return p }
	hbh := func(p testPacket) testPacket { p.hopByHop = true; return p }
	return []filterCase{
		{"NodePort SYN to a node address", syn("10.9.9.9", "192.0.2.10", 30080), true},
		{"NodePort SYN to the other node address", syn("10.9.9.9", "198.51.100.10", 30080), true},
		{"NodePort SYN to an address the node routes elsewhere", syn("10.9.9.9", "192.0.2.99", 30080), false},
		{"SYN with ECN bits", withFlags(syn("10.9.9.9", "192.0.2.10", 30080), tcpSYN|0xc0), true},
		{"SYN-ACK", withFlags(syn("10.9.9.9", "192.0.2.10", 30080), tcpSYN|tcpACK), false},
		{"ACK", withFlags(syn("10.9.9.9", "192.0.2.10", 30080), tcpACK), false},
		{"RST", withFlags(syn("10.9.9.9", "192.0.2.10", 30080), 0x04), false},
		{"SYN to an unwatched port", syn("10.9.9.9", "192.0.2.10", 30081), false},
		{"LB SYN", syn("10.9.9.9", "203.0.113.7", 80), true},
		{"LB SYN, port of another LB IP", syn("10.9.9.9", "203.0.113.7", 443), false},
		{"LB SYN, second IP", syn("10.9.9.9", "203.0.113.8", 443), true},
		{"LB UDP", udp("10.9.9.9", "203.0.113.7", 53), true},
		{"TCP to a UDP-only destination", syn("10.9.9.9", "203.0.113.7", 53), false},
		{"NodePort UDP", udp("10.9.9.9", "192.0.2.10", 30053), true},
		{"NodePort UDP on a TCP NodePort", udp("10.9.9.9", "192.0.2.10", 30080), false},
		{"UDP too short for its ports", cut(udp("10.9.9.9", "192.0.2.10", 30053), 11), false},
		{"SCTP INIT", sctpInit("10.9.9.9", "192.0.2.10", 30132), true},
		{"SCTP DATA", withChunk(sctpInit("10.9.9.9", "192.0.2.10", 30132), 0), false},
		{"SCTP INIT-ACK", withChunk(sctpInit("10.9.9.9", "192.0.2.10", 30132), 2), false},
		{"health check probe", syn("10.9.9.9", "192.0.2.10", 31000), true},
		{"IPv4 options", withOpts(syn("10.9.9.9", "192.0.2.10", 30080), 12), true},
		{"IPv4 options, SYN-ACK", withOpts(withFlags(syn("10.9.9.9", "192.0.2.10", 30080), tcpSYN|tcpACK), 40), false},
		{"IPv4 first fragment", withFrag(udp("10.9.9.9", "192.0.2.10", 30053), 0x2000), true},
		{"IPv4 later fragment", withFrag(udp("10.9.9.9", "192.0.2.10", 30053), 0x2000|185), false},
		{"IPv4 don't-fragment", withFrag(syn("10.9.9.9", "192.0.2.10", 30080), 0x4000), true},
		{"TCP header cut before the flags", cut(syn("10.9.9.9", "192.0.2.10", 30080), 7), false},
		{"IPv6 NodePort SYN", syn("2001:db8:9::9", "2001:db8::10", 30080), true},
		{"IPv6 NodePort SYN to an address routed elsewhere", syn("2001:db8:9::9", "2001:db8::11", 30080), false},
		{"IPv6 LB SYN", syn("2001:db8:9::9", "2001:db8:1::7", 80), true},
		{"IPv6 LB SYN, other address", syn("2001:db8:9::9", "2001:db8:1::8", 80), false},
		{"IPv6 LB SYN, same low 32 bits, other prefix", syn("2001:db8:9::9", "2001:db9:1::7", 80), false},
		{"IPv6 SYN-ACK", withFlags(syn("2001:db8:9::9", "2001:db8::10", 30080), tcpSYN|tcpACK), false},
		{"IPv6 hop-by-hop header", hbh(syn("2001:db8:9::9", "2001:db8::10", 30080)), false},
		{"IPv6 health check probe", syn("2001:db8:9::9", "2001:db8::10", 31000), true},
		{"IPv6 UDP to a NodePort watched for IPv4 only", udp("2001:db8:9::9", "2001:db8::10", 30053), false},
		{"IPv6 SCTP INIT", sctpInit("2001:db8:9::9", "2001:db8::10", 30132), true},
		{"IPv6 truncated header", cut(syn("2001:db8:9::9", "2001:db8::10", 30080), 30), false},
	}
}

// matches is the user-space answer: the decoder and the tally's lookup.
func matches(t *tally, b []byte) bool {
	p, ok := decode(b)
	if !ok {
		return false
	}
	di, ci := t.match(p)
	return di >= 0 || ci >= 0
}

func TestFilterExact(t *testing.T) {
	tl := newTally(Config{}.withDefaults(), nil)
	nw, _ := testWatch.normalize()
	tl.setWatch(nw, testNow)
	filters := map[bool]map[FilterLevel]vmFilter{}
	for _, v6 := range []bool{false, true} {
		filters[v6] = map[FilterLevel]vmFilter{}
		for _, l := range []FilterLevel{FilterExact, FilterPorts, FilterProtocol} {
			filters[v6][l] = newVMFilter(t, mustCompile(t, testWatch, v6, l))
		}
	}
	for _, c := range filterCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.pkt.bytes()
			v6 := c.pkt.dst.Is6()
			got := filters[v6][FilterExact].run(t, pktHost, 2, b)
			if (got > 0) != c.want {
				t.Fatalf("exact filter returned %d, want accept=%v", got, c.want)
			}
			if want := headerLen(b); got > 0 && got != want {
				t.Errorf("accepted %d bytes, want the headers' %d", got, want)
			}
			if m := matches(tl, b); m != c.want {
				t.Errorf("decode+match = %v, want %v", m, c.want)
			}
			// Coarser levels pass a superset; user space makes the same decision at every level.
			for _, l := range []FilterLevel{FilterPorts, FilterProtocol} {
				if c.want && filters[v6][l].run(t, pktHost, 2, b) == 0 {
					t.Errorf("%v filter drops a packet the exact filter passes", l)
				}
			}
			if !c.want {
				return
			}
			for _, drop := range []struct {
				name             string
				pkttype, ifindex uint32
			}{
				{"outgoing", pktOutgoing, 2},
				{"another host's frame", pktOtherHost, 2},
				{"broadcast", pktBroadcast, 2},
				{"received on lo", pktHost, loopbackIfindex},
			} {
				for _, l := range []FilterLevel{FilterExact, FilterPorts, FilterProtocol} {
					if n := filters[v6][l].run(t, drop.pkttype, drop.ifindex, b); n != 0 {
						t.Errorf("%v filter accepts the packet %s", l, drop.name)
					}
				}
			}
		})
	}
}

func TestFilterPortsLevel(t *testing.T) {
	f := newVMFilter(t, mustCompile(t, testWatch, false, FilterPorts))
	if f.run(t, pktHost, 2, syn("10.9.9.9", "192.0.2.99", 30080).bytes()) == 0 {
		t.Error("ports level checks the destination address")
	}
	if f.run(t, pktHost, 2, syn("10.9.9.9", "192.0.2.10", 30081).bytes()) != 0 {
		t.Error("ports level passes an unwatched port")
	}
	p := newVMFilter(t, mustCompile(t, testWatch, false, FilterProtocol))
	if p.run(t, pktHost, 2, syn("10.9.9.9", "192.0.2.10", 30081).bytes()) == 0 {
		t.Error("protocol level checks the port")
	}
	if p.run(t, pktHost, 2, withACK(syn("10.9.9.9", "192.0.2.10", 30081)).bytes()) != 0 {
		t.Error("protocol level passes an ACK")
	}
	if p.run(t, pktHost, 2, sctpInit("10.9.9.9", "192.0.2.10", 40000).bytes()) == 0 {
		t.Error("protocol level drops SCTP while SCTP is watched")
	}
	tcpOnly := Watch{NodeAddrs: testWatch.NodeAddrs, Dests: []Dest{NodeDest(TCP, false, 30080)}}
	q := newVMFilter(t, mustCompile(t, tcpOnly, false, FilterProtocol))
	if q.run(t, pktHost, 2, udp("10.9.9.9", "192.0.2.10", 30080).bytes()) != 0 {
		t.Error("protocol level passes UDP while only TCP is watched")
	}
}

func withACK(p testPacket) testPacket { p.tcpFlags |= tcpACK; return p }

// TestFilterLargeWatch: hundreds of addresses and ports put jump targets more than 255 instructions away
// (the reach of a conditional jump); every watched destination must still be found and its neighbours not.
func TestFilterLargeWatch(t *testing.T) {
	w := Watch{NodeAddrs: addrs("192.0.2.10", "2001:db8::10")}
	for i := range 600 {
		w.Dests = append(w.Dests,
			Dest{Protocol: TCP, Addr: netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}), Port: 443},
			NodeDest(TCP, false, uint16(30000+2*i)))
	}
	for i := range 150 {
		w.Dests = append(w.Dests, Dest{Protocol: TCP, Addr: netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", 2*i+1)), Port: uint16(80 + i%3)})
	}
	for _, v6 := range []bool{false, true} {
		nw, _ := w.normalize()
		raw, level, err := compileFilter(specFor(nw, v6), FilterExact, nil)
		if err != nil {
			t.Fatal(err)
		}
		if level != FilterExact {
			t.Fatalf("ipv6=%v: level %v, want exact (%d instructions)", v6, level, len(raw))
		}
		t.Logf("ipv6=%v: %d instructions", v6, len(raw))
		f := newVMFilter(t, raw)
		for _, d := range nw.Dests {
			if d.IPv6() != v6 {
				continue
			}
			dst := d.Addr
			if d.IsNode() {
				dst = netip.MustParseAddr("192.0.2.10")
			}
			if f.run(t, pktHost, 2, syn(srcFor(dst), dst.String(), d.Port).bytes()) == 0 {
				t.Fatalf("%v not accepted", d)
			}
			if f.run(t, pktHost, 2, syn(srcFor(dst), dst.Next().String(), d.Port).bytes()) != 0 && !d.IsNode() {
				if _, watched := slicesFind(nw.Dests, Dest{Protocol: TCP, Addr: dst.Next(), Port: d.Port}); !watched {
					t.Fatalf("%v accepted at %v", d, dst.Next())
				}
			}
			if !d.IsNode() && f.run(t, pktHost, 2, syn(srcFor(dst), dst.String(), d.Port+7).bytes()) != 0 {
				t.Fatalf("%v accepted on port %d", d, d.Port+7)
			}
		}
	}
}

func srcFor(a netip.Addr) string {
	if a.Is6() {
		return "2001:db8:9::9"
	}
	return "10.9.9.9"
}

func slicesFind(ds []Dest, d Dest) (int, bool) {
	for i, x := range ds {
		if x == d {
			return i, true
		}
	}
	return -1, false
}

// TestFilterTooLargeFallsBack: when the exact filter exceeds BPF_MAXINSNS the next level is used, and when
// the kernel refuses a program (net.core.optmem_max) the next one is tried.
func TestFilterTooLargeFallsBack(t *testing.T) {
	w := Watch{}
	for i := range 5000 {
		w.Dests = append(w.Dests, Dest{Protocol: TCP, Addr: netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}), Port: uint16(80 + i%2)})
	}
	nw, _ := w.normalize()
	spec := specFor(nw, false)
	exact, err := buildFilter(spec, FilterExact)
	if err != nil {
		t.Fatal(err)
	}
	if len(exact) <= maxInsns {
		t.Fatalf("the test needs an exact filter over %d instructions, got %d", maxInsns, len(exact))
	}
	_, level, err := compileFilter(spec, FilterExact, nil)
	if err != nil || level != FilterPorts {
		t.Fatalf("level %v, err %v; want ports", level, err)
	}
	refused := 0
	_, level, err = compileFilter(spec, FilterExact, func(raw []bpf.RawInstruction) error {
		// The first level asked (ports: exact is over the instruction limit) is refused.
		if refused == 0 {
			refused++
			return fmt.Errorf("ENOMEM")
		}
		return nil
	})
	if err != nil || level != FilterProtocol {
		t.Fatalf("level %v, want protocol after the kernel refused the larger ones", level)
	}
	if refused == 0 {
		t.Fatal("fits was not asked")
	}
	raw, level, err := compileFilter(specFor(Watch{}, true), FilterExact, nil)
	if err != nil || level != FilterNone || len(raw) != 1 {
		t.Fatalf("empty watch: level %v, %d instructions, err %v", level, len(raw), err)
	}
}

// TestFilterNodeDestWithoutNodeAddress: a NodePort of a family with no node address cannot be reached:
// nothing of that family is watched, and the socket stays unbound.
func TestFilterNodeDestWithoutNodeAddress(t *testing.T) {
	w := Watch{NodeAddrs: addrs("192.0.2.10"), Dests: []Dest{NodeDest(TCP, false, 30080), NodeDest(TCP, true, 30080)}}
	nw, _ := w.normalize()
	if specFor(nw, true).empty() == false {
		t.Fatal("IPv6 spec not empty without an IPv6 node address")
	}
	if specFor(nw, false).empty() {
		t.Fatal("IPv4 spec empty")
	}
}

func TestAsmFarJumps(t *testing.T) {
	// A conditional jump over 600 instructions, both ways, and a fall-through.
	for _, pad := range []int{0, 254, 255, 256, 600} {
		a := &asm{}
		yes, no := a.label(), a.label()
		a.emit(bpf.LoadAbsolute{Off: 0, Size: 1})
		a.jif(bpf.JumpEqual, 7, yes, no)
		for range pad {
			a.emit(bpf.TAX{})
		}
		a.mark(no)
		a.emit(bpf.RetConstant{Val: 1})
		a.mark(yes)
		a.emit(bpf.RetConstant{Val: 2})
		prog, err := a.assemble()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := bpf.Assemble(prog)
		if err != nil {
			t.Fatal(err)
		}
		f := newVMFilter(t, raw)
		if got := f.run(t, 0, 0, []byte{7}); got != 2 {
			t.Errorf("pad %d: 7 → %d, want 2", pad, got)
		}
		if got := f.run(t, 0, 0, []byte{8}); got != 1 {
			t.Errorf("pad %d: 8 → %d, want 1", pad, got)
		}
	}
}

// headerLen is the IP header's length plus the transport bytes decode reads (l4SnapLen): what the filter
// accepts of a matched packet.
func headerLen(b []byte) int {
	if b[0]>>4 == 6 {
		return ipv6Header + int(l4SnapLen(Protocol(b[ipv6NextHeader])))
	}
	return int(b[0]&0x0f)*4 + int(l4SnapLen(Protocol(b[ipv4Proto])))
}
