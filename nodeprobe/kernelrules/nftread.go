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
// element counters: they move without a generation change). While Watch runs
// and notifications name what changed since a table was listed, only those
// objects are read again (relistNFT). A missing table means that family is not
// programmed.
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
		how := verifyHow("")
		if v == vouchNone && !verify && sigErr == nil {
			t, ok, err := r.relistNFT(ctx, sig, fi, f.ipv6, key)
			if err != nil {
				return nil, err
			}
			if ok {
				r.tables.byKey[key] = t
				c, v = t, vouchNotified
				if r.opts.FullVerify > 0 && r.opts.Now().Sub(t.savedAt) >= r.opts.FullVerify {
					// Listed in part for FullVerify: listed whole now, and compared.
					v, verify, how = vouchNone, true, "change notifications, objects listed again (FullVerify)"
				}
			}
		}
		if v == vouchNone {
			kept := c
			c, err = r.listNFTTable(ctx, nft, f.fam)
			if err != nil {
				return nil, err
			}
			if verify && !sameNFT(kept, c) {
				r.drifted(key, how)
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
		snap.addSorted(f.name, c.nft.ports)
	}
	if len(snap.Families) == 0 {
		return nil, fmt.Errorf("no nftables table ip/ip6 kube-proxy: %w", ErrNoRules)
	}
	return snap, nil
}

// relistAttempts bounds how often a read in part starts again because the
// generation moved while it read.
const relistAttempts = 3

// relistNFT brings the kept table of one family up to date by reading again,
// over netlink, only the objects the relevant transactions since it was listed
// changed (nftrelist.go), and computing every port's state from the updated
// model as a whole listing would. It reads them at one generation: the
// watcher has judged every transaction up to it (so the names are complete),
// and it has not moved when the reads are done — else they are done again, at
// most relistAttempts times. ok false: the table is to be listed whole (no
// kept model, an opaque one, names the watcher cannot give, the generation
// never held, or a read that failed or found something not in kube-proxy's
// shape, logged at debug).
func (r *reader) relistNFT(ctx context.Context, sig *signals, fi int, ipv6 bool, key string) (cachedTable, bool, error) {
	kept, ok := r.tables.byKey[key]
	if !ok || sig.w == nil || sig.view == nil || kept.absent || kept.nft == nil || kept.nft.model == nil || kept.nft.model.opaque {
		return cachedTable{}, false, nil
	}
	w, m := sig.w, kept.nft.model
	fail := func(err error) (cachedTable, bool, error) {
		if ctx.Err() != nil {
			return cachedTable{}, false, fmt.Errorf("reading nftables objects of %s: %w", key, err)
		}
		r.opts.Logger.Debug("reading the changed nftables objects failed; listing the table", "table", key, "err", err)
		return cachedTable{}, false, nil
	}
	for range relistAttempts {
		c, err := dialNFT(ctx, w.netns, nftDumpBuffer)
		if err != nil {
			return fail(err)
		}
		gen, err := c.generation()
		if err != nil {
			c.close()
			return fail(err)
		}
		view := w.await(ctx, gen, sig.scope)
		if view == nil {
			c.close()
			return cachedTable{}, false, nil
		}
		var d *nftRelist
		if !view.unchangedSince(fi, kept.sig.gen) {
			names, ok := w.changedSince(fi, kept.sig.gen)
			if !ok {
				c.close()
				return cachedTable{}, false, nil
			}
			d = newNFTRelist(c, ipv6, m)
			if err := d.read(names); err != nil {
				c.close()
				return fail(err)
			}
		}
		after, err := c.generation()
		c.close()
		if err != nil {
			return fail(err)
		}
		if after != gen {
			continue
		}
		r.relists.Add(1)
		if d == nil {
			kept.sig = changeSig{gen: gen}
			return kept, true, nil
		}
		r.relistDumps.Add(uint64(d.dumps))
		d.apply(m)
		res := &nftResult{ports: m.ports(), table: true, model: m}
		if nftCounted(res) {
			return cachedTable{}, false, nil
		}
		return cachedTable{sig: changeSig{gen: gen}, savedAt: kept.savedAt, nft: res}, true, nil
	}
	r.opts.Logger.Debug("the ruleset moved during every read of the changed nftables objects; listing the table", "table", key)
	return cachedTable{}, false, nil
}

// listNFTTable lists and parses one family's kube-proxy table.
func (r *node) listNFTTable(ctx context.Context, nft, fam string) (cachedTable, error) {
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
