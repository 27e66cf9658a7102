package arrivals

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
)

// testPacket describes a packet for the tests; bytes() lays it out from its network header, as a SOCK_DGRAM
// packet socket sees it.
type testPacket struct {
	src, dst     netip.Addr
	proto        Protocol
	sport, dport uint16
	tcpFlags     byte   // TCP
	chunk        byte   // SCTP: the first chunk's type
	frag         uint16 // IPv4: flags and fragment offset
	ipv4Options  int    // IPv4: bytes of options (a multiple of 4)
	hopByHop     bool   // IPv6: a hop-by-hop extension header before the transport header
	truncate     int    // bytes cut off the end
}

func syn(src, dst string, dport uint16) testPacket {
	return testPacket{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: TCP, sport: 40000, dport: dport, tcpFlags: tcpSYN}
}

func udp(src, dst string, dport uint16) testPacket {
	return testPacket{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: UDP, sport: 40000, dport: dport}
}

func sctpInit(src, dst string, dport uint16) testPacket {
	return testPacket{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: SCTP, sport: 40000, dport: dport, chunk: sctpINIT}
}

func (p testPacket) l4() []byte {
	var l4 []byte
	switch p.proto {
	case TCP:
		l4 = make([]byte, 20)
		l4[12] = 5 << 4
		l4[tcpFlags] = p.tcpFlags
		binary.BigEndian.PutUint32(l4[4:], 0x01020304) // sequence number
	case UDP:
		l4 = make([]byte, 8+4)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	case SCTP:
		l4 = make([]byte, 12+20)
		l4[sctpChunk] = p.chunk
	default:
		l4 = make([]byte, 8)
	}
	binary.BigEndian.PutUint16(l4[0:], p.sport)
	binary.BigEndian.PutUint16(l4[2:], p.dport)
	return l4
}

func (p testPacket) bytes() []byte {
	l4 := p.l4()
	var b []byte
	if p.dst.Is4() {
		ihl := 20 + p.ipv4Options
		b = make([]byte, ihl+len(l4))
		b[0] = 4<<4 | byte(ihl/4)
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[ipv4FragOff:], p.frag)
		b[8] = 64
		b[ipv4Proto] = byte(p.proto)
		s, d := p.src.As4(), p.dst.As4()
		copy(b[ipv4Src:], s[:])
		copy(b[ipv4Dst:], d[:])
		for i := 20; i < ihl; i++ {
			b[i] = 1 // NOP options
		}
		copy(b[ihl:], l4)
	} else {
		ext := 0
		if p.hopByHop {
			ext = 8
		}
		b = make([]byte, ipv6Header+ext+len(l4))
		b[0] = 6 << 4
		binary.BigEndian.PutUint16(b[4:], uint16(ext+len(l4)))
		b[ipv6NextHeader] = byte(p.proto)
		b[7] = 64
		s, d := p.src.As16(), p.dst.As16()
		copy(b[ipv6Src:], s[:])
		copy(b[ipv6Dst:], d[:])
		if p.hopByHop {
			b[ipv6NextHeader] = 0
			b[ipv6Header] = byte(p.proto)
		}
		copy(b[ipv6Header+ext:], l4)
	}
	return b[:len(b)-p.truncate]
}

// Packet types (include/uapi/linux/if_packet.h).
const (
	pktHost      = 0
	pktBroadcast = 1
	pktOtherHost = 3
	pktOutgoing  = 4
)

// vmFilter runs a socket filter in golang.org/x/net/bpf's VM. The VM implements no ancillary loads but the
// packet length, so the program is assembled (the bytes the kernel gets), disassembled, and its loads of
// the packet type and interface index are replaced by constants: the same number of instructions, so every
// jump lands where it does in the kernel.
type vmFilter struct {
	prog []bpf.Instruction
}

func newVMFilter(t testing.TB, raw []bpf.RawInstruction) vmFilter {
	t.Helper()
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("filter does not disassemble: %v", raw)
	}
	return vmFilter{prog: prog}
}

func (f vmFilter) run(t testing.TB, pkttype, ifindex uint32, data []byte) int {
	t.Helper()
	prog := make([]bpf.Instruction, len(f.prog))
	for i, in := range f.prog {
		prog[i] = in
		if ext, ok := in.(bpf.LoadExtension); ok {
			switch ext.Num {
			case bpf.ExtType:
				prog[i] = bpf.LoadConstant{Dst: bpf.RegA, Val: pkttype}
			case bpf.ExtInterfaceIndex:
				prog[i] = bpf.LoadConstant{Dst: bpf.RegA, Val: ifindex}
			default:
				t.Fatalf("filter uses extension %d the test cannot substitute", ext.Num)
			}
		}
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("filter rejected by the VM: %v", err)
	}
	n, err := vm.Run(data)
	if err != nil {
		t.Fatalf("filter run: %v", err)
	}
	return n
}

func mustCompile(t testing.TB, w Watch, ipv6 bool, level FilterLevel) []bpf.RawInstruction {
	t.Helper()
	nw, err := w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := buildFilter(specFor(nw, ipv6), level)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func lb(p Protocol, addr string, port uint16) Dest {
	return Dest{Protocol: p, Addr: netip.MustParseAddr(addr), Port: port}
}
