package arrivals

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/bpf"
)

// Kernel constants the filter compares with (include/uapi/linux/if_packet.h, include/net/net_namespace.h).
const (
	packetHost = 0 // PACKET_HOST: addressed to this host at layer 2
	// loopbackIfindex is LOOPBACK_IFINDEX: every network namespace's lo has index 1. The kernel re-receives on
	// lo what the node sends to itself, so excluding it excludes locally generated traffic.
	loopbackIfindex = 1
	// maxInsns is BPF_MAXINSNS.
	maxInsns = 4096
)

// familySpec is one IP family's part of a Watch as the filter sees it: per protocol, per destination port,
// the destination addresses that count (NodeDests expanded to the family's node addresses).
type familySpec struct {
	ipv6  bool
	ports map[Protocol]map[uint16][]netip.Addr
	// sample: accept the matched packets of one source in 2^sample.shift (sample.go); 0 accepts every one.
	sample sampling
}

var protocols = []Protocol{TCP, UDP, SCTP}

func specFor(w Watch, ipv6 bool) familySpec {
	s := familySpec{ipv6: ipv6, ports: map[Protocol]map[uint16][]netip.Addr{}}
	var node []netip.Addr
	for _, a := range w.NodeAddrs {
		if a.Is6() == ipv6 {
			node = append(node, a)
		}
	}
	add := func(d Dest) {
		if d.IPv6() != ipv6 {
			return
		}
		addrs := []netip.Addr{d.Addr}
		if d.IsNode() {
			addrs = node
		}
		if len(addrs) == 0 {
			return // a NodePort of a family without node addresses: nothing can arrive there
		}
		if s.ports[d.Protocol] == nil {
			s.ports[d.Protocol] = map[uint16][]netip.Addr{}
		}
		s.ports[d.Protocol][d.Port] = append(s.ports[d.Protocol][d.Port], addrs...)
	}
	for _, d := range w.Dests {
		add(d)
	}
	for _, d := range w.HealthChecks {
		add(d)
	}
	for _, byPort := range s.ports {
		for p, addrs := range byPort {
			slices.SortFunc(addrs, netip.Addr.Compare)
			byPort[p] = slices.Compact(addrs)
		}
	}
	return s
}

func (s familySpec) empty() bool { return len(s.ports) == 0 }

// buildFilter returns the socket filter for one family at one level. The program runs on every IPv4 (or
// IPv6) packet the node receives, from its network header (a SOCK_DGRAM packet socket):
//
//  1. not PACKET_HOST (another host's frame seen in promiscuous mode, broadcast, multicast) → drop;
//  2. received on lo (the node talking to itself) → drop;
//  3. not IPv4 (IPv6), an IPv4 header shorter than 20 bytes, an IPv4 non-first fragment, IPv6 with an
//     extension header, a protocol nobody watches → drop;
//  4. TCP without SYN or with ACK, SCTP whose first chunk is not INIT → drop;
//  5. destination port not watched for the protocol → drop (a binary search);
//  6. destination address not watched for that port → drop (a binary search; FilterExact only);
//  7. while sampling under a flood (sample.go), drop the packets of sources outside the sample;
//  8. accept the IP and transport headers alone (l4SnapLen), never payload.
func buildFilter(s familySpec, level FilterLevel) ([]bpf.Instruction, error) {
	a := &asm{}
	drop, accept := a.label(), a.label()

	a.emit(bpf.LoadExtension{Num: bpf.ExtType})
	a.jif(bpf.JumpNotEqual, packetHost, drop, next)
	a.emit(bpf.LoadExtension{Num: bpf.ExtInterfaceIndex})
	a.jif(bpf.JumpEqual, loopbackIfindex, drop, next)
	// The version (and for IPv4 a header length of at least 20 bytes), as ip_rcv checks: garbage never
	// reaches kube-proxy, so it is no arrival.
	a.emit(bpf.LoadAbsolute{Off: 0, Size: 1})
	if s.ipv6 {
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
		a.jif(bpf.JumpNotEqual, 0x60, drop, next)
		a.emit(bpf.LoadAbsolute{Off: ipv6NextHeader, Size: 1})
	} else {
		a.jif(bpf.JumpLessThan, 0x45, drop, next)
		a.jif(bpf.JumpGreaterThan, 0x4f, drop, next)
		a.emit(bpf.LoadAbsolute{Off: ipv4FragOff, Size: 2})
		a.jif(bpf.JumpBitsSet, ipv4FragMsk, drop, next)
		a.emit(bpf.LoadAbsolute{Off: ipv4Proto, Size: 1})
	}
	protoLabel := map[Protocol]label{}
	for _, p := range protocols {
		if len(s.ports[p]) > 0 {
			protoLabel[p] = a.label()
			a.jif(bpf.JumpEqual, uint32(p), protoLabel[p], next)
		}
	}
	a.ja(drop)

	// load emits a load of the transport header byte(s) at off: after the IPv4 header (X holds its length,
	// set by LoadMemShift) or the fixed IPv6 header.
	load := func(off uint32, size int) {
		if s.ipv6 {
			a.emit(bpf.LoadAbsolute{Off: ipv6Header + off, Size: size})
		} else {
			a.emit(bpf.LoadIndirect{Off: off, Size: size})
		}
	}
	blocks := map[string]label{} // one address check per distinct address set, shared by ports and protocols
	var blockOrder []string
	blockAddrs := map[string][]netip.Addr{}
	for _, p := range protocols {
		l, ok := protoLabel[p]
		if !ok {
			continue
		}
		a.mark(l)
		if !s.ipv6 {
			a.emit(bpf.LoadMemShift{Off: 0})
		}
		switch p {
		case TCP:
			load(tcpFlags, 1)
			a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: tcpSYN | tcpACK})
			a.jif(bpf.JumpNotEqual, tcpSYN, drop, next)
		case SCTP:
			load(sctpChunk, 1)
			a.jif(bpf.JumpNotEqual, sctpINIT, drop, next)
		}
		if level == FilterProtocol {
			// UDP: a datagram too short for its ports is dropped by the load itself (out of bounds).
			load(l4DstPort, 2)
			a.ja(accept)
			continue
		}
		load(l4DstPort, 2)
		ports := make([]uint16, 0, len(s.ports[p]))
		for port := range s.ports[p] {
			ports = append(ports, port)
		}
		slices.Sort(ports)
		keys := make([]uint32, len(ports))
		targets := make([]label, len(ports))
		for i, port := range ports {
			keys[i] = uint32(port)
			targets[i] = accept
			if level == FilterExact {
				addrs := s.ports[p][port]
				k := addrKey(addrs)
				if _, ok := blocks[k]; !ok {
					blocks[k] = a.label()
					blockOrder = append(blockOrder, k)
					blockAddrs[k] = addrs
				}
				targets[i] = blocks[k]
			}
		}
		a.tree(keys, func(i int) label { return targets[i] }, drop)
	}
	for _, k := range blockOrder {
		a.mark(blocks[k])
		addrCheck(a, s.ipv6, blockAddrs[k], accept, drop)
	}
	// Accept the headers alone (l4SnapLen): the protocol again, then the IP header's length (X, for IPv4, still
	// holds it from LoadMemShift; IPv6's is fixed) plus the transport bytes decode reads.
	a.mark(accept)
	emitSample(a, s.ipv6, s.sample, drop)
	if s.ipv6 {
		a.emit(bpf.LoadAbsolute{Off: ipv6NextHeader, Size: 1})
	} else {
		a.emit(bpf.LoadAbsolute{Off: ipv4Proto, Size: 1})
	}
	retLabel := map[Protocol]label{}
	for _, p := range protocols {
		if _, ok := protoLabel[p]; ok {
			retLabel[p] = a.label()
			a.jif(bpf.JumpEqual, uint32(p), retLabel[p], next)
		}
	}
	a.ja(drop)
	for _, p := range protocols {
		l, ok := retLabel[p]
		if !ok {
			continue
		}
		a.mark(l)
		if s.ipv6 {
			a.emit(bpf.RetConstant{Val: ipv6Header + l4SnapLen(p)})
			continue
		}
		a.emit(bpf.TXA{})
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: l4SnapLen(p)})
		a.emit(bpf.RetA{})
	}
	a.mark(drop)
	a.emit(bpf.RetConstant{Val: 0})
	return a.assemble()
}

func addrKey(addrs []netip.Addr) string {
	var b strings.Builder
	for _, a := range addrs {
		b.Write(a.AsSlice())
	}
	return b.String()
}

// addrCheck emits a search of the packet's destination address among addrs (sorted, one family).
func addrCheck(a *asm, ipv6 bool, addrs []netip.Addr, accept, drop label) {
	if !ipv6 {
		a.emit(bpf.LoadAbsolute{Off: ipv4Dst, Size: 4})
		keys := make([]uint32, len(addrs))
		for i, ad := range addrs {
			b := ad.As4()
			keys[i] = binary.BigEndian.Uint32(b[:])
		}
		a.tree(keys, func(int) label { return accept }, drop)
		return
	}
	// IPv6: search on the last 32 bits (where the addresses of one pool differ), then compare the other three
	// words of each address with those last bits.
	words := func(ad netip.Addr) [4]uint32 {
		b := ad.As16()
		return [4]uint32{binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
	}
	byLast := map[uint32][][4]uint32{}
	var keys []uint32
	for _, ad := range addrs {
		w := words(ad)
		if _, ok := byLast[w[3]]; !ok {
			keys = append(keys, w[3])
		}
		byLast[w[3]] = append(byLast[w[3]], w)
	}
	slices.Sort(keys)
	verify := make([]label, len(keys))
	for i := range keys {
		verify[i] = a.label()
	}
	a.emit(bpf.LoadAbsolute{Off: ipv6Dst + 12, Size: 4})
	a.tree(keys, func(i int) label { return verify[i] }, drop)
	for i, k := range keys {
		a.mark(verify[i])
		for _, w := range byLast[k] {
			miss := a.label()
			for j := 0; j < 3; j++ {
				a.emit(bpf.LoadAbsolute{Off: ipv6Dst + uint32(4*j), Size: 4})
				a.jif(bpf.JumpNotEqual, w[j], miss, next)
			}
			a.ja(accept)
			a.mark(miss)
		}
		a.ja(drop)
	}
}

// compileFilter builds the finest filter for s that fits in BPF_MAXINSNS, starting at from, and returns it
// with its level. fits reports whether the kernel takes a program (net.core.optmem_max can refuse a large
// one); nil means only the instruction limit applies.
func compileFilter(s familySpec, from FilterLevel, fits func([]bpf.RawInstruction) error) ([]bpf.RawInstruction, FilterLevel, error) {
	if s.empty() {
		return dropAll(), FilterNone, nil
	}
	var lastErr error
	for level := from; level <= FilterProtocol; level++ {
		prog, err := buildFilter(s, level)
		if err != nil {
			return nil, 0, err
		}
		if len(prog) > maxInsns {
			continue
		}
		raw, err := bpf.Assemble(prog)
		if err != nil {
			return nil, 0, err
		}
		if fits != nil {
			if err := fits(raw); err != nil {
				lastErr = err
				continue
			}
		}
		return raw, level, nil
	}
	return nil, 0, lastErr
}

func dropAll() []bpf.RawInstruction {
	raw, _ := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	return raw
}
