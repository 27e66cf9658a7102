package kernelrules

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// The nft backend's counters come from a netlink dump of KUBE-EXTERNAL-SERVICES
// (and KUBE-PROXY-FIREWALL) while the parse of filter is kept. kube-proxy
// rewrites these chains on every sync, in the order it walks its Services
// (a Go map: another order each time), so the dump's i-th rule is not the
// saved parse's i-th. Each dumped rule is therefore matched to the kept
// parse by its content key (ruleContentKey: what the rule does, without its
// handle, position or counter). The keys are learned once per save: by index
// when the chain was not rewritten between the save and the dump, else by
// what both spell of the rule (ruleIdentity: comment, destination address and
// port, protocol).

// ChainRule is one rule of a chain dumped over netlink
// (ChangeSignals.NFTablesChainRules).
type ChainRule struct {
	// Key is the rule's content key: equal for the same rule written again,
	// in any position.
	Key uint64
	// Packets is the rule's packet counter.
	Packets uint64
	// id is what the rule says of its destination, for learning keys.
	id ruleIdentity
}

// ruleIdentity is what a saved rule (iptables-save) and a dumped one (netlink)
// both spell: the comment, the destination address (-d, one host) and port
// (--dport), the protocol. It tells kube-proxy's rules in a counter chain
// apart: one rule per Service port and destination.
type ruleIdentity struct {
	comment uint64 // maphash of the comment; 0 without one
	addr    netip.Addr
	port    uint16
	proto   uint8
}

// protoNumbers are the protocols kube-proxy's rules name.
var protoNumbers = map[string]uint8{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

func commentHash(c []byte) uint64 {
	if len(c) == 0 {
		return 0
	}
	return maphash.Bytes(contentSeed, c)
}

// identityOfArgs is a saved rule's identity.
func identityOfArgs(r *ruleArgs) ruleIdentity {
	id := ruleIdentity{comment: commentHash(r.comment), proto: protoNumbers[string(bytes.ToLower(r.proto))]}
	if len(r.dest) > 0 {
		if s, err := canonicalDest(r.dest); err == nil {
			if a, err := netip.ParseAddr(s); err == nil {
				id.addr = a
			}
		}
	}
	if p, err := strconv.ParseUint(string(r.dport), 10, 16); err == nil {
		id.port = uint16(p)
	}
	return id
}

// Expression attributes the identity reads (linux/netfilter/nf_tables.h).
const (
	nftaPayloadDreg  = 1
	nftaPayloadBase  = 2
	nftaPayloadOff   = 3
	nftaPayloadLen   = 4
	nftaMetaDreg     = 1
	nftaMetaKey      = 2
	nftaCmpSreg      = 1
	nftaCmpOp        = 2
	nftaCmpData      = 3
	nftaDataValue    = 1
	nftaBitwiseSreg  = 1
	nftaMatchName    = 1
	nftaMatchInfo    = 3
	nftPayloadNet    = 1 // NFT_PAYLOAD_NETWORK_HEADER
	nftPayloadTrans  = 2 // NFT_PAYLOAD_TRANSPORT_HEADER
	nftMetaL4Proto   = 16
	nftCmpEq         = 0
	nftUdataComment  = 0 // NFTNL_UDATA_RULE_COMMENT
	xtPortsDstOffset = 4 // struct xt_tcp / xt_udp: spts[2], then dpts[2] (host order)
)

// ruleIdentityOf reads a dumped rule's identity from its expressions, as
// iptables-nft writes them: the comment as an xt comment match or userdata;
// "-d" as a network header load compared equal, "--dport" as a transport
// header load (or an xt tcp/udp match with one port), "-p" as meta l4proto.
func ruleIdentityOf(attrs []byte) ruleIdentity {
	var id ruleIdentity
	type load struct {
		reg               uint32
		meta              bool
		base, off, length uint32
	}
	var last load
	lastOK := false
	u32 := func(v []byte) uint32 {
		if len(v) != 4 {
			return ^uint32(0)
		}
		return binary.BigEndian.Uint32(v)
	}
	a := nlAttr{b: attrs}
	for a.next() {
		switch a.typ {
		case unix.NFTA_RULE_USERDATA:
			u := a.val
			for len(u) >= 2 && int(u[1])+2 <= len(u) {
				if u[0] == nftUdataComment {
					id.comment = commentHash(attrString(u[2 : 2+int(u[1])]))
				}
				u = u[2+int(u[1]):]
			}
		case unix.NFTA_RULE_EXPRESSIONS:
			l := nlAttr{b: a.val}
			for l.next() {
				name, data, _ := nlExpr(l.val) // a malformed attribute ends it with what was read before it
				d := nlAttr{b: data}
				switch string(name) {
				case "payload":
					ld := load{reg: ^uint32(0)}
					for d.next() {
						switch d.typ {
						case nftaPayloadDreg:
							ld.reg = u32(d.val)
						case nftaPayloadBase:
							ld.base = u32(d.val)
						case nftaPayloadOff:
							ld.off = u32(d.val)
						case nftaPayloadLen:
							ld.length = u32(d.val)
						}
					}
					last, lastOK = ld, true
				case "meta":
					ld := load{reg: ^uint32(0), meta: true}
					key := ^uint32(0)
					for d.next() {
						switch d.typ {
						case nftaMetaDreg:
							ld.reg = u32(d.val)
						case nftaMetaKey:
							key = u32(d.val)
						}
					}
					last, lastOK = ld, key == nftMetaL4Proto
				case "bitwise":
					// A masked compare (a prefix): not one address.
					lastOK = false
				case "cmp":
					sreg, op := ^uint32(0), ^uint32(0)
					var val []byte
					for d.next() {
						switch d.typ {
						case nftaCmpSreg:
							sreg = u32(d.val)
						case nftaCmpOp:
							op = u32(d.val)
						case nftaCmpData:
							v := nlAttr{b: d.val}
							for v.next() {
								if v.typ == nftaDataValue {
									val = v.val
								}
							}
						}
					}
					if !lastOK || sreg != last.reg || op != nftCmpEq {
						break
					}
					switch {
					case last.meta && len(val) >= 1:
						id.proto = val[0]
					case last.base == nftPayloadNet && last.off == 16 && last.length == 4 && len(val) == 4:
						id.addr = netip.AddrFrom4([4]byte(val))
					case last.base == nftPayloadNet && last.off == 24 && last.length == 16 && len(val) == 16:
						id.addr = netip.AddrFrom16([16]byte(val))
					case last.base == nftPayloadTrans && last.off == 2 && last.length == 2 && len(val) == 2:
						id.port = binary.BigEndian.Uint16(val)
					}
				case "match":
					var mname, info []byte
					for d.next() {
						switch d.typ {
						case nftaMatchName:
							mname = attrString(d.val)
						case nftaMatchInfo:
							info = d.val
						}
					}
					switch string(mname) {
					case "comment":
						id.comment = commentHash(attrString(info))
					case "tcp", "udp":
						if len(info) >= xtPortsDstOffset+4 {
							lo := binary.NativeEndian.Uint16(info[xtPortsDstOffset:])
							hi := binary.NativeEndian.Uint16(info[xtPortsDstOffset+2:])
							if lo == hi {
								id.port = lo
							}
						}
					}
				}
			}
		}
	}
	return id
}

// keyIndex finds a counter chain's saved rules by content key.
type keyIndex struct {
	keys  []uint64 // by save index
	first map[uint64]int32
	next  []int32 // the next save index with the same key; -1 for none
}

func newKeyIndex(keys []uint64) *keyIndex {
	k := &keyIndex{keys: keys, first: make(map[uint64]int32, len(keys)), next: make([]int32, len(keys))}
	for i := len(keys) - 1; i >= 0; i-- {
		k.next[i] = -1
		if j, ok := k.first[keys[i]]; ok {
			k.next[i] = j
		}
		k.first[keys[i]] = int32(i)
	}
	return k
}

// counters returns the dumped rules' packets by save index; false when the
// dump is not the saved rules in some order (a key unknown, or left over).
func (k *keyIndex) counters(rules []ChainRule) ([]uint64, bool) {
	if len(rules) != len(k.keys) {
		return nil, false
	}
	out := make([]uint64, len(rules))
	used := make([]bool, len(rules))
	for _, r := range rules {
		j, ok := k.first[r.Key]
		for ok && j >= 0 && used[j] {
			j = k.next[j]
		}
		if !ok || j < 0 {
			return nil, false
		}
		used[j], out[j] = true, r.Packets
	}
	return out, true
}

// learnKeys gives each saved rule the key of the dumped rule that is it: the
// i-th with zip (the chain was not rewritten between save and dump), else the
// one with the same identity (in order among equal ones). False when some
// rule has no counterpart.
func learnKeys(saved []ruleIdentity, rules []ChainRule, zip bool) ([]uint64, bool) {
	if len(saved) != len(rules) {
		return nil, false
	}
	keys := make([]uint64, len(saved))
	if zip {
		for i, r := range rules {
			keys[i] = r.Key
		}
		return keys, true
	}
	byID := make(map[ruleIdentity][]int32, len(saved))
	for i, id := range saved {
		byID[id] = append(byID[id], int32(i))
	}
	for _, r := range rules {
		idx := byID[r.id]
		if len(idx) == 0 {
			return nil, false
		}
		keys[idx[0]], byID[r.id] = r.Key, idx[1:]
	}
	return keys, true
}
