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
				if r.verifyDue(t) {
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

var (
	// errWhole: a read in part cannot be made (the watcher cannot name what
	// changed, or did not judge the generation); the table is read whole.
	errWhole = errors.New("cannot read in part")
	// errMoved: the generation moved during every attempt of a read in part.
	errMoved = errors.New("the ruleset moved during every read in part")
)

// readAtOneGeneration calls read with a netlink connection at one nf_tables
// generation, which the watcher has judged (so the objects it names are
// complete), and which has not moved when read returns: else read is called
// again, at most relistAttempts times (errMoved). It returns that generation.
// read returns errWhole when it cannot read in part; so does this when the
// watcher did not judge the generation in time.
func readAtOneGeneration(ctx context.Context, w *nftWatch, scope watchScope, read func(c *nftConn, view *watchView) error) (uint32, error) {
	for range relistAttempts {
		c, err := dialNFT(ctx, w.netns, nftDumpBuffer)
		if err != nil {
			return 0, err
		}
		gen, err := c.generation()
		if err == nil {
			if view := w.await(ctx, gen, scope); view == nil {
				err = errWhole
			} else {
				err = read(c, view)
			}
		}
		var after uint32
		if err == nil {
			after, err = c.generation()
		}
		c.close()
		if err != nil {
			return 0, err
		}
		if after == gen {
			return gen, nil
		}
	}
	return 0, errMoved
}

// inPartFailed is what a read in part that did not succeed leaves: the table
// is read whole (nothing, false, nil), logged at debug when something failed,
// unless the Read's context ended.
func (r *reader) inPartFailed(ctx context.Context, key, what string, err error) (cachedTable, bool, error) {
	switch {
	case errors.Is(err, errWhole):
	case ctx.Err() != nil:
		return cachedTable{}, false, fmt.Errorf("reading %s of %s: %w", what, key, err)
	default:
		r.opts.Logger.Debug("reading the changed "+what+" failed; reading the table whole", "table", key, "err", err)
	}
	return cachedTable{}, false, nil
}

// relistNFT brings the kept table of one family up to date by reading again,
// over netlink, only the objects the relevant transactions since it was listed
// changed (nftrelist.go), and computing every port's state from the updated
// model as a whole listing would, at one generation (readAtOneGeneration).
// ok false: the table is to be listed whole (no kept model, an opaque one,
// names the watcher cannot give, the generation never held, or a read that
// failed or found something not in kube-proxy's shape, logged at debug).
func (r *reader) relistNFT(ctx context.Context, sig *signals, fi int, ipv6 bool, key string) (cachedTable, bool, error) {
	kept, ok := r.tables.byKey[key]
	if !ok || sig.w == nil || sig.view == nil || kept.absent || kept.nft == nil || kept.nft.model == nil || kept.nft.model.opaque {
		return cachedTable{}, false, nil
	}
	w, m := sig.w, kept.nft.model
	var d *nftRelist
	gen, err := readAtOneGeneration(ctx, w, sig.scope, func(c *nftConn, view *watchView) error {
		d = nil
		if view.unchangedSince(fi, kept.sig.gen) {
			return nil
		}
		names, ok := w.changedSince(fi, kept.sig.gen)
		if !ok {
			return errWhole
		}
		d = newNFTRelist(c, ipv6, m)
		return d.read(names)
	})
	if err != nil {
		return r.inPartFailed(ctx, key, "nftables objects", err)
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
