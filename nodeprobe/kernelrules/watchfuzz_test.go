package kernelrules

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nlMessage is one netlink message of nf_tables type typ around payload (an
// nfgenmsg and attributes), as a notification datagram holds it.
func nlMessage(typ uint16, payload []byte) []byte {
	l := nlmsgHeaderLen + len(payload)
	b := make([]byte, nlmsgHeaderLen, (l+3)&^3)
	binary.NativeEndian.PutUint32(b, uint32(l))
	binary.NativeEndian.PutUint16(b[4:], unix.NFNL_SUBSYS_NFTABLES<<8|typ)
	b = append(b, payload...)
	return append(b, make([]byte, cap(b)-len(b))...)
}

// notificationSeeds are datagrams of the shapes the watcher reads: a counter
// chain's rule deleted and added again (a rewrite), a map element, a
// generation, a chain deleted; and a datagram cut inside a message.
func notificationSeeds(tb testing.TB) [][]byte {
	rule := nftRulePayload(tb, exprOther("payload"), exprOther("cmp"), exprCounterOf(7), exprNamed("immediate", func(d *netlink.AttributeEncoder) { d.Uint32(1, 0) }))
	gen := nftPayload(tb, func(ae *netlink.AttributeEncoder) { ae.Uint32(unix.NFTA_GEN_ID, 9) })
	elem := nftPayload(tb, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, "kube-proxy")
		ae.String(unix.NFTA_SET_ELEM_LIST_SET, "no-endpoint-nodeports")
		ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(l *netlink.AttributeEncoder) error {
			l.Nested(unix.NFTA_LIST_ELEM, func(e *netlink.AttributeEncoder) error {
				e.Nested(unix.NFTA_SET_ELEM_KEY, func(k *netlink.AttributeEncoder) error { k.Bytes(1, []byte{6, 0, 0, 0, 0x75, 0x8a, 0, 0}); return nil })
				e.Uint64(unix.NFTA_SET_ELEM_EXPIRATION, 1234)
				return nil
			})
			return nil
		})
	})
	chain := nftPayload(tb, func(ae *netlink.AttributeEncoder) {
		ae.String(nftaChainTable, "nat")
		ae.String(nftaChainName, "KUBE-SVL-2CMXP7HKUVJN7L6M")
	})
	var rewrite []byte
	rewrite = append(rewrite, nlMessage(unix.NFT_MSG_DELRULE, rule)...)
	rewrite = append(rewrite, nlMessage(unix.NFT_MSG_NEWRULE, rule)...)
	rewrite = append(rewrite, nlMessage(unix.NFT_MSG_NEWGEN, gen)...)
	elems := append(nlMessage(unix.NFT_MSG_NEWSETELEM, elem), nlMessage(unix.NFT_MSG_NEWGEN, gen)...)
	dels := append(nlMessage(unix.NFT_MSG_DELCHAIN, chain), nlMessage(unix.NFT_MSG_NEWGEN, gen)...)
	return [][]byte{rewrite, elems, dels, rewrite[:len(rewrite)-30], rule}
}

// TestNotificationShapes: a rule deleted and added again in one transaction
// is no change; the same rule only added is; a map element of a read map is
// a change in nftables mode and none in iptables mode; a Service chain
// deleted is one in iptables mode.
func TestNotificationShapes(t *testing.T) {
	seeds := notificationSeeds(t)
	judge := func(scope watchScope, datagram []byte) [2]bool {
		acct := newTxAccount()
		acct.scope = scope
		var changed [2]bool
		forEachMessage(datagram, func(h uint16, d []byte) {
			if _, ok := acct.message(h, d); ok {
				j := acct.end(true)
				changed[0], changed[1] = changed[0] || j.changed[0], changed[1] || j.changed[1]
			}
		})
		return changed
	}
	ipt, nft := scopeOf(ModeIPTables, BackendNFT), scopeOf(ModeNFTables, "")
	gen := nftPayload(t, func(ae *netlink.AttributeEncoder) { ae.Uint32(unix.NFTA_GEN_ID, 9) })
	addOnly := append(nlMessage(unix.NFT_MSG_NEWRULE, seeds[4]), nlMessage(unix.NFT_MSG_NEWGEN, gen)...)
	for _, c := range []struct {
		name  string
		scope watchScope
		data  []byte
		want  bool
	}{
		{"rule deleted and added again", ipt, seeds[0], false},
		{"rule added", ipt, addOnly, true},
		{"element, nftables mode", nft, seeds[1], true},
		{"element, iptables mode", ipt, seeds[1], false},
		{"Service chain deleted", ipt, seeds[2], true},
		{"anything before the first read", watchScope{}, seeds[0], true},
	} {
		if got := judge(c.scope, c.data); got[0] != c.want || got[1] {
			t.Errorf("%s: changed %v, want IPv4 %v only", c.name, got, c.want)
		}
	}
}

// FuzzNFTNotification: any datagram is judged without a panic in every
// scope, and a rule that decodes, deleted and added again in one
// transaction, is never a change.
func FuzzNFTNotification(f *testing.F) {
	for _, s := range notificationSeeds(f) {
		f.Add(s)
	}
	scopes := []watchScope{{}, scopeOf(ModeIPTables, BackendNFT), scopeOf(ModeNFTables, ""), scopeOf(ModeIPTables, BackendLegacy)}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, scope := range scopes {
			acct := newTxAccount()
			acct.scope = scope
			forEachMessage(data, func(h uint16, d []byte) {
				if _, ok := acct.message(h, d); ok {
					checkNames(t, acct.end(true))
				}
			})
			checkNames(t, acct.end(true))
		}
		_ = ruleIdentityOf(data)
		_ = forEachElem(data, func(uint64) {})
		if _, _, err := ruleCounter(data); err == nil {
			_, _, _ = ruleContentKey(data, func([]byte) (uint64, bool) { return 1, true })
		}
		// data as a rule of a counter chain: a rewrite of it is no change.
		payload := append(nfgenmsg(unix.NFPROTO_IPV4), data...)
		m, ok, err := parseNFTMsg(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE, payload)
		if err != nil || !ok || string(m.table) != "filter" || string(m.name) != "KUBE-EXTERNAL-SERVICES" {
			return
		}
		if _, resolved, err := ruleContentKey(m.attrs, nil); err != nil || !resolved {
			return
		}
		acct := newTxAccount()
		acct.scope = scopeOf(ModeIPTables, BackendNFT)
		acct.message(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_DELRULE, payload)
		acct.message(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE, payload)
		if j := acct.end(true); j.changed[0] || j.changed[1] {
			t.Errorf("a rule deleted and added again counted as a change: %x", data)
		}
	})
}

// checkNames holds a judgement's names to its verdict: a family that changed
// names what did (or says it cannot), one that did not names nothing.
func checkNames(t *testing.T, j txJudgement) {
	t.Helper()
	for fi := range j.changed {
		n := j.names[fi]
		switch {
		case j.changed[fi] && !n.unnamed && len(n.objs) == 0:
			t.Errorf("family %d changed, and nothing named", fi)
		case !j.changed[fi] && (n.unnamed || len(n.objs) > 0):
			t.Errorf("family %d unchanged, and names %+v", fi, n)
		}
	}
}
