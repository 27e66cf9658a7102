package kernelrules

import (
	"bytes"
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// Reads in part, iptables mode with the nft backend (doc.go, "Reads in part"):
// nat is brought up to date by reading again only the chains of the Service
// ports that relevant transactions changed, instead of saving the whole table.

// natPortPrefixes name the nat chains of one Service port; any of them makes
// the port Programmed (iptablesResult.chain). The parse reads the rules of
// KUBE-SVL and KUBE-XLB only (local endpoints; ≤1.24 drops).
var natPortPrefixes = [][]byte{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixXLB}

// natPortKey is the Service port whose nat chain name is.
func natPortKey(name string) (portKey, bool) {
	for _, p := range natPortPrefixes {
		if k, ok := hashSuffix([]byte(name), p); ok {
			return k, true
		}
	}
	return portKey{}, false
}

// natKeysOf returns the Service ports whose nat chains the named objects are,
// each once. False when a nat object other than a Service port's chain
// changed — KUBE-SERVICES or KUBE-NODEPORTS (a Service created or deleted, or
// its cluster IP or NodePort moved), a fixed chain, a set — which only a whole
// save reads. Objects of other tables are not nat's.
func natKeysOf(names []objName) ([]portKey, bool) {
	var keys []portKey
	seen := map[portKey]bool{}
	for _, o := range names {
		if o.table != string(tableNAT) {
			continue
		}
		if o.set {
			return nil, false
		}
		k, ok := natPortKey(o.name)
		if !ok {
			return nil, false
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, true
}

// untouched says whether the watcher can name every object that relevant
// transactions of family fi changed after generation g, and none of them is in
// table: a table kept from g still holds, though the family changed.
func untouched(sig *signals, fi int, g uint32, table []byte) bool {
	if sig.w == nil || sig.view == nil {
		return false
	}
	names, ok := sig.w.changedSince(fi, g)
	if !ok {
		return false
	}
	for _, o := range names {
		if o.table == string(table) {
			return false
		}
	}
	return true
}

// listCommand names the binary that lists one chain with the backend
// (`iptables-nft -t nat -S <chain>`).
func listCommand(f ipFamily, backend Backend) string {
	if f.ipv6 {
		return "ip6tables-" + string(backend)
	}
	return "iptables-" + string(backend)
}

// relistNAT brings the kept nat of one family up to date by reading again
// only the chains of the Service ports that relevant transactions since its
// save changed: for each such port, whether each of its five chains exists
// (NFT_MSG_GETCHAIN), and the rules of its KUBE-SVL and KUBE-XLB that do, with
// `iptables-nft -t nat -S <chain>`, parsed as a save is. iptables-nft fetches
// only the chain asked for (2 ms at 10,000 Services, where saving nat costs a
// second), and the kernel keeps the rules in nf_tables' form, which iptables-nft
// turns back into the spelling the parse reads. The reads are made at one
// generation (readAtOneGeneration). ok false: nat is to be saved whole (no kept
// parse, one with drops, names the watcher cannot give or that are not
// Service-port chains, the generation never held, or a read that failed,
// logged at debug).
func (r *reader) relistNAT(ctx context.Context, sig *signals, fi int, f ipFamily, key string) (cachedTable, bool, error) {
	kept, ok := r.tables.byKey[key]
	if !ok || sig.w == nil || sig.view == nil || kept.ipt == nil || natCountsDrops(kept.ipt) {
		return cachedTable{}, false, nil
	}
	bin, err := r.binary(listCommand(f, BackendNFT))
	if err != nil {
		return r.inPartFailed(ctx, key, "nat chains", err)
	}
	fam := byte(unix.NFPROTO_IPV4)
	if f.ipv6 {
		fam = unix.NFPROTO_IPV6
	}
	w := sig.w
	var fresh map[portKey]*PortState
	gen, err := readAtOneGeneration(ctx, w, sig.scope, func(c *nftConn, view *watchView) error {
		fresh = nil
		if view.unchangedSince(fi, kept.sig.gen) {
			return nil
		}
		names, ok := w.changedSince(fi, kept.sig.gen)
		keys, nat := natKeysOf(names)
		if !ok || !nat {
			return errWhole
		}
		if len(keys) > 0 {
			fresh = make(map[portKey]*PortState, len(keys))
		}
		for _, k := range keys {
			st, err := r.readNATPort(ctx, c, fam, bin, k)
			if err != nil {
				return err
			}
			fresh[k] = st
		}
		return nil
	})
	if err != nil {
		return r.inPartFailed(ctx, key, "nat chains", err)
	}
	r.relists.Add(1)
	res := kept.ipt
	if fresh != nil {
		if res = patchNAT(kept.ipt, fresh); natCountsDrops(res) {
			return cachedTable{}, false, nil // ≤1.24 drops in nat: never kept
		}
	}
	return cachedTable{sig: changeSig{gen: gen}, savedAt: kept.savedAt, ipt: res}, true, nil
}

// readNATPort reads what nat says of one Service port: nil when none of its
// chains exists (the Service port is gone), else its state as a save's parse
// gives it.
func (r *reader) readNATPort(ctx context.Context, c *nftConn, fam byte, bin string, k portKey) (*PortState, error) {
	res := newIPTablesResult()
	exists := false
	for _, p := range natPortPrefixes {
		name := string(p) + string(k[:])
		ok, err := c.getChain(fam, string(tableNAT), name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		exists = true
		if !bytes.Equal(p, prefixSVL) && !bytes.Equal(p, prefixXLB) {
			continue
		}
		r.relistDumps.Add(1)
		out, err := r.opts.Runner.Run(ctx, bin, "-t", string(tableNAT), "-S", name)
		if err != nil {
			return nil, fmt.Errorf("listing nat chain %s: %w", name, err)
		}
		if err := parseChainListing(out, name, res); err != nil {
			return nil, fmt.Errorf("listing nat chain %s: %w", name, err)
		}
	}
	if !exists {
		return nil, nil
	}
	st := stateFor(res.ports, k)
	st.Programmed = true
	return st, nil
}

// parseChainListing parses `iptables -t nat -S <chain>` (the chain's "-N" and
// its "-A" rules, spelt as a save spells them) into res, as the save of a nat
// table holding that chain alone would be parsed. Any other line, or a rule of
// another chain, is an error: never taken for fewer rules.
func parseChainListing(out []byte, chain string, res *iptablesResult) error {
	var save bytes.Buffer
	save.WriteString("*nat\n")
	for line := range bytes.Lines(out) {
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
		case bytes.Equal(line, []byte("-N "+chain)):
			save.WriteString(":" + chain + " - [0:0]\n")
		case bytes.HasPrefix(line, []byte("-A "+chain+" ")):
			save.Write(line)
			save.WriteByte('\n')
		default:
			return fmt.Errorf("unexpected %q", clip(line))
		}
	}
	save.WriteString("COMMIT\n")
	return parseIPTablesSave(save.Bytes(), res)
}

// patchNAT is a copy of a kept nat parse with the given ports' states put in
// place of its own (a nil state: the port is gone). The kept parse, which
// snapshots share, is not modified. Its rule counts (the backend detection's
// vote, taken from saves of their own) are not brought up to date.
func patchNAT(kept *iptablesResult, fresh map[portKey]*PortState) *iptablesResult {
	res := *kept
	res.ports = make(map[portKey]*PortState, len(kept.ports)+len(fresh))
	for k, st := range kept.ports {
		res.ports[k] = st
	}
	for k, st := range fresh {
		if st == nil {
			delete(res.ports, k)
			continue
		}
		res.ports[k] = st
	}
	return &res
}
