package kernelrules

import (
	"bytes"

	"golang.org/x/sys/unix"
)

// Bounds of the transaction accounting's memory. A transaction is judged with
// one running sum per family (see txAccount); only anonymous sets need memory
// per object, and only those of the followed tables.
const (
	// maxTxAnon bounds the anonymous sets followed within one transaction (a
	// full nftables sync of 10,000 Services creates about that many numgen
	// maps); a rule referring to one past the bound counts as a change.
	maxTxAnon = 1 << 16
	// maxKeptAnon bounds, per family, the anonymous sets remembered across
	// transactions: those a relevant rule refers to (a local-* chain with two
	// or more local endpoints). Past it, deleting such a rule counts as a change.
	maxKeptAnon = 1 << 17
	// maxTxObjects bounds, per family, the relevant objects one transaction
	// follows by name. A partial sync touches a few per Service it rewrites
	// (nftables mode: its local-* and external-* chains, a map or two), a full
	// sync every one; past the bound the transaction's objects are not named
	// and a read saves or lists the family's tables whole.
	maxTxObjects = 256
)

// famTx is one family's share of the transaction in flight.
type famTx struct {
	// sum and n are the multiset of relevant (object, content) items the
	// transaction added minus those it deleted (item: wrapping sum of random
	// 64-bit values; n: their count). A rewrite that puts back what it took —
	// a chain flushed and refilled in another order, a map flushed and refilled
	// — leaves both at zero; any other change leaves either non-zero, but for
	// a chance of 2⁻⁶⁴.
	sum uint64
	n   int64
	// flagged: a change that is one whatever the content (a relevant chain
	// deleted, a rule whose anonymous set is unknown, a message that did not
	// decode).
	flagged bool
	// touched: a rule of a counter chain was added or deleted, even unchanged.
	touched [2]bool
	// objs are the relevant objects the transaction added or deleted content
	// of, each with its own share of sum and n: the family's sums say whether
	// anything changed, these which objects did (a chain refilled as it was
	// nets to zero on its own). tabs indexes them by table, kind and name.
	// unnamed: the objects that changed cannot be named (past maxTxObjects, a
	// table created or deleted, a message that did not decode).
	objs    []txObject
	tabs    []txTable
	unnamed bool
}

func (f *famTx) changed() bool { return f.flagged || f.sum != 0 || f.n != 0 }

// objName names an nf_tables object whose content a read may depend on: a
// chain (its rules, and whether it exists) or a named set or map (its elements).
type objName struct {
	table string
	set   bool
	name  string
}

// txObject is one relevant object's share of its family's transaction sums.
type txObject struct {
	name    objName
	sum     uint64
	n       int64
	flagged bool
}

func (o *txObject) changed() bool { return o.flagged || o.sum != 0 || o.n != 0 }

// add counts one item the transaction added (or, with add false, deleted).
func (o *txObject) add(it uint64, add bool) {
	if o == nil {
		return
	}
	if add {
		o.sum += it
		o.n++
	} else {
		o.sum -= it
		o.n--
	}
}

func (o *txObject) flag() {
	if o != nil {
		o.flagged = true
	}
}

// txTable indexes a table's objects in famTx.objs, chains and sets apart.
type txTable struct {
	table string
	idx   [2]map[string]int
}

// obj returns the transaction's entry of an object (a set with set true, else
// a chain), nil once the family's objects cannot be named. Looking one up
// allocates nothing; the first sight of one in a transaction allocates its
// name.
func (f *famTx) obj(table, name []byte, set bool) *txObject {
	if f.unnamed {
		return nil
	}
	kind := 0
	if set {
		kind = 1
	}
	var tab *txTable
	for i := range f.tabs {
		if f.tabs[i].table == string(table) {
			tab = &f.tabs[i]
			break
		}
	}
	if tab == nil {
		f.tabs = append(f.tabs, txTable{table: string(table)})
		tab = &f.tabs[len(f.tabs)-1]
	}
	if i, ok := tab.idx[kind][string(name)]; ok {
		return &f.objs[i]
	}
	if len(f.objs) >= maxTxObjects {
		f.unnamed = true
		return nil
	}
	if tab.idx[kind] == nil {
		tab.idx[kind] = map[string]int{}
	}
	n := string(name)
	tab.idx[kind][n] = len(f.objs)
	f.objs = append(f.objs, txObject{name: objName{table: tab.table, set: set, name: n}})
	return &f.objs[len(f.objs)-1]
}

// forget resets the family's share for the next transaction, keeping the
// index's memory (bounded by maxTxObjects).
func (f *famTx) forget() {
	for i := range f.tabs {
		for _, m := range f.tabs[i].idx {
			clear(m)
		}
	}
	clear(f.objs)
	*f = famTx{objs: f.objs[:0], tabs: f.tabs}
}

// txNames is what a transaction changed in one family, by name: the objects
// whose content changed, or unnamed when they cannot be told.
type txNames struct {
	unnamed bool
	objs    []objName
}

// txJudgement is a transaction's judgement, per family: whether it changed
// something the scope's parse reads, what (names), and which counter chains it
// rewrote.
type txJudgement struct {
	changed [2]bool
	touched [2][2]bool
	names   [2]txNames
}

// anonAcc is an anonymous set created in the transaction in flight: its
// elements' multiset, and whether a relevant rule referred to it.
type anonAcc struct {
	sum      uint64
	n        int64
	referred bool
}

// anonContent is an anonymous set's content from its elements' multiset.
func anonContent(sum uint64, n int64) uint64 { return mix64(sum ^ uint64(n)*0x9e3779b97f4a7c15) }

// txAccount follows the notification stream one message at a time and judges
// each transaction when its NEWGEN arrives: did it change, per family, an
// object the scope's parse reads? It belongs to the receiving goroutine.
type txAccount struct {
	scope watchScope
	fam   [2]famTx
	// anon: the anonymous sets created in the transaction in flight, per
	// family, by name (kube-proxy's numgen maps: a rewritten rule gets a new
	// set, possibly under the name its old one had).
	anon     [2]map[string]*anonAcc
	anonN    int
	anonFull bool
	// kept: the content of each anonymous set a relevant rule refers to, by
	// name, as of the last accepted transaction; dropped lists those a deleted
	// rule referred to in the transaction in flight (applied when it is
	// accepted, with the new ones).
	kept    [2]map[string]uint64
	dropped [2][]string
	// bad: a message did not decode; the transaction changed everything.
	bad bool
	// messages counts the nf_tables messages decoded.
	messages uint64
}

func newTxAccount() *txAccount {
	t := &txAccount{}
	for i := range t.anon {
		t.anon[i] = map[string]*anonAcc{}
		t.kept[i] = map[string]uint64{}
	}
	return t
}

// famIndex maps a netfilter family to the index of its ipFamilies entry; -1
// for families kube-proxy does not write (inet, arp, bridge, netdev).
func famIndex(fam uint8) int {
	switch fam {
	case unix.NFPROTO_IPV4:
		return 0
	case unix.NFPROTO_IPV6:
		return 1
	}
	return -1
}

// message takes one netlink message of the stream; isGen when it is a NEWGEN,
// which ends the transaction (judge it with end).
func (t *txAccount) message(htype uint16, data []byte) (gen uint32, isGen bool) {
	m, ok, err := parseNFTMsg(htype, data)
	if err != nil {
		t.bad = true
		return 0, false
	}
	if !ok {
		return 0, false
	}
	t.messages++
	if m.typ == unix.NFT_MSG_NEWGEN {
		g, err := parseGen(data)
		if err != nil {
			t.bad = true
			return 0, false
		}
		return g, true
	}
	fi := famIndex(m.family)
	if fi < 0 {
		if !t.scope.known && m.family == unix.NFPROTO_INET {
			t.fam[0].flagged, t.fam[1].flagged = true, true
			t.fam[0].unnamed, t.fam[1].unnamed = true, true
		}
		return 0, false
	}
	f := &t.fam[fi]
	if !t.scope.known {
		f.flagged, f.unnamed = true, true
		return 0, false
	}
	switch m.typ {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE:
		if t.scope.tableEvent(m.table) {
			f.flagged, f.unnamed = true, true
		}
	case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
		if t.scope.chainEvent(m.table, m.name, m.typ == unix.NFT_MSG_DELCHAIN) {
			f.flagged = true
			f.obj(m.table, m.name, false).flag()
		}
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		t.rule(fi, m)
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		t.set(fi, m)
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		t.elems(fi, m)
	}
	return 0, false
}

func isAnonName(name []byte) bool { return bytes.HasPrefix(name, []byte("__")) }

func (t *txAccount) rule(fi int, m nftMsg) {
	f := &t.fam[fi]
	relevant, counter := t.scope.ruleContent(m.table, m.name)
	if counter >= 0 {
		f.touched[counter] = true
	}
	if !relevant {
		return
	}
	add := m.typ == unix.NFT_MSG_NEWRULE
	resolve := func(name []byte) (uint64, bool) {
		if add {
			a := t.anon[fi][string(name)]
			if a == nil {
				return 0, false
			}
			a.referred = true
			return anonContent(a.sum, a.n), true
		}
		c, ok := t.kept[fi][string(name)]
		if ok {
			t.dropped[fi] = append(t.dropped[fi], string(name))
		}
		return c, ok
	}
	o := f.obj(m.table, m.name, false)
	key, resolved, err := ruleContentKey(m.attrs, resolve)
	if err != nil || !resolved {
		f.flagged = true
		o.flag()
		return
	}
	it := item(nameHash('r', m.family, m.table, m.name), key)
	if add {
		f.sum += it
		f.n++
	} else {
		f.sum -= it
		f.n--
	}
	o.add(it, add)
}

func (t *txAccount) set(fi int, m nftMsg) {
	if isAnonName(m.name) || m.setFlg&unix.NFT_SET_ANONYMOUS != 0 {
		if m.typ == unix.NFT_MSG_NEWSET && t.scope.anonTable(m.table) {
			if a := t.anon[fi][string(m.name)]; a != nil {
				*a = anonAcc{} // a name freed earlier in the transaction, reused
				return
			}
			if t.anonN >= maxTxAnon {
				t.anonFull = true
				return
			}
			t.anon[fi][string(m.name)] = &anonAcc{}
			t.anonN++
		}
		return
	}
	if m.typ == unix.NFT_MSG_DELSET && t.scope.setContent(m.table, m.name) {
		t.fam[fi].flagged = true
		t.fam[fi].obj(m.table, m.name, true).flag()
	}
}

func (t *txAccount) elems(fi int, m nftMsg) {
	f := &t.fam[fi]
	if isAnonName(m.name) {
		a := t.anon[fi][string(m.name)]
		if a == nil || m.typ != unix.NFT_MSG_NEWSETELEM {
			return
		}
		if err := forEachElem(m.attrs, func(k uint64) { a.sum += mix64(k); a.n++ }); err != nil {
			*a = anonAcc{n: -1} // cannot be resolved to anything a dump gives
		}
		return
	}
	if !t.scope.setContent(m.table, m.name) {
		return
	}
	obj := nameHash('s', m.family, m.table, m.name)
	o := f.obj(m.table, m.name, true)
	add := m.typ == unix.NFT_MSG_NEWSETELEM
	err := forEachElem(m.attrs, func(k uint64) {
		it := item(obj, k)
		if add {
			f.sum += it
			f.n++
		} else {
			f.sum -= it
			f.n--
		}
		o.add(it, add)
	})
	if err != nil {
		f.flagged = true
		o.flag()
	}
}

// end judges the transaction that a NEWGEN just ended and forgets it; with
// accept false (a transaction from before the baseline, possibly cut) it is
// only forgotten.
func (t *txAccount) end(accept bool) (j txJudgement) {
	if accept {
		for fi := range t.fam {
			f := &t.fam[fi]
			j.changed[fi] = t.bad || f.changed()
			j.touched[fi] = f.touched
			if t.bad {
				j.touched[fi] = [2]bool{true, true}
			}
			if j.changed[fi] {
				j.names[fi] = f.names(t.bad)
			}
			for _, name := range t.dropped[fi] {
				delete(t.kept[fi], name)
			}
			for name, a := range t.anon[fi] {
				if a.referred && a.n >= 0 && len(t.kept[fi]) < maxKeptAnon {
					t.kept[fi][name] = anonContent(a.sum, a.n)
				}
			}
		}
	}
	t.forgetTx()
	return j
}

// names lists the objects whose content the transaction changed (every
// object's sum is its share of the family's: a family that changed has one
// that did, or it cannot say).
func (f *famTx) names(bad bool) txNames {
	if bad || f.unnamed {
		return txNames{unnamed: true}
	}
	var out []objName
	for i := range f.objs {
		if f.objs[i].changed() {
			out = append(out, f.objs[i].name)
		}
	}
	if len(out) == 0 {
		return txNames{unnamed: true}
	}
	return txNames{objs: out}
}

// forgetTx drops the transaction in flight.
func (t *txAccount) forgetTx() {
	for fi := range t.fam {
		t.fam[fi].forget()
	}
	t.bad = false
	for fi := range t.anon {
		t.dropped[fi] = t.dropped[fi][:0]
		if len(t.anon[fi]) > 1024 {
			// A full sync's thousands of maps: do not keep its buckets.
			t.anon[fi] = map[string]*anonAcc{}
		} else {
			clear(t.anon[fi])
		}
	}
	t.anonN, t.anonFull = 0, false
}

// rebase starts over from a baseline: the transaction in flight is dropped,
// and the anonymous sets known are those given (a dump's, at the baseline).
func (t *txAccount) rebase(scope watchScope, kept [2]map[string]uint64) {
	t.forgetTx()
	t.scope = scope
	for fi := range t.kept {
		t.kept[fi] = kept[fi]
		if t.kept[fi] == nil {
			t.kept[fi] = map[string]uint64{}
		}
	}
}
