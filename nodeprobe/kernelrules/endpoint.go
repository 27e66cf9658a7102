package kernelrules

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// Endpoint is one local endpoint kube-proxy's rules send a Service port's external traffic to, by identity
// (dataplane.Endpoint).
//
// kube-proxy names every endpoint after its address. The reader keeps the address where the rules spell
// it — the "ns/name:port -> ip:port" comment of a KUBE-SVL (≤1.23: KUBE-XLB) jump, an nftables dnat in the
// local-* chain (plain or numgen map), the name of an nftables endpoint-* chain — and otherwise kube-proxy's
// hash of it (a chainName): iptables drops its rule comments in large-cluster mode (more than 1,000
// endpoints) and older releases wrote other comments there ("Balancing rule 0 for ..."), and an nftables
// chain name longer than 240 bytes is truncated. Is compares either form with an endpoint of the API.
type Endpoint = dataplane.Endpoint

// chainName is kube-proxy's hash of an endpoint whose address the rules do not spell: iptables'
// KUBE-SEP-<16 characters>, or the first 8 characters of an nftables endpoint chain's hash (the rest zero).
type chainName struct {
	chain     portKey
	chainKind chainKind
}

type chainKind uint8

const (
	_ chainKind = iota // the zero value: no chain
	// sepChain: KUBE-SEP-<h>, h = base32(sha256("ns/name[:port]" + protocol + "ip:port"))[:16]
	// (servicePortEndpointChainName in pkg/proxy/iptables/proxier.go; "ip:port" as net.JoinHostPort writes it).
	sepChain
	// nftEPChain: endpoint-<h>-…, h = base32(sha256("ns/name/protocol/port__ip/port"))[:8] with an IPv6
	// address's colons written as dots (servicePortEndpointChainNameBase in pkg/proxy/nftables/proxier.go).
	nftEPChain
)

// Is implements dataplane.EndpointName: the chain is kube-proxy's hash of the API's endpoint ep of sp.
func (c chainName) Is(sp ServicePort, ep netip.AddrPort) bool {
	switch c.chainKind {
	case sepChain:
		if c.chain == sepKey(sp, "", ep) {
			return true
		}
		// Old releases spelled unnamed ports "ns/name:" (see lookup).
		return sp.Port == "" && c.chain == sepKey(sp, ":", ep)
	case nftEPChain:
		return c.chain == nftEndpointKey(sp, ep)
	}
	return false
}

// String is the chain's name as the rules spell it (an nftables one up to its hash).
func (c chainName) String() string {
	switch c.chainKind {
	case sepChain:
		return "KUBE-SEP-" + string(c.chain[:])
	case nftEPChain:
		return "endpoint-" + string(c.chain[:8])
	}
	return "?"
}

// chainEndpoint is the endpoint kube-proxy's hash names.
func chainEndpoint(chain portKey, kind chainKind) Endpoint {
	return Endpoint{Name: chainName{chain: chain, chainKind: kind}}
}

func compareEndpoints(a, b Endpoint) int {
	if a.Addr.IsValid() != b.Addr.IsValid() {
		if a.Addr.IsValid() {
			return -1
		}
		return 1
	}
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	an, _ := a.Name.(chainName)
	bn, _ := b.Name.(chainName)
	if an.chainKind != bn.chainKind {
		return int(an.chainKind) - int(bn.chainKind)
	}
	return strings.Compare(string(an.chain[:]), string(bn.chain[:]))
}

// sortEndpoints sorts every state's Endpoints in place. Only for states no snapshot shares yet.
func sortEndpoints(ports map[portKey]*PortState) {
	for _, st := range ports {
		if len(st.Endpoints) > 1 {
			slices.SortFunc(st.Endpoints, compareEndpoints)
		}
	}
}

// sepKey is the KUBE-SEP hash of endpoint ep of sp (suffix "" or ":", as spKey).
func sepKey(sp ServicePort, suffix string, ep netip.AddrPort) portKey {
	var buf [256]byte
	b := appendLower(appendPortName(buf[:0], sp, suffix), sp.Protocol)
	b = ep.AppendTo(b) // "ip:port", "[ip6]:port": net.JoinHostPort's spelling
	return keyOf(b)
}

// nftEndpointKey is the 8-character hash of the nftables endpoint chain of ep of sp.
func nftEndpointKey(sp ServicePort, ep netip.AddrPort) portKey {
	var buf [256]byte
	b := append(buf[:0], sp.Namespace...)
	b = append(b, '/')
	b = append(b, sp.Name...)
	b = append(b, '/')
	b = appendLower(b, sp.Protocol)
	b = append(b, '/')
	b = append(b, sp.Port...)
	b = append(b, "__"...)
	b = append(b, strings.ReplaceAll(ep.Addr().String(), ":", ".")...)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(ep.Port()), 10)
	sum := sha256.Sum256(b)
	var k portKey
	var enc [16]byte
	base32.StdEncoding.Encode(enc[:], sum[:10])
	copy(k[:8], enc[:8])
	return k
}

func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// sepEndpoint is the endpoint a KUBE-SVL/KUBE-XLB jump to KUBE-SEP-<sep> sends traffic to: the address of
// its "<ns/name:port> -> <ip:port>" comment, else the chain's hash.
func sepEndpoint(comment []byte, sep portKey) Endpoint {
	if i := bytes.LastIndex(comment, arrow); i >= 0 {
		if ap, ok := parseAddrPort(comment[i+len(arrow):]); ok {
			return Endpoint{Addr: ap}
		}
	}
	return chainEndpoint(sep, sepChain)
}

var arrow = []byte(" -> ")

// parseAddrPort reads "ip:port" or "[ip6]:port". IPv4, what nearly every cluster has, is read in place: the
// nat table of a large node holds thousands of these, and converting each to a string to parse it was a
// third of the parse's allocations.
func parseAddrPort(b []byte) (netip.AddrPort, bool) {
	colon := bytes.LastIndexByte(b, ':')
	if colon < 0 || bytes.IndexByte(b[:colon], ':') >= 0 || len(b) > 0 && b[0] == '[' {
		ap, err := netip.ParseAddrPort(string(b))
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err == nil
	}
	var ip [4]byte
	octet, digits, dots := 0, 0, 0
	for _, c := range b[:colon] {
		switch {
		case c >= '0' && c <= '9' && digits < 3 && !(digits > 0 && octet == 0):
			octet, digits = octet*10+int(c-'0'), digits+1
			if octet > 255 {
				return netip.AddrPort{}, false
			}
		case c == '.' && digits > 0 && dots < 3:
			ip[dots], octet, digits, dots = byte(octet), 0, 0, dots+1
		default:
			return netip.AddrPort{}, false
		}
	}
	if dots != 3 || digits == 0 {
		return netip.AddrPort{}, false
	}
	ip[3] = byte(octet)
	port := 0
	for i, c := range b[colon+1:] {
		if c < '0' || c > '9' || i >= 5 || i > 0 && port == 0 {
			return netip.AddrPort{}, false
		}
		port = port*10 + int(c-'0')
	}
	if colon+1 == len(b) || port > 65535 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(netip.AddrFrom4(ip), uint16(port)), true
}

// epArena carves the Endpoints of many ports out of shared chunks while a save is parsed, instead of one
// small slice per port. A save lists rules chain by chain, so a port's jumps are consecutive and its
// endpoints grow at the tail of the current chunk; each port's slice is capped, so nothing appended to one
// ever reaches another's.
type epArena struct {
	chunk []Endpoint
	owner *PortState // whose endpoints end the chunk
	start int        // where they begin
}

func (a *epArena) add(st *PortState, e Endpoint) {
	if a.owner != st || len(a.chunk) == cap(a.chunk) {
		n := len(st.Endpoints)
		if cap(a.chunk)-len(a.chunk) < n+1 {
			a.chunk = make([]Endpoint, 0, max(min(2*cap(a.chunk), 256), 16, n+1))
		}
		a.owner, a.start = st, len(a.chunk)
		a.chunk = append(a.chunk, st.Endpoints...)
	}
	a.chunk = append(a.chunk, e)
	st.Endpoints = a.chunk[a.start:len(a.chunk):len(a.chunk)]
}

// nftEndpointChain is the endpoint of an nftables chain named "endpoint-<h8>-ns/name/proto/port__ip/port"
// (IPv6 colons written as dots): the address and port of its name, else (a name kube-proxy truncated to
// fit nftables' limit, ending in "...") the hash; ok is false for a name of another shape.
func nftEndpointChain(name string) (Endpoint, bool) {
	rest, ok := strings.CutPrefix(name, "endpoint-")
	if !ok || len(rest) < 10 || rest[8] != '-' {
		return Endpoint{}, false
	}
	var chain portKey
	copy(chain[:8], rest[:8])
	hashed := chainEndpoint(chain, nftEPChain)
	body := rest[9:]
	if strings.HasSuffix(body, "...") {
		return hashed, true
	}
	_, ep, found := strings.Cut(body, "__")
	if !found {
		return hashed, true
	}
	slash := strings.LastIndexByte(ep, '/')
	if slash < 0 {
		return hashed, true
	}
	port, err := strconv.ParseUint(ep[slash+1:], 10, 16)
	if err != nil {
		return hashed, true
	}
	ip := ep[:slash]
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		// IPv6: kube-proxy wrote the colons as dots.
		if addr, err = netip.ParseAddr(strings.ReplaceAll(ip, ".", ":")); err != nil || !addr.Is6() {
			return hashed, true
		}
	}
	return Endpoint{Addr: netip.AddrPortFrom(addr.Unmap(), uint16(port))}, true
}

// addrEndpoint is an nftables dnat target "ip" with its port ("" when the dnat gives none).
func addrEndpoint(ip, port string) (Endpoint, bool) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return Endpoint{}, false
	}
	var p uint64
	if port != "" {
		if p, err = strconv.ParseUint(port, 10, 16); err != nil {
			return Endpoint{}, false
		}
	}
	return Endpoint{Addr: netip.AddrPortFrom(addr.Unmap(), uint16(p))}, true
}
