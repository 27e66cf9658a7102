package kernelrules

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// nftModel is what a read of one family's kube-proxy table keeps per object,
// so that a later read can list again only the objects a change notification
// named (nftrelist.go) and compute every Service port's state from the result
// exactly as from a whole listing: both end in ports.
//
// The parse reads the existence of the Service chains (service-, external-,
// local-, firewall-<hash8>-ns/name/proto/port), the endpoints of the local-*
// chains' rules and the elements of four maps; nothing else. (A fifth,
// firewall-ips, names chains, which a read in part follows.)
type nftModel struct {
	table bool
	// chains are the Service chains present, with their Service port.
	chains map[string]portKey
	// local are the local-* chains that hold rules, with the distinct
	// endpoints those send traffic to (sorted; none is still a chain with
	// rules).
	local map[string]nftLocal
	// noEP are the elements of no-endpoint-nodeports and no-endpoint-services.
	noEP [2]map[nftKey]nftNoEndpoint
	// dispatch are the elements of service-nodeports and service-ips that go
	// to an external-* chain, with its Service port: what names a drop's port.
	// (The other elements, and firewall-ips', name chains the listing has; a
	// read in part looks at them only when it reads their map again.)
	dispatch [2]map[nftKey]portKey
	// opaque: some element's key is not in the shape of kube-proxy's maps
	// (nftKey.raw): the table is never re-read in part.
	opaque bool
}

// nftLocal is one local-* chain's part of the model.
type nftLocal struct {
	port portKey
	eps  []Endpoint
}

// The maps the parse reads, by name: which of noEP or dispatch they fill
// (index; -1: neither, firewall-ips only names chains), and whether their keys
// start with an address.
var nftModelMaps = map[string]struct {
	noEP     bool
	index    int
	withAddr bool
}{
	"no-endpoint-nodeports": {true, 0, false},
	"no-endpoint-services":  {true, 1, true},
	"service-nodeports":     {false, 0, false},
	"service-ips":           {false, 1, true},
	"firewall-ips":          {false, -1, true},
}

func newNFTModel() *nftModel {
	m := &nftModel{chains: map[string]portKey{}, local: map[string]nftLocal{}}
	for i := range m.noEP {
		m.noEP[i] = map[nftKey]nftNoEndpoint{}
	}
	for i := range m.dispatch {
		m.dispatch[i] = map[nftKey]portKey{}
	}
	return m
}

// nftKey is an element key of kube-proxy's maps as the kernel holds it:
// destination address (invalid in the NodePort maps), IP protocol number and
// port. Both a listing's JSON and a netlink dump decode to it, so the same
// element has the same key whichever read saw it. raw holds the compact JSON
// of a listed key not in that shape (then it matches only itself).
type nftKey struct {
	addr  netip.Addr
	proto uint8
	port  uint16
	raw   string
}

// nftProtoNumbers are the protocols kube-proxy writes, by the name nft prints
// (it prints the number where /etc/protocols lacks the name).
var nftProtoNumbers = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}

// nftProtoName is the name of a protocol number kube-proxy writes, "" for any other.
func nftProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return ""
}

// nftKeyFromJSON decodes a listed element key (compact JSON: {"concat":[addr,
// proto, port]} with an address, else {"concat":[proto, port]}); ok false
// when it is not in that shape.
func nftKeyFromJSON(compact string, withAddr bool) (nftKey, bool) {
	if k, ok, sure := nftKeyFromCompact(compact, withAddr); sure {
		return k, ok
	}
	return nftKeyDecode(compact, withAddr)
}

// nftKeyDecode is nftKeyFromJSON through the JSON decoder.
func nftKeyDecode(compact string, withAddr bool) (nftKey, bool) {
	var key struct {
		Concat []json.RawMessage `json:"concat"`
	}
	if json.Unmarshal([]byte(compact), &key) != nil {
		return nftKey{}, false
	}
	parts := key.Concat
	var k nftKey
	if withAddr {
		if len(parts) != 3 {
			return nftKey{}, false
		}
		var a string
		if json.Unmarshal(parts[0], &a) != nil {
			return nftKey{}, false
		}
		addr, err := netip.ParseAddr(a)
		if err != nil || addr.Zone() != "" {
			return nftKey{}, false
		}
		k.addr, parts = addr, parts[1:]
	}
	if len(parts) != 2 {
		return nftKey{}, false
	}
	var name string
	var num uint8
	switch {
	case json.Unmarshal(parts[0], &name) == nil:
		p, ok := nftProtoNumbers[name]
		if !ok {
			return nftKey{}, false
		}
		k.proto = p
	case json.Unmarshal(parts[0], &num) == nil:
		k.proto = num
	default:
		return nftKey{}, false
	}
	if json.Unmarshal(parts[1], &k.port) != nil {
		return nftKey{}, false
	}
	return k, true
}

// nftKeyFromCompact is nftKeyFromJSON without allocating, for the compact
// JSON nft prints of kube-proxy's keys (every element of the listing comes
// through here): strings without escapes and integers. sure false: the text
// is not of that plain form, for the JSON decoder to judge.
func nftKeyFromCompact(compact string, withAddr bool) (k nftKey, ok, sure bool) {
	rest, found := strings.CutPrefix(compact, `{"concat":[`)
	if !found {
		return k, false, false
	}
	if rest, found = strings.CutSuffix(rest, `]}`); !found || strings.ContainsAny(rest, `\{}[]`) {
		return k, false, false
	}
	part := func() (s string, quoted bool) {
		s, rest, _ = strings.Cut(rest, ",")
		if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
			return s[1 : len(s)-1], true
		}
		return s, false
	}
	n := strings.Count(rest, ",") + 1
	if (withAddr && n != 3) || (!withAddr && n != 2) {
		return k, false, true
	}
	if withAddr {
		a, quoted := part()
		addr, err := netip.ParseAddr(a)
		if !quoted || err != nil || addr.Zone() != "" {
			return k, false, true
		}
		k.addr = addr
	}
	switch p, quoted := part(); {
	case quoted:
		num, known := nftProtoNumbers[p]
		if !known {
			return k, false, true
		}
		k.proto = num
	default:
		num, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return k, false, false
		}
		k.proto = uint8(num)
	}
	p, quoted := part()
	port, err := strconv.ParseUint(p, 10, 16)
	if quoted || err != nil {
		return k, false, false
	}
	k.port = uint16(port)
	return k, true, true
}

// fill sets what a no-endpoint element says of its destination from its key:
// the protocol's name, the address (canonical) and port.
func (k nftKey) fill(ne *nftNoEndpoint) {
	ne.proto = nftProtoName(k.proto)
	ne.port = int32(k.port)
	if k.addr.IsValid() {
		ne.addr = k.addr.String()
	}
}

// ports computes every Service port's state from the model: what a listing
// of the table says, whether it was parsed whole (parseNFTJSONFrom) or in
// part (nftrelist.go). The states are new: the model can change afterwards.
func (m *nftModel) ports() map[portKey]*PortState {
	ports := make(map[portKey]*PortState, len(m.chains)/2)
	for _, k := range m.chains {
		stateFor(ports, k).Programmed = true
	}
	for _, lc := range m.local {
		st := stateFor(ports, lc.port)
		st.Programmed = true
		if st.Endpoints == nil {
			st.Endpoints = make([]Endpoint, 0, len(lc.eps))
		}
		st.Endpoints = append(st.Endpoints, lc.eps...)
		st.LocalEndpoints = -1 // counted below, once every chain of the port is in
	}
	for _, lc := range m.local {
		st := ports[lc.port]
		if st.LocalEndpoints >= 0 {
			continue
		}
		// Two local chains of one port (never kube-proxy's) count an endpoint once.
		if len(st.Endpoints) > 1 {
			slices.SortFunc(st.Endpoints, compareEndpoints)
			st.Endpoints = slices.Compact(st.Endpoints)
		}
		st.LocalEndpoints = len(st.Endpoints)
	}
	for i, elems := range m.noEP {
		nodePort := i == 0
		for key, ne := range elems {
			k, ok := m.elementPort(key, ne, nodePort)
			if !ok {
				continue
			}
			st := stateFor(ports, k)
			st.Programmed = true
			switch {
			case ne.reject:
				st.Reject = true
			case ne.drop:
				addDrop(st, DropRule{Address: ne.addr, Port: ne.port, Packets: ne.packets, Counted: ne.counted})
			}
		}
	}
	for _, st := range ports {
		if len(st.Drops) > 1 {
			sortNFTDrops(st.Drops)
		}
	}
	return ports
}

// sortNFTDrops orders drops as sortDrops does, and those it leaves equal by
// their counters: the elements come from maps, in no order.
func sortNFTDrops(d []DropRule) {
	slices.SortFunc(d, func(a, b DropRule) int {
		switch {
		case dropLess(a, b):
			return -1
		case dropLess(b, a):
			return 1
		case a.Packets != b.Packets:
			if a.Packets < b.Packets {
				return -1
			}
			return 1
		case a.Counted != b.Counted:
			if !a.Counted {
				return -1
			}
			return 1
		}
		return 0
	})
}

// elementPort names the Service port a no-endpoint-* element belongs to, by its key (protocol, address and
// port), not by its comment: kube-proxy (v1.37, truncateNFTablesComment) cuts element comments to nftables'
// 128 bytes, and "ns/name:port" reaches 143. A drop means the port has endpoints elsewhere, so kube-proxy
// also dispatched the same key to the port's external-* chain (service-nodeports for a NodePort,
// service-ips for an address), whose name is not truncated: that chain names the port. A drop on an address
// service-ips does not send to an external-* chain is internalTrafficPolicy=Local on the cluster IP, not
// external traffic, and is not the port's. A reject (no endpoints anywhere) has no dispatch entry: only its
// comment names the port, and a comment of 128 bytes may have been cut, so it is not trusted.
func (m *nftModel) elementPort(key nftKey, ne nftNoEndpoint, nodePort bool) (portKey, bool) {
	if ne.drop && !ne.reject {
		dispatch := m.dispatch[1]
		if nodePort {
			dispatch = m.dispatch[0]
		}
		if k, ok := dispatch[key]; ok {
			return k, true
		}
		if !nodePort {
			return portKey{}, false
		}
		// A NodePort drop always has its dispatch entry in what kube-proxy writes; without one only the
		// comment is left.
	}
	if ne.comment == "" || ne.proto == "" || strings.IndexByte(ne.comment, '/') <= 0 || len(ne.comment) >= nftCommentMax {
		return portKey{}, false
	}
	return hashKey(ne.comment, ne.proto), true
}

// setLocal records a local-* chain's endpoints (sorted, each once); a chain
// without rules has no part.
func (m *nftModel) setLocal(chain string, port portKey, set map[Endpoint]bool, rules int) {
	if rules == 0 {
		delete(m.local, chain)
		return
	}
	eps := make([]Endpoint, 0, len(set))
	for e := range set {
		eps = append(eps, e)
	}
	slices.SortFunc(eps, compareEndpoints)
	m.local[chain] = nftLocal{port: port, eps: eps}
}

// String summarises the model (for logs and test failures).
func (m *nftModel) String() string {
	return fmt.Sprintf("nftModel{table %v, %d chains, %d local, %d+%d no-endpoint, %d+%d external dispatch, opaque %v}",
		m.table, len(m.chains), len(m.local), len(m.noEP[0]), len(m.noEP[1]),
		len(m.dispatch[0]), len(m.dispatch[1]), m.opaque)
}
