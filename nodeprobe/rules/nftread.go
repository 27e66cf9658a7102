package rules

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// readNFT reads `nft -j list table ip kube-proxy` and the ip6 table. A missing
// table means that family is not programmed.
func (r *reader) readNFT(ctx context.Context) (*Snapshot, error) {
	nft, err := r.binary("nft")
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Mode: ModeNFTables}
	for _, f := range []struct{ fam, name string }{{"ip", FamilyIPv4}, {"ip6", FamilyIPv6}} {
		out, err := r.opts.Runner.Run(ctx, nft, "-j", "list", "table", f.fam, "kube-proxy")
		if err != nil {
			var ce *CommandError
			if errors.As(err, &ce) && (strings.Contains(ce.Stderr, "No such file or directory") || strings.Contains(ce.Stderr, "not supported")) {
				continue // no such table: family not programmed
			}
			return nil, fmt.Errorf("reading nftables table %s kube-proxy: %w", f.fam, err)
		}
		res, err := parseNFTJSON(out)
		if err != nil {
			return nil, fmt.Errorf("parsing nft -j list table %s kube-proxy: %w", f.fam, err)
		}
		snap.addFamily(f.name, res.ports)
	}
	if len(snap.Families) == 0 {
		return nil, fmt.Errorf("no nftables table ip/ip6 kube-proxy: %w", ErrNoRules)
	}
	return snap, nil
}
