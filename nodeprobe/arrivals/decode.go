package arrivals

import (
	"encoding/binary"
	"net/netip"
)

// packet is what the meter needs of one captured packet.
type packet struct {
	proto        Protocol
	src, dst     netip.Addr
	sport, dport uint16 // sport tells a retransmitted SYN from a new attempt (sources.go)
}

// Offsets into the network header. The kernel filter (filter.go) reads the same fields at the same offsets;
// decode checks again in user space whatever the filter level, and FuzzFilterAgreesWithDecode holds the two
// to the same answer.
const (
	ipv4MinHeader  = 20
	ipv4FragOff    = 6  // flags(3 bits) + fragment offset(13 bits)
	ipv4Proto      = 9  // protocol
	ipv4Src        = 12 // source address
	ipv4Dst        = 16 // destination address
	ipv6Header     = 40 // fixed header; extension headers are not followed (see the package doc)
	ipv6NextHeader = 6
	ipv6Src        = 8
	ipv6Dst        = 24

	l4DstPort   = 2  // TCP, UDP and SCTP all put the destination port at offset 2
	tcpFlags    = 13 // TCP flags byte: CWR ECE URG ACK PSH RST SYN FIN
	sctpChunk   = 12 // the first chunk's type, after the 12-byte common header
	tcpSYN      = 0x02
	tcpACK      = 0x10
	sctpINIT    = 1
	ipv4FragMsk = 0x1fff
)

// l4SnapLen is how much of a matched packet's transport header the kernel copies into the ring, after the IP
// header (the filter returns the sum): what decode reads and no byte more, so no payload (a UDP datagram's
// data) ever reaches the exporter's memory. TCP: through the flags byte; SCTP: the common header and the first
// chunk's type; UDP: its 8-byte header.
func l4SnapLen(p Protocol) uint32 {
	switch p {
	case TCP:
		return tcpFlags + 1
	case SCTP:
		return sctpChunk + 1
	}
	return udpHeader
}

const udpHeader = 8

// decode reads a packet that starts at its network header (a SOCK_DGRAM packet socket) and reports whether it
// is a new connection attempt: a TCP SYN without ACK, an SCTP INIT, or a UDP datagram. Malformed and
// truncated packets, non-first IPv4 fragments and IPv6 packets with extension headers are not. It does not
// allocate.
func decode(b []byte) (packet, bool) {
	if len(b) < 1 {
		return packet{}, false
	}
	var p packet
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < ipv4MinHeader {
			return packet{}, false
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < ipv4MinHeader || len(b) < ihl {
			return packet{}, false
		}
		if binary.BigEndian.Uint16(b[ipv4FragOff:])&ipv4FragMsk != 0 {
			return packet{}, false
		}
		p.proto = Protocol(b[ipv4Proto])
		p.src = netip.AddrFrom4([4]byte(b[ipv4Src : ipv4Src+4]))
		p.dst = netip.AddrFrom4([4]byte(b[ipv4Dst : ipv4Dst+4]))
		l4 = b[ihl:]
	case 6:
		if len(b) < ipv6Header {
			return packet{}, false
		}
		p.proto = Protocol(b[ipv6NextHeader])
		p.src = netip.AddrFrom16([16]byte(b[ipv6Src : ipv6Src+16]))
		p.dst = netip.AddrFrom16([16]byte(b[ipv6Dst : ipv6Dst+16]))
		l4 = b[ipv6Header:]
	default:
		return packet{}, false
	}
	switch p.proto {
	case TCP:
		if len(l4) <= tcpFlags || l4[tcpFlags]&(tcpSYN|tcpACK) != tcpSYN {
			return packet{}, false
		}
	case SCTP:
		if len(l4) <= sctpChunk || l4[sctpChunk] != sctpINIT {
			return packet{}, false
		}
	case UDP:
		if len(l4) < l4DstPort+2 {
			return packet{}, false
		}
	default:
		return packet{}, false
	}
	p.sport = binary.BigEndian.Uint16(l4)
	p.dport = binary.BigEndian.Uint16(l4[l4DstPort:])
	return p, true
}
