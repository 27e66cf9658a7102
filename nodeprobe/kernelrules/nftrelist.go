package kernelrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file reads single objects of kube-proxy's nftables table over netlink —
// a chain's rules (NFT_MSG_GETRULE, filtered by chain in the kernel), whether
// a chain exists (NFT_MSG_GETCHAIN), a map's elements (NFT_MSG_GETSETELEM) —
// decoding only what the model reads (nftmodel.go), for a read that lists
// again only what a change notification named. `nft -j list chain` would do,
// but nft fills its cache first: it fetches every set with its elements and
// every rule of the table, nearly the cost of listing the table
// (docs/performance.md, "Change notifications").

const (
	// nftSetElemCatchall is the element flag of a catch-all element
	// (NFT_SET_ELEM_CATCHALL), which kube-proxy's maps never hold.
	nftSetElemCatchall = 2
	// nfDrop is the drop verdict's code (NF_DROP).
	nfDrop = 0
)

// nlElem is one set element of a dump, as far as the model reads it.
type nlElem struct {
	key     []byte
	odd     bool   // an interval end, a catch-all or an end key: a shape kube-proxy's maps never have
	value   []byte // the data of a map of values
	verdict bool   // the data is a verdict: code, and chain for a goto or jump
	code    int32
	chain   string
	comment string
	packets uint64
	counted bool
}

// target is the chain a verdict goes or jumps to, "" for another verdict.
func (e nlElem) target() string {
	if e.verdict && (e.code == unix.NFT_GOTO || e.code == unix.NFT_JUMP) {
		return e.chain
	}
	return ""
}

// forEachNLElem decodes each element of a set element message.
func forEachNLElem(attrs []byte, fn func(nlElem) error) error {
	return forEachListElem(attrs, unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(elem []byte) (bool, error) {
		e, err := decodeNLElem(elem)
		if err != nil {
			return false, err
		}
		return false, fn(e)
	})
}

func decodeNLElem(b []byte) (nlElem, error) {
	var e nlElem
	a := nlAttr{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_SET_ELEM_KEY:
			v, err := nlDataValue(a.val)
			if err != nil {
				return e, fmt.Errorf("element key: %w", err)
			}
			e.key = v
		case nftaSetElemKeyEnd:
			e.odd = true
		case unix.NFTA_SET_ELEM_FLAGS:
			if len(a.val) != 4 {
				return e, fmt.Errorf("element flags of %d bytes", len(a.val))
			}
			if f := binary.BigEndian.Uint32(a.val); f&(unix.NFT_SET_ELEM_INTERVAL_END|nftSetElemCatchall) != 0 {
				e.odd = true
			}
		case unix.NFTA_SET_ELEM_DATA:
			d := nlAttr{b: a.val}
			for d.next() {
				switch d.typ {
				case unix.NFTA_DATA_VALUE:
					e.value = d.val
				case unix.NFTA_DATA_VERDICT:
					code, chain, err := nlVerdict(d.val)
					if err != nil {
						return e, fmt.Errorf("element verdict: %w", err)
					}
					e.verdict, e.code, e.chain = true, code, chain
				}
			}
			if d.err != nil {
				return e, fmt.Errorf("element data: %w", d.err)
			}
		case unix.NFTA_SET_ELEM_USERDATA:
			e.comment = udataComment(a.val)
		case unix.NFTA_SET_ELEM_EXPR:
			if err := e.expr(a.val); err != nil {
				return e, err
			}
		case nftaSetElemExprs:
			l := nlAttr{b: a.val}
			for l.next() {
				if l.typ == unix.NFTA_LIST_ELEM {
					if err := e.expr(l.val); err != nil {
						return e, err
					}
				}
			}
			if l.err != nil {
				return e, fmt.Errorf("element expressions: %w", l.err)
			}
		}
	}
	if a.err != nil {
		return e, fmt.Errorf("element: %w", a.err)
	}
	return e, nil
}

// expr reads an element's expression: a counter's packets.
func (e *nlElem) expr(b []byte) error {
	name, data, err := nlExpr(b)
	if err != nil || string(name) != "counter" {
		return err
	}
	d := nlAttr{b: data}
	for d.next() {
		if d.typ == unix.NFTA_COUNTER_PACKETS && len(d.val) == 8 {
			e.packets, e.counted = binary.BigEndian.Uint64(d.val), true
		}
	}
	if d.err != nil {
		return fmt.Errorf("element counter: %w", d.err)
	}
	e.counted = true
	return nil
}

// udataComment reads the comment of an element's userdata (libnftnl's
// type-length-value records; NFTNL_UDATA_SET_ELEM_COMMENT is type 0, a
// NUL-terminated string), as nft prints it.
func udataComment(b []byte) string {
	for len(b) >= 2 {
		typ, l := b[0], int(b[1])
		if 2+l > len(b) {
			return ""
		}
		if typ == 0 {
			return string(attrString(b[2 : 2+l]))
		}
		b = b[2+l:]
	}
	return ""
}

// nlDataValue reads an NFTA_DATA_VALUE out of a nested data attribute.
func nlDataValue(b []byte) ([]byte, error) {
	a := nlAttr{b: b}
	for a.next() {
		if a.typ == unix.NFTA_DATA_VALUE {
			return a.val, nil
		}
	}
	if a.err != nil {
		return nil, a.err
	}
	return nil, errors.New("no value")
}

// nlVerdict reads a verdict (NFTA_DATA_VERDICT's nested code and chain).
func nlVerdict(b []byte) (code int32, chain string, err error) {
	a := nlAttr{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_VERDICT_CODE:
			if len(a.val) != 4 {
				return 0, "", fmt.Errorf("verdict code of %d bytes", len(a.val))
			}
			code = int32(binary.BigEndian.Uint32(a.val))
		case unix.NFTA_VERDICT_CHAIN:
			chain = string(attrString(a.val))
		}
	}
	return code, chain, a.err
}

// nlExpr reads an expression's name and data.
func nlExpr(b []byte) (name, data []byte, err error) {
	e := nlAttr{b: b}
	for e.next() {
		switch e.typ {
		case unix.NFTA_EXPR_NAME:
			name = attrString(e.val)
		case unix.NFTA_EXPR_DATA:
			data = e.val
		}
	}
	return name, data, e.err
}

// nlU32 reads a 32-bit attribute in network order.
func nlU32(v []byte) (uint32, bool) {
	if len(v) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// nftRegs is a rule's register file as the expressions before a nat fill it:
// what an immediate loaded, or (alts) what a lookup in an anonymous map loads,
// one value per element. Anything another expression writes is unknown.
type nftRegs struct {
	b     [80]byte
	known [20]bool // per 32-bit word
	// alts: the words from altWord on take each of these values in turn (a
	// numgen map: one endpoint per element).
	alts    [][]byte
	altWord int
}

// regWord is the 32-bit word a register number starts at: NFT_REG_1..4 are
// 16 bytes each, NFT_REG32_00..15 (8..23) 4 bytes, over the same file.
func regWord(reg uint32) (int, bool) {
	switch {
	case reg >= 1 && reg <= 4:
		return int(reg) * 4, true
	case reg >= 8 && reg <= 23:
		return int(reg-8) + 4, true
	}
	return 0, false
}

func (r *nftRegs) write(reg uint32, v []byte) {
	w, ok := regWord(reg)
	if !ok || w*4+len(v) > len(r.b) {
		r.forget()
		return
	}
	copy(r.b[w*4:], v)
	for i := w; i < w+(len(v)+3)/4; i++ {
		r.known[i] = true
	}
	if r.alts != nil && w < r.altWord+(len(r.alts[0])+3)/4 && r.altWord < w+(len(v)+3)/4 {
		r.alts = nil
	}
}

func (r *nftRegs) forget() {
	r.known = [20]bool{}
	r.alts = nil
}

// read returns n bytes from register reg; false when they are not known.
func (r *nftRegs) read(reg uint32, n int) ([]byte, bool) {
	w, ok := regWord(reg)
	if !ok || w*4+n > len(r.b) {
		return nil, false
	}
	for i := w; i < w+(n+3)/4; i++ {
		if !r.known[i] {
			return nil, false
		}
	}
	return r.b[w*4 : w*4+n], true
}

// nftRuleRead is what one rule says for the model: the endpoints it sends
// traffic to (what collectEndpointTargets reads in a listing of it) and every
// chain it goes or jumps to.
type nftRuleRead struct {
	eps     []Endpoint
	targets []string
}

// decodeRule reads a rule (a GETRULE answer's attributes). anon gives the
// elements of an anonymous set it refers to; addrLen is the family's address
// length, for a nat without its own family.
func decodeRule(attrs []byte, addrLen int, anon func(name string) ([]nlElem, error)) (nftRuleRead, error) {
	var out nftRuleRead
	var regs nftRegs
	a := nlAttr{b: attrs}
	for a.next() {
		if a.typ != unix.NFTA_RULE_EXPRESSIONS {
			continue
		}
		l := nlAttr{b: a.val}
		for l.next() {
			if l.typ != unix.NFTA_LIST_ELEM {
				continue
			}
			name, data, err := nlExpr(l.val)
			if err != nil {
				return out, fmt.Errorf("rule expression: %w", err)
			}
			if err := out.expr(string(name), data, &regs, addrLen, anon); err != nil {
				return out, err
			}
		}
		if l.err != nil {
			return out, fmt.Errorf("rule expressions: %w", l.err)
		}
	}
	if a.err != nil {
		return out, fmt.Errorf("rule: %w", a.err)
	}
	return out, nil
}

func (out *nftRuleRead) expr(name string, data []byte, regs *nftRegs, addrLen int, anon func(string) ([]nlElem, error)) error {
	switch name {
	case "immediate":
		var dreg uint32
		var value []byte
		a := nlAttr{b: data}
		for a.next() {
			switch a.typ {
			case unix.NFTA_IMMEDIATE_DREG:
				dreg, _ = nlU32(a.val)
			case unix.NFTA_IMMEDIATE_DATA:
				d := nlAttr{b: a.val}
				for d.next() {
					switch d.typ {
					case unix.NFTA_DATA_VALUE:
						value = d.val
					case unix.NFTA_DATA_VERDICT:
						code, chain, err := nlVerdict(d.val)
						if err != nil {
							return fmt.Errorf("immediate verdict: %w", err)
						}
						if code == unix.NFT_GOTO || code == unix.NFT_JUMP {
							out.target(chain)
						}
					}
				}
				if d.err != nil {
					return fmt.Errorf("immediate data: %w", d.err)
				}
			}
		}
		if a.err != nil {
			return fmt.Errorf("immediate: %w", a.err)
		}
		if dreg != unix.NFT_REG_VERDICT && value != nil {
			regs.write(dreg, value)
		}
	case "lookup":
		var set string
		var dreg uint32
		hasDreg := false
		a := nlAttr{b: data}
		for a.next() {
			switch a.typ {
			case unix.NFTA_LOOKUP_SET:
				set = string(attrString(a.val))
			case unix.NFTA_LOOKUP_DREG:
				dreg, hasDreg = nlU32(a.val)
			}
		}
		if a.err != nil {
			return fmt.Errorf("lookup: %w", a.err)
		}
		if !hasDreg {
			return nil // a match: no register written
		}
		if !strings.HasPrefix(set, "__") {
			// A named map: a listing prints "@name", no element of it.
			if dreg != unix.NFT_REG_VERDICT {
				regs.forget()
			}
			return nil
		}
		elems, err := anon(set)
		if err != nil {
			return err
		}
		if dreg == unix.NFT_REG_VERDICT {
			for _, e := range elems {
				out.target(e.target())
			}
			return nil
		}
		w, ok := regWord(dreg)
		if !ok || len(elems) == 0 {
			regs.forget()
			return nil
		}
		regs.alts, regs.altWord = nil, w
		for _, e := range elems {
			if e.value == nil || len(e.value) != len(elems[0].value) || w*4+len(e.value) > len(regs.b) {
				regs.forget()
				return nil
			}
			regs.alts = append(regs.alts, e.value)
		}
	case "nat":
		out.nat(data, regs, addrLen)
	case "cmp", "counter", "log", "limit", "quota", "range":
		// They read registers, or none: nothing a nat after them reads changes.
	default:
		regs.forget()
	}
	return nil
}

func (out *nftRuleRead) target(chain string) {
	if chain == "" {
		return
	}
	out.targets = append(out.targets, chain)
	if strings.HasPrefix(chain, "endpoint-") {
		if e, ok := nftEndpointChain(chain); ok {
			out.eps = append(out.eps, e)
		}
	}
}

// nat reads the endpoints of a dnat: the address (and port) in its registers,
// each alternative of a numgen map once. A range of addresses names no
// endpoint; a range of ports leaves the port out, as a listing does.
func (out *nftRuleRead) nat(data []byte, regs *nftRegs, addrLen int) {
	var typ, fam, addrMin, addrMax, protoMin, protoMax uint32
	var hasAddrMin, hasAddrMax, hasProtoMin, hasProtoMax bool
	a := nlAttr{b: data}
	for a.next() {
		v, ok := nlU32(a.val)
		if !ok {
			continue
		}
		switch a.typ {
		case unix.NFTA_NAT_TYPE:
			typ = v
		case unix.NFTA_NAT_FAMILY:
			fam = v
		case unix.NFTA_NAT_REG_ADDR_MIN:
			addrMin, hasAddrMin = v, true
		case unix.NFTA_NAT_REG_ADDR_MAX:
			addrMax, hasAddrMax = v, true
		case unix.NFTA_NAT_REG_PROTO_MIN:
			protoMin, hasProtoMin = v, true
		case unix.NFTA_NAT_REG_PROTO_MAX:
			protoMax, hasProtoMax = v, true
		}
	}
	if a.err != nil || typ != unix.NFT_NAT_DNAT || !hasAddrMin || (hasAddrMax && addrMax != addrMin) {
		return
	}
	switch fam {
	case unix.NFPROTO_IPV4:
		addrLen = 4
	case unix.NFPROTO_IPV6:
		addrLen = 16
	}
	withPort := hasProtoMin && (!hasProtoMax || protoMax == protoMin)
	one := func(r *nftRegs) {
		ab, ok := r.read(addrMin, addrLen)
		if !ok {
			return
		}
		var port uint16
		if withPort {
			pb, ok := r.read(protoMin, 2)
			if !ok {
				return
			}
			port = binary.BigEndian.Uint16(pb)
		}
		var addr netip.Addr
		if addrLen == 4 {
			addr = netip.AddrFrom4([4]byte(ab))
		} else {
			addr = netip.AddrFrom16([16]byte(ab))
		}
		out.eps = append(out.eps, Endpoint{Addr: netip.AddrPortFrom(addr.Unmap(), port)})
	}
	if regs.alts == nil {
		one(regs)
		return
	}
	for _, v := range regs.alts {
		r := *regs
		r.alts = nil
		r.write(uint32(regs.altWord-4+8), v) // as NFT_REG32_xx
		one(&r)
	}
}

// nftKeyFromBytes decodes a key from a netlink dump: each part of a
// concatenation padded to 4 bytes, the address 4 or 16 (the family's), the
// port in network order. ok false when it is not that shape.
func nftKeyFromBytes(b []byte, withAddr bool, addrLen int) (nftKey, bool) {
	var k nftKey
	if withAddr {
		if len(b) != addrLen+8 {
			return nftKey{}, false
		}
		switch addrLen {
		case 4:
			k.addr = netip.AddrFrom4([4]byte(b[:4]))
		case 16:
			k.addr = netip.AddrFrom16([16]byte(b[:16]))
		default:
			return nftKey{}, false
		}
		b = b[addrLen:]
	}
	if len(b) != 8 {
		return nftKey{}, false
	}
	k.proto = b[0]
	k.port = uint16(b[4])<<8 | uint16(b[5])
	return k, true
}

// getChain says whether a chain exists (NFT_MSG_GETCHAIN: ENOENT when not).
func (c *nftConn) getChain(fam byte, table, chain string) (bool, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_CHAIN_TABLE, table)
	ae.String(unix.NFTA_CHAIN_NAME, chain)
	attrs, err := ae.Encode()
	if err != nil {
		return false, fmt.Errorf("chain %s: %w", chain, err)
	}
	_, err = c.execute("chain "+chain, netlink.Message{
		Header: netlink.Header{Type: nftGetChain, Flags: netlink.Request},
		Data:   append(nfgenmsg(fam), attrs...),
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// nftGetChain is the NFT_MSG_GETCHAIN request type.
const nftGetChain = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETCHAIN)

// setElems dumps a set's elements (their keys and values slices of the
// datagrams, which the library hands out in memory of their own); false when
// the set does not exist.
func (c *nftConn) setElems(fam byte, table, set string) ([]nlElem, bool, error) {
	var out []nlElem
	err := c.dump(fam, nftGetSetElem, unix.NFTA_SET_ELEM_LIST_TABLE, table, unix.NFTA_SET_ELEM_LIST_SET, set, func(m nftMsg) error {
		return forEachNLElem(m.attrs, func(e nlElem) error {
			out = append(out, e)
			return nil
		})
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return out, true, nil
}

// nftRelist reads, over one connection, the objects of one family's table a
// notification named and the chains they reveal, into a delta of the model:
// applied only once the reads are known to belong to one generation.
type nftRelist struct {
	c       *nftConn
	fam     byte
	addrLen int
	model   *nftModel // read, not changed

	chains  map[string]nftChainRead
	pending []string
	noEP    map[int]map[nftKey]nftNoEndpoint
	disp    map[int]map[nftKey]portKey
	anon    map[string][]nlElem
	dumps   int // netlink requests made, for tests and benchmarks
}

// nftChainRead is what a targeted read found of one Service chain.
type nftChainRead struct {
	exists bool
	port   portKey
	rules  int               // local-*: its rules
	eps    map[Endpoint]bool // local-*: what they send to
}

func newNFTRelist(c *nftConn, ipv6 bool, m *nftModel) *nftRelist {
	d := &nftRelist{c: c, fam: unix.NFPROTO_IPV4, addrLen: 4, model: m,
		chains: map[string]nftChainRead{}, noEP: map[int]map[nftKey]nftNoEndpoint{},
		disp: map[int]map[nftKey]portKey{}, anon: map[string][]nlElem{}}
	if ipv6 {
		d.fam, d.addrLen = unix.NFPROTO_IPV6, 16
	}
	return d
}

// read reads the named objects of table kube-proxy, then every Service
// chain they send to that the model does not know: kube-proxy creates a
// Service's chains without that being a notified change (it "adds" every
// chain it refills), but sends to each from a map element or an external-*
// chain's rule, whose change is named.
func (d *nftRelist) read(names []objName) error {
	for _, n := range names {
		if n.table != "kube-proxy" {
			continue
		}
		if n.set {
			if err := d.readMap(n.name); err != nil {
				return err
			}
			continue
		}
		d.queue(n.name, true)
	}
	for len(d.pending) > 0 {
		name := d.pending[0]
		d.pending = d.pending[1:]
		if err := d.readChain(name); err != nil {
			return err
		}
	}
	return nil
}

// queue asks for a Service chain to be read: a named one always, one sent to
// only when the model does not know it.
func (d *nftRelist) queue(chain string, named bool) {
	if _, _, ok := nftServiceChain(chain); !ok {
		return
	}
	if _, done := d.chains[chain]; done || slicesContains(d.pending, chain) {
		return
	}
	if _, known := d.model.chains[chain]; known && !named {
		return
	}
	d.pending = append(d.pending, chain)
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (d *nftRelist) readMap(name string) error {
	mp, ok := nftModelMaps[name]
	if !ok {
		return nil
	}
	elems, _, err := d.c.setElems(d.fam, "kube-proxy", name)
	d.dumps++
	if err != nil {
		return fmt.Errorf("map %s: %w", name, err)
	}
	noEP := map[nftKey]nftNoEndpoint{}
	disp := map[nftKey]portKey{}
	for i, e := range elems {
		k, ok := nftKeyFromBytes(e.key, mp.withAddr, d.addrLen)
		if !ok || e.odd || !e.verdict {
			return fmt.Errorf("map %s element %d (key %x): not in the shape of kube-proxy's maps", name, i, e.key)
		}
		if !mp.noEP {
			if prefix, port, ok := nftServiceChain(e.target()); ok && prefix == "external-" {
				disp[k] = port
			}
			d.queue(e.target(), false)
			continue
		}
		ne := nftNoEndpoint{comment: e.comment, packets: e.packets, counted: e.counted,
			drop: e.code == nfDrop, reject: e.target() == "reject-chain"}
		k.fill(&ne)
		noEP[k] = ne
	}
	switch {
	case mp.noEP:
		d.noEP[mp.index] = noEP
	case mp.index >= 0:
		d.disp[mp.index] = disp
	}
	return nil
}

func (d *nftRelist) readChain(name string) error {
	prefix, port, _ := nftServiceChain(name)
	cr := nftChainRead{port: port}
	if prefix == "local-" || prefix == "external-" {
		cr.eps = map[Endpoint]bool{}
		// The rules are decoded after the dump: one that refers to an
		// anonymous set dumps it, on the same connection. (The library hands
		// every datagram out in memory of its own: slices of it keep.)
		var raw [][]byte
		err := d.c.dump(d.fam, nftGetRule, unix.NFTA_RULE_TABLE, "kube-proxy", unix.NFTA_RULE_CHAIN, name, func(m nftMsg) error {
			if m.typ == unix.NFT_MSG_NEWRULE {
				raw = append(raw, m.attrs)
			}
			return nil
		})
		d.dumps++
		if err != nil {
			return fmt.Errorf("chain %s: %w", name, err)
		}
		cr.rules = len(raw)
		for i, attrs := range raw {
			rr, err := decodeRule(attrs, d.addrLen, d.anonElems)
			if err != nil {
				return fmt.Errorf("chain %s rule %d: %w", name, i, err)
			}
			for _, e := range rr.eps {
				cr.eps[e] = true
			}
			if prefix == "external-" {
				for _, t := range rr.targets {
					d.queue(t, false)
				}
			}
		}
		// A chain with rules exists; an empty dump is also what a missing chain gives.
		cr.exists = cr.rules > 0
	}
	if !cr.exists {
		ok, err := d.c.getChain(d.fam, "kube-proxy", name)
		d.dumps++
		if err != nil {
			return err
		}
		cr.exists = ok
	}
	d.chains[name] = cr
	return nil
}

// anonElems are an anonymous set's elements, dumped once per read.
func (d *nftRelist) anonElems(name string) ([]nlElem, error) {
	if e, ok := d.anon[name]; ok {
		return e, nil
	}
	elems, ok, err := d.c.setElems(d.fam, "kube-proxy", name)
	d.dumps++
	if err != nil {
		return nil, fmt.Errorf("anonymous set %s: %w", name, err)
	}
	if !ok {
		return nil, fmt.Errorf("anonymous set %s: gone", name)
	}
	for _, e := range elems {
		if e.odd {
			return nil, fmt.Errorf("anonymous set %s: an interval or catch-all element", name)
		}
	}
	d.anon[name] = elems
	return elems, nil
}

// apply writes the delta into the model.
func (d *nftRelist) apply(m *nftModel) {
	for name, cr := range d.chains {
		if !cr.exists {
			delete(m.chains, name)
			delete(m.local, name)
			continue
		}
		m.chains[name] = cr.port
		if strings.HasPrefix(name, "local-") {
			m.setLocal(name, cr.port, cr.eps, cr.rules)
		}
	}
	for i, elems := range d.noEP {
		m.noEP[i] = elems
	}
	for i, elems := range d.disp {
		m.dispatch[i] = elems
	}
}
