package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// readNFT reads `nft -j list table ip kube-proxy` and the ip6 table, each only
// when the nf_tables generation moved since it was last read (or always, with
// element counters: they move without a generation change). A missing table
// means that family is not programmed.
func (r *reader) readNFT(ctx context.Context) (*Snapshot, error) {
	nft, err := r.binary("nft")
	if err != nil {
		return nil, err
	}
	r.useTables(ModeNFTables, "")
	sig := r.newSignals(scopeOf(ModeNFTables, ""))
	snap := &Snapshot{Mode: ModeNFTables}
	defer func() { snap.Watch, snap.Resyncs = sig.state(), r.resyncs.Load() }()
	for fi, f := range []struct {
		fam, name string
		ipv6      bool
	}{{"ip", FamilyIPv4, false}, {"ip6", FamilyIPv6, true}} {
		key := f.name + "/kube-proxy"
		s, sigErr := sig.get(ctx, f.ipv6, "kube-proxy")
		c, v, verify := r.cached(key, fi, s, sigErr, sig.view)
		if v == vouchNone {
			kept := c
			c, err = r.listNFTTable(ctx, nft, f.fam)
			if err != nil {
				return nil, err
			}
			if verify && !sameNFT(kept, c) {
				r.drifted(key, verifyHow(""))
			}
			if c.nft != nil && nftCounted(c.nft) {
				sigErr = errors.New("elements carry counters")
			}
			r.keep(key, s, sigErr, c)
		}
		if c.absent {
			continue // no such table: family not programmed
		}
		// The parsed states (Drops sorted once, in nftModel.ports) are shared by
		// the snapshots made from them: snapshots are immutable.
		snap.Families = append(snap.Families, f.name)
		snap.fams = append(snap.fams, familyPorts{name: f.name, ports: c.nft.ports})
	}
	if len(snap.Families) == 0 {
		return nil, fmt.Errorf("no nftables table ip/ip6 kube-proxy: %w", ErrNoRules)
	}
	return snap, nil
}

// listNFTTable lists and parses one family's kube-proxy table.
func (r *reader) listNFTTable(ctx context.Context, nft, fam string) (cachedTable, error) {
	var res *nftResult
	var err error
	if st, ok := r.opts.Runner.(Streamer); ok {
		// Streamed: the listing of 10,000 Services is tens of MiB of JSON.
		var parseErr error
		err = st.Stream(ctx, func(out io.Reader) error {
			res, parseErr = parseNFTJSONFrom(out)
			return parseErr
		}, nft, "-j", "list", "table", fam, "kube-proxy")
		if err != nil && parseErr != nil && errors.Is(err, parseErr) {
			return cachedTable{}, fmt.Errorf("parsing nft -j list table %s kube-proxy: %w", fam, parseErr)
		}
	} else {
		var out []byte
		if out, err = r.opts.Runner.Run(ctx, nft, "-j", "list", "table", fam, "kube-proxy"); err == nil {
			if res, err = parseNFTJSON(out); err != nil {
				return cachedTable{}, fmt.Errorf("parsing nft -j list table %s kube-proxy: %w", fam, err)
			}
		}
	}
	if err != nil {
		var ce *CommandError
		if errors.As(err, &ce) && (strings.Contains(ce.Stderr, "No such file or directory") || strings.Contains(ce.Stderr, "not supported")) {
			return cachedTable{absent: true}, nil
		}
		return cachedTable{}, fmt.Errorf("reading nftables table %s kube-proxy: %w", fam, err)
	}
	return cachedTable{nft: res}, nil
}

// nftCounted: some drop element carries a counter (kube-proxy writes none).
func nftCounted(res *nftResult) bool {
	for _, st := range res.ports {
		for _, d := range st.Drops {
			if d.Counted {
				return true
			}
		}
	}
	return false
}

// sameNFT says whether two reads of one family's table say the same about
// every Service port (for a verification of a kept one).
func sameNFT(a, b cachedTable) bool {
	if a.absent || b.absent || a.nft == nil || b.nft == nil {
		return a.absent == b.absent && (a.nft == nil) == (b.nft == nil)
	}
	return a.nft.table == b.nft.table && samePorts(a.nft.ports, b.nft.ports)
}
