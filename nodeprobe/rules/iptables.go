package rules

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

type ipFamily struct {
	name string // FamilyIPv4 / FamilyIPv6
	ipv6 bool
}

var ipFamilies = [...]ipFamily{{FamilyIPv4, false}, {FamilyIPv6, true}}

// saveCommand names the save binary the kube-proxy image's wrapper would run.
func saveCommand(f ipFamily, backend string) string {
	if f.ipv6 {
		return "ip6tables-" + backend + "-save"
	}
	return "iptables-" + backend + "-save"
}

// toolVersion runs the backend's `iptables-<backend> --version` through the
// Runner, with the read's context (so the single-flight leader never runs a
// command without one), and returns its version ("1.8.9"); "" when unknown.
// Informational only: a failure is logged by the caller as an empty version.
func (r *reader) toolVersion(ctx context.Context, backend string) string {
	bin, err := r.binary("iptables-" + backend)
	if err != nil {
		return ""
	}
	out, err := r.opts.Runner.Run(ctx, bin, "--version")
	if err != nil {
		return ""
	}
	return parseIPTablesVersion(out)
}

// parseIPTablesVersion reads "iptables v1.8.9 (nf_tables)" (or "iptables-legacy
// v1.8.7 (legacy)", "ip6tables v1.8.9 (nf_tables)") into "1.8.9"; "" otherwise.
func parseIPTablesVersion(out []byte) string {
	for _, f := range strings.Fields(string(out)) {
		v, ok := strings.CutPrefix(f, "v")
		if !ok || v == "" {
			continue
		}
		parts := strings.Split(v, ".")
		good := len(parts) >= 2
		for _, p := range parts {
			if p == "" || strings.Trim(p, "0123456789") != "" {
				good = false
			}
		}
		if good {
			return v
		}
	}
	return ""
}

// readIPTables reads nat and filter of both families with the backend
// kube-proxy uses: one `<family>-<backend>-save -c -t <table>` per table.
func (r *reader) readIPTables(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	backend := r.backend
	if backend != "" && r.opts.Now().Sub(r.detectedAt) >= r.opts.DetectTTL {
		backend = ""
	}
	r.mu.Unlock()
	if backend == "" {
		var err error
		backend, err = r.detectBackend(ctx)
		if err != nil {
			return nil, err
		}
		version := r.toolVersion(ctx, backend)
		r.opts.Logger.Debug("iptables backend detected", "backend", backend, "version", version)
		r.mu.Lock()
		r.backend, r.detectedAt = backend, r.opts.Now()
		r.mu.Unlock()
	}
	snap := &Snapshot{Mode: ModeIPTables, Backend: backend}
	ipvs := false
	for _, f := range ipFamilies {
		res, err := r.readIPTablesFamily(ctx, f, backend, []string{"nat", "filter"})
		if err != nil {
			return nil, err
		}
		if res == nil || !res.kubeServices {
			continue // family absent, or kube-proxy does not program it
		}
		ipvs = ipvs || res.ipvsChains
		snap.addFamily(f.name, res.ports)
	}
	if len(snap.Families) == 0 {
		return nil, fmt.Errorf("iptables %s backend: no KUBE-SERVICES chain in nat: %w", backend, ErrNoRules)
	}
	if ipvs {
		return &Snapshot{Mode: ModeIPVS, Backend: backend, Families: snap.Families}, fmt.Errorf("KUBE-SERVICES with IPVS-mode chains: %w", ErrUnsupported)
	}
	return snap, nil
}

// readIPTablesFamily saves and parses the given tables of one family. It returns
// nil, nil when the family is absent (no IPv6 on this node, no legacy table).
func (r *reader) readIPTablesFamily(ctx context.Context, f ipFamily, backend string, tables []string) (*iptablesResult, error) {
	bin, err := r.binary(saveCommand(f, backend))
	if err != nil {
		return nil, err
	}
	if backend == BackendLegacy {
		// `iptables-legacy-save -t T` makes the kernel create table T when it does
		// not exist; that is a write. Ask which tables exist first.
		existing, err := r.legacyTables(ctx, f)
		if err != nil {
			return nil, err
		}
		var keep []string
		for _, t := range tables {
			if existing[t] {
				keep = append(keep, t)
			}
		}
		if len(keep) == 0 {
			return nil, nil
		}
		tables = keep
	}
	res := newIPTablesResult()
	for _, t := range tables {
		out, err := r.opts.Runner.Run(ctx, bin, "-c", "-t", t)
		if err != nil {
			if f.ipv6 && familyAbsent(err) {
				r.opts.Logger.Debug("IPv6 rules unavailable; reading IPv4 only", "cmd", bin, "err", err)
				return nil, nil
			}
			return nil, fmt.Errorf("reading %s table %s: %w", f.name, t, err)
		}
		if err := parseIPTablesSave(out, res); err != nil {
			return nil, fmt.Errorf("parsing %s -c -t %s: %w", bin, t, err)
		}
	}
	return res, nil
}

// legacyTables lists the legacy xtables tables that exist in the (reader's)
// network namespace.
func (r *reader) legacyTables(ctx context.Context, f ipFamily) (map[string]bool, error) {
	file := "/proc/net/ip_tables_names"
	if f.ipv6 {
		file = "/proc/net/ip6_tables_names"
	}
	var out []byte
	var err error
	if fr, ok := r.opts.Runner.(FileReader); ok {
		out, err = fr.ReadFile(ctx, file)
		if errors.Is(err, fs.ErrNotExist) {
			return map[string]bool{}, nil // module not loaded: no legacy tables
		}
	} else {
		out, err = r.opts.Runner.Run(ctx, "cat", file)
		var ce *CommandError
		if errors.As(err, &ce) && strings.Contains(ce.Stderr, "No such file") {
			return map[string]bool{}, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing legacy %s tables: %w", f.name, err)
	}
	tables := map[string]bool{}
	for _, t := range strings.Fields(string(out)) {
		tables[t] = true
	}
	return tables, nil
}

// familyAbsent tells "this family is not available here" from a real failure.
func familyAbsent(err error) bool {
	var ce *CommandError
	if !errors.As(err, &ce) {
		return false
	}
	s := ce.Stderr
	if strings.Contains(s, "Permission denied") {
		return false
	}
	for _, m := range []string{"not supported", "does not exist", "No such file or directory", "can't initialize", "Address family not supported"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// detectBackend picks legacy or nft as the kube-proxy image's iptables-wrapper
// does: kubelet's KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY chains in mangle
// (nft checked first), else the backend holding more KUBE- rules (nft on a tie).
func (r *reader) detectBackend(ctx context.Context) (string, error) {
	start := time.Now()
	defer func() { r.opts.Logger.Debug("iptables backend detection", "took", time.Since(start)) }()
	var errs []error
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, f := range ipFamilies {
			res, err := r.readIPTablesFamily(ctx, f, backend, []string{"mangle"})
			if err != nil {
				if errors.Is(err, ErrNoRules) { // binary missing
					continue
				}
				errs = append(errs, err)
				continue
			}
			if res != nil && res.hintChains {
				return backend, nil
			}
		}
	}
	count := map[string]int{}
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, f := range ipFamilies {
			res, err := r.readIPTablesFamily(ctx, f, backend, []string{"nat", "filter"})
			if err != nil {
				if !errors.Is(err, ErrNoRules) {
					errs = append(errs, err)
				}
				continue
			}
			if res != nil {
				count[backend] += res.kubeRules
			}
		}
	}
	if count[BackendLegacy] == 0 && count[BackendNFT] == 0 {
		if len(errs) > 0 {
			return "", fmt.Errorf("detecting the iptables backend: %w", errors.Join(errs...))
		}
		return "", fmt.Errorf("no KUBE- rules in either iptables backend: %w", ErrNoRules)
	}
	if count[BackendLegacy] > count[BackendNFT] {
		return BackendLegacy, nil
	}
	return BackendNFT, nil
}
