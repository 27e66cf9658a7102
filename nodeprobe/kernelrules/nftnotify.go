package kernelrules

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"

	"golang.org/x/sys/unix"
)

// This file reads the nf_tables change notifications (the NFNLGRP_NFTABLES
// multicast group) just enough to tell whether a committed transaction changed
// the content of an object the parse depends on: it decodes each message's
// family, table and chain or set, and hashes the content of relevant rules and
// set elements; it never builds a rule. The socket and its loop are in
// watch.go.

// Attribute numbers the kernel's uapi (linux/netfilter/nf_tables.h) defines
// that golang.org/x/sys does not.
const (
	nftaRulePositionID = 10 // NFTA_RULE_POSITION_ID
	nftaRuleChainID    = 11 // NFTA_RULE_CHAIN_ID
	nftaSetElemKeyEnd  = 10 // NFTA_SET_ELEM_KEY_END
	nftaSetElemExprs   = 11 // NFTA_SET_ELEM_EXPRESSIONS
	nftaQuotaConsumed  = 3  // NFTA_QUOTA_CONSUMED
	nftaDynsetSetName  = 1  // NFTA_DYNSET_SET_NAME
	nftaObjrefSetName  = 4  // NFTA_OBJREF_SET_NAME
	nftaSetName        = 2  // NFTA_SET_NAME
	nftaSetFlags       = 3  // NFTA_SET_FLAGS
	nftaChainName      = 3  // NFTA_CHAIN_NAME
	nftaChainTable     = 1  // NFTA_CHAIN_TABLE
	nftaTableName      = 1  // NFTA_TABLE_NAME
	nlaTypeMask        = 0x3fff
	nfnlSubsysShift    = 8
	nlmsgHeaderLen     = 16
	nfgenmsgLen        = 4
)

// errShortAttr is a netlink attribute that claims more bytes than there are.
var errShortAttr = errors.New("netlink attribute longer than its message")

// nlAttr walks netlink attributes in place (no copy): each call of next
// returns the next attribute's type (flags stripped) and value.
type nlAttr struct {
	b   []byte
	typ uint16
	val []byte
	raw []byte // the whole attribute, header and padding included
	err error
}

func (a *nlAttr) next() bool {
	if len(a.b) == 0 || a.err != nil {
		return false
	}
	if len(a.b) < 4 {
		a.err = errShortAttr
		return false
	}
	l := int(binary.NativeEndian.Uint16(a.b))
	if l < 4 || l > len(a.b) {
		a.err = errShortAttr
		return false
	}
	a.typ = binary.NativeEndian.Uint16(a.b[2:]) & nlaTypeMask
	a.val = a.b[4:l]
	adv := min((l+3)&^3, len(a.b))
	a.raw, a.b = a.b[:adv], a.b[adv:]
	return true
}

// attrString is a NUL-terminated netlink string attribute's value without the NUL.
func attrString(v []byte) []byte {
	if i := bytes.IndexByte(v, 0); i >= 0 {
		return v[:i]
	}
	return v
}

// nftMsg is what the watcher needs of one nf_tables notification.
type nftMsg struct {
	typ    uint16 // NFT_MSG_*
	family uint8
	table  []byte
	name   []byte // the chain (chain and rule messages) or set (set and element messages)
	attrs  []byte // the attributes after the nfgenmsg header
	setFlg uint32 // NEWSET/DELSET: NFTA_SET_FLAGS
}

// parseNFTMsg reads the type, family, table and object name of an nf_tables
// message's payload (after the netlink header). Messages of other subsystems
// have ok false.
func parseNFTMsg(htype uint16, data []byte) (m nftMsg, ok bool, err error) {
	if htype>>nfnlSubsysShift != unix.NFNL_SUBSYS_NFTABLES {
		return m, false, nil
	}
	if len(data) < nfgenmsgLen {
		return m, false, fmt.Errorf("nf_tables message of %d bytes", len(data))
	}
	m.typ, m.family, m.attrs = htype&0xff, data[0], data[nfgenmsgLen:]
	tableAttr, nameAttr := uint16(0), uint16(0)
	switch m.typ {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE:
		tableAttr = nftaTableName
	case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
		tableAttr, nameAttr = nftaChainTable, nftaChainName
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		tableAttr, nameAttr = unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		tableAttr, nameAttr = unix.NFTA_SET_TABLE, nftaSetName
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		tableAttr, nameAttr = unix.NFTA_SET_ELEM_LIST_TABLE, unix.NFTA_SET_ELEM_LIST_SET
	default:
		return m, true, nil
	}
	a := nlAttr{b: m.attrs}
	for a.next() {
		switch {
		case a.typ == tableAttr:
			m.table = attrString(a.val)
		case nameAttr != 0 && a.typ == nameAttr:
			m.name = attrString(a.val)
		case (m.typ == unix.NFT_MSG_NEWSET || m.typ == unix.NFT_MSG_DELSET) && a.typ == nftaSetFlags && len(a.val) == 4:
			m.setFlg = binary.BigEndian.Uint32(a.val)
		}
	}
	if a.err != nil {
		return m, false, fmt.Errorf("nf_tables message type %d: %w", m.typ, a.err)
	}
	return m, true, nil
}

// contentSeed keys every content hash of the process: a rule's key from a
// notification and from a dump must be equal, within one run.
var contentSeed = maphash.MakeSeed()

// mix64 is a finalizer (splitmix64's) that spreads a combined value over all
// bits, so that sums of items behave like sums of random values.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// nameHash hashes an object's identity: its kind, family, table and name.
func nameHash(kind byte, family uint8, table, name []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(contentSeed)
	h.WriteByte(kind)
	h.WriteByte(family)
	h.Write(table)
	h.WriteByte(0)
	h.Write(name)
	return h.Sum64()
}

// item is one element of the multiset a transaction adds to or removes from:
// an object's identity and one content key.
func item(object, content uint64) uint64 {
	return mix64(object ^ bits.RotateLeft64(content, 29) ^ 0x9e3779b97f4a7c15)
}

// anonResolver gives the content hash of an anonymous set a rule refers to
// by name (a numgen map's endpoints live in one); false when it is not known.
type anonResolver func(name []byte) (uint64, bool)

// ruleContentKey hashes what a rule does: its expressions (a counter's or
// last's values, a quota's consumption left out; an anonymous set referred to
// by name replaced by its content), its userdata (the comment) and compat
// data; never its table, chain, handle or position. The same rule has the same
// key in a notification and in a dump. resolved is false when it refers to an
// anonymous set anon cannot resolve (its content is then unknown).
func ruleContentKey(attrs []byte, anon anonResolver) (key uint64, resolved bool, err error) {
	var h maphash.Hash
	h.SetSeed(contentSeed)
	resolved = true
	a := nlAttr{b: attrs}
	for a.next() {
		switch a.typ {
		case unix.NFTA_RULE_EXPRESSIONS:
			h.WriteByte('E')
			ok, err := hashExprList(&h, a.val, anon)
			if err != nil {
				return 0, false, err
			}
			resolved = resolved && ok
		case unix.NFTA_RULE_USERDATA, unix.NFTA_RULE_COMPAT:
			h.Write(a.raw)
		}
	}
	if a.err != nil {
		return 0, false, a.err
	}
	return h.Sum64(), resolved, nil
}

// hashExprList hashes a list of expressions (NFTA_LIST_ELEM, each an
// expression).
func hashExprList(h *maphash.Hash, list []byte, anon anonResolver) (resolved bool, err error) {
	resolved = true
	l := nlAttr{b: list}
	for l.next() {
		if l.typ != unix.NFTA_LIST_ELEM {
			h.Write(l.raw)
			continue
		}
		ok, err := hashExpr(h, l.raw, l.val, anon)
		if err != nil {
			return false, err
		}
		resolved = resolved && ok
	}
	return resolved, l.err
}

// hashExpr hashes one expression (its name and data; raw is the attribute
// holding them): its bytes as they are, except for an expression whose dump
// carries state (a counter) or that refers to an anonymous set.
func hashExpr(h *maphash.Hash, raw, val []byte, anon anonResolver) (bool, error) {
	name, data, err := nlExpr(val)
	if err != nil {
		return false, err
	}
	switch string(name) {
	case "counter", "last":
		// Packets and bytes, the last match's time: state, not content.
		h.WriteByte(0)
		h.Write(name)
	case "quota":
		h.WriteString("\x00quota")
		hashSkipping(h, data, nftaQuotaConsumed)
	case "lookup", "dynset", "objref":
		h.WriteByte(0)
		h.Write(name)
		return hashSetRef(h, name, data, anon)
	default:
		h.Write(raw)
	}
	return true, nil
}

// hashSkipping hashes attributes, leaving out those of type skip.
func hashSkipping(h *maphash.Hash, b []byte, skip uint16) {
	a := nlAttr{b: b}
	for a.next() {
		if a.typ != skip {
			h.Write(a.raw)
		}
	}
}

// hashSetRef hashes a set-referring expression's data; the name of an
// anonymous set ("__set%d", "__map%d": the kernel picks the number) is
// replaced by the set's content.
func hashSetRef(h *maphash.Hash, expr, data []byte, anon anonResolver) (bool, error) {
	nameAttr := uint16(unix.NFTA_LOOKUP_SET)
	switch string(expr) {
	case "dynset":
		nameAttr = nftaDynsetSetName
	case "objref":
		nameAttr = nftaObjrefSetName
	}
	resolved := true
	a := nlAttr{b: data}
	for a.next() {
		if a.typ != nameAttr {
			h.Write(a.raw)
			continue
		}
		set := attrString(a.val)
		if !bytes.HasPrefix(set, []byte("__")) {
			h.Write(a.raw)
			continue
		}
		var c uint64
		ok := anon != nil
		if ok {
			c, ok = anon(set)
		}
		resolved = resolved && ok
		var v [9]byte
		v[0] = 'A'
		binary.LittleEndian.PutUint64(v[1:], c)
		h.Write(v[:])
	}
	return resolved, a.err
}

// forEachElem calls fn with the content key of each element of a set element
// message (NFTA_SET_ELEM_LIST_ELEMENTS): its key, end key, data, flags,
// timeout, userdata (the comment) and expressions without their state; never
// its expiration, which counts down.
func forEachElem(attrs []byte, fn func(key uint64)) error {
	return forEachListElem(attrs, unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(elem []byte) (bool, error) {
		var h maphash.Hash
		h.SetSeed(contentSeed)
		e := nlAttr{b: elem}
		for e.next() {
			switch e.typ {
			case unix.NFTA_SET_ELEM_EXPIRATION, unix.NFTA_SET_ELEM_PAD:
			case unix.NFTA_SET_ELEM_EXPR:
				h.WriteByte('x')
				if _, err := hashExpr(&h, e.raw, e.val, nil); err != nil {
					return false, err
				}
			case nftaSetElemExprs:
				h.WriteByte('X')
				if _, err := hashExprList(&h, e.val, nil); err != nil {
					return false, err
				}
			default:
				h.Write(e.raw)
			}
		}
		if e.err != nil {
			return false, e.err
		}
		fn(h.Sum64())
		return false, nil
	})
}

// forEachListElem calls fn with each NFTA_LIST_ELEM of the attributes of type outer in attrs (a set element
// message's element list, a rule's expressions), until fn says stop or fails; it fails on a malformed
// attribute.
func forEachListElem(attrs []byte, outer uint16, fn func(elem []byte) (stop bool, err error)) error {
	a := nlAttr{b: attrs}
	for a.next() {
		if a.typ != outer {
			continue
		}
		l := nlAttr{b: a.val}
		for l.next() {
			if l.typ != unix.NFTA_LIST_ELEM {
				continue
			}
			if stop, err := fn(l.val); stop || err != nil {
				return err
			}
		}
		if l.err != nil {
			return l.err
		}
	}
	return a.err
}
