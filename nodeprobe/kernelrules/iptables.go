package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"
)

type ipFamily struct {
	name string // FamilyIPv4 / FamilyIPv6
	ipv6 bool
}

var ipFamilies = [...]ipFamily{{FamilyIPv4, false}, {FamilyIPv6, true}}

// saveCommand names the save binary the kube-proxy image's wrapper would run.
func saveCommand(f ipFamily, backend Backend) string {
	return listCommand(f, backend) + "-save"
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

// readIPTables reads nat and filter of both families with the reader's
// backend (the one kube-proxy uses, as the selector detected it): one
// `<family>-<backend>-save -c -t <table>` per table, nat only when its change
// signal moved (filter every time: its drop rules carry the counters).
func (r *reader) readIPTables(ctx context.Context) (*Snapshot, error) {
	backend := r.backend
	r.useTables(ModeIPTables, backend)
	sig := r.newSignals(scopeOf(ModeIPTables, backend))
	snap := &Snapshot{Mode: ModeIPTables, Backend: backend}
	defer func() { snap.Watch, snap.Resyncs = sig.state(), r.resyncs.Load() }()
	ipvs := false
	for fi, f := range ipFamilies {
		nat, ports, err := r.readConsistentFamily(ctx, fi, f, backend, sig)
		if err != nil {
			return nil, err
		}
		if nat == nil || !nat.kubeServices {
			continue // family absent, or kube-proxy does not program it
		}
		ipvs = ipvs || nat.ipvsChains
		snap.addFamily(f.name, ports)
	}
	if len(snap.Families) == 0 {
		return nil, fmt.Errorf("iptables %s backend: no KUBE-SERVICES chain in nat: %w", backend, ErrNoRules)
	}
	if ipvs {
		snap = &Snapshot{Mode: ModeIPVS, Backend: backend, Families: snap.Families}
		return snap, fmt.Errorf("KUBE-SERVICES with IPVS-mode chains: %w", ErrUnsupported)
	}
	return snap, nil
}

// consistentAttempts bounds how often one family is read again because its
// change signal moved during the read.
const consistentAttempts = 3

// readConsistentFamily reads one family and then its change signal again: when
// the signal moved during the read (kube-proxy synced between nat and filter),
// nat and filter may come from two syncs — a kept nat with the old local
// endpoints beside a fresh filter that already drops — so the family is read
// again, up to consistentAttempts times (a kube-proxy that syncs faster than
// that is read as it was caught, and read again next time: the kept tables are
// forgotten). With the nft backend one restore is one nf_tables transaction, so
// an unmoved generation proves nat and filter belong together; while Watch
// runs, so does a moved one after which no transaction changed anything the
// parse reads in this family (the watcher's view at the second generation):
// every table read, kept or saved, then says what every generation in
// between said. Legacy restores
// commit table by table (filter, then nat; GET_INFO of nat cannot see the
// first), so a read between the two commits is caught by what it says instead:
// a port that drops and has local endpoints (tornPort) is read again once nat's
// GET_INFO moved (its commit), waiting at most tornWait. The other direction (a port gaining its first local
// endpoint: the drop gone, the local endpoint not there yet) is not caught: for
// one read the port neither drops nor has a local endpoint.
func (r *reader) readConsistentFamily(ctx context.Context, fi int, f ipFamily, backend Backend, sig *signals) (*iptablesResult, map[portKey]*PortState, error) {
	for attempt := 1; ; attempt++ {
		nat, ports, used, usedErr, err := r.readIPTablesFamily(ctx, fi, f, backend, sig)
		if err != nil || nat == nil || usedErr != nil {
			return nat, ports, err
		}
		sig.forget()
		now, nowErr := sig.get(ctx, f.ipv6, "nat")
		torn := tornPort(ports)
		quiet := nowErr == nil && (now == used || (!sig.legacy && sig.view.unchangedSince(fi, used.gen)))
		if quiet && torn == nil {
			return nat, ports, nil
		}
		if attempt == consistentAttempts {
			r.opts.Logger.Debug("ruleset changed during every read; keeping nothing", "family", f.name, "attempts", attempt)
			delete(r.tables.byKey, f.name+"/nat")
			delete(r.tables.byKey, f.name+"/filter")
			return nat, ports, nil
		}
		if torn != nil {
			// The signal held, yet the tables disagree: a legacy restore
			// between its filter and nat commits (at 10,000 Services libiptc
			// takes seconds to rebuild nat). Wait for nat's signal to move —
			// its commit — and save nat again rather than trust what is kept.
			r.opts.Logger.Debug("filter drops a port nat still sends to local endpoints; waiting for nat's commit", "family", f.name, "attempt", attempt)
			if err := waitSignalMoved(ctx, sig, f.ipv6, used); err != nil {
				return nil, nil, err
			}
			delete(r.tables.byKey, f.name+"/nat")
			continue
		}
		r.opts.Logger.Debug("ruleset changed during the read; reading the family again", "family", f.name, "attempt", attempt)
	}
}

// tornWait bounds how long a torn read waits for nat's commit (less when the
// read's deadline is nearer: half of what is left).
const tornWait = 5 * time.Second

// waitSignalMoved polls nat's change signal every 50 ms until it differs from
// used (or cannot be read), for at most tornWait.
func waitSignalMoved(ctx context.Context, sig *signals, ipv6 bool, used changeSig) error {
	wait := tornWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		sig.forget()
		if now, err := sig.get(ctx, ipv6, "nat"); err != nil || now != used {
			return nil
		}
	}
	return nil
}

// tornPort returns a port that both drops (filter: "has no local endpoints")
// and has local endpoints (nat: KUBE-SVL jumps to KUBE-SEP chains): kube-proxy
// writes the drop exactly when the port has no usable local endpoint, so no
// sync of it has both, and a read that shows both caught two syncs.
func tornPort(ports map[portKey]*PortState) *PortState {
	for _, st := range ports {
		if st.Drop && st.LocalEndpoints > 0 {
			return st
		}
	}
	return nil
}

// readIPTablesFamily reads one family: nat (kept while its change signal
// holds or, while Watch runs, while no relevant change was notified; unless it
// carries counted drops: ≤1.24 writes them in nat), then filter, merged into
// fresh states. nat is nil when the family is absent (no IPv6 on this node, no
// legacy table) or has no KUBE-SERVICES; filter is then not read.
//
// used is the change signal read before the read (usedErr when it could not be
// read): what a consistent read is checked against.
func (r *reader) readIPTablesFamily(ctx context.Context, fi int, f ipFamily, backend Backend, sig *signals) (nat *iptablesResult, ports map[portKey]*PortState, used changeSig, usedErr error, err error) {
	bin, err := r.binary(saveCommand(f, backend))
	if err != nil {
		return nil, nil, used, nil, err
	}
	existing := map[string]bool{"nat": true, "filter": true}
	if backend == BackendLegacy {
		// `iptables-legacy-save -t T` (and GET_INFO) makes the kernel create
		// table T when it does not exist; that is a write. Ask which exist first.
		if existing, err = r.legacyTables(ctx, f); err != nil {
			return nil, nil, used, nil, err
		}
	}
	if !existing["nat"] {
		return nil, nil, used, nil, nil
	}
	key := f.name + "/nat"
	used, usedErr = sig.get(ctx, f.ipv6, "nat")
	sigErr := usedErr
	c, v, verify := r.cached(key, fi, used, sigErr, sig.view)
	if v == vouchSignal && backend == BackendLegacy && r.opts.Now().Sub(c.verified) >= r.opts.LegacyVerify {
		// GET_INFO held, but it misses a change that keeps the entry count and
		// the size: nat is read again at most every LegacyVerify. (This used to
		// hash a copy of the whole table from the kernel — 62 MB at 10,000
		// Services, and IPT_SO_GET_ENTRIES gives all of it or nothing; a
		// streamed save costs a bounded 64 KiB buffer and gives the parse itself.)
		v, verify = vouchNone, true
	}
	how := verifyHow(backend)
	if v == vouchNone && !verify && sigErr == nil && backend == BackendNFT {
		t, ok, err := r.relistNAT(ctx, sig, fi, f, key)
		if err != nil {
			return nil, nil, used, usedErr, err
		}
		if ok {
			r.tables.byKey[key] = t
			c, v = t, vouchNotified
			if r.verifyDue(t) {
				// Read in part for FullVerify: saved whole now, and compared.
				v, verify, how = vouchNone, true, "change notifications, chains read again (FullVerify)"
			}
		}
	}
	if v != vouchNone {
		nat = c.ipt
	} else {
		nat, err = r.saveTable(ctx, f, bin, "nat")
		if err != nil || nat == nil {
			return nil, nil, used, usedErr, err
		}
		nat.endpoints = epArena{} // only needed while parsing
		if verify && !sameTable(c.ipt, nat) {
			r.drifted(key, how)
		}
		if natCountsDrops(nat) {
			sigErr = errors.New("nat holds counted drop rules") // never kept: counters move
		}
		r.keep(key, used, sigErr, cachedTable{ipt: nat, verified: r.opts.Now()})
	}
	if !nat.kubeServices {
		return nat, nil, used, usedErr, nil
	}
	ports = make(map[portKey]*PortState, len(nat.ports))
	for k, st := range nat.ports {
		c := *st
		c.Drops = slices.Clone(st.Drops)
		ports[k] = &c
	}
	if !existing["filter"] {
		return nat, ports, used, usedErr, nil
	}
	filter, err := r.readFilter(ctx, fi, f, bin, backend, sig, used, sigErr)
	if err != nil {
		return nil, nil, used, usedErr, err
	}
	if filter == nil {
		return nil, nil, used, usedErr, nil
	}
	for k, st := range filter.ports {
		mergeState(stateFor(ports, k), st)
	}
	return nat, ports, used, usedErr, nil
}

// verifyHow names what vouched for a table a verification re-read.
func verifyHow(backend Backend) string {
	if backend == BackendLegacy {
		return "GET_INFO (LegacyVerify)"
	}
	return "change notifications (FullVerify)"
}

// readFilter returns filter's parsed states with fresh counters. Saving filter
// with the nft backend costs nearly as much as saving nat (iptables-nft-save
// fetches every table's rules), so there, while the kept parse is vouched
// for (its generation held, or no relevant change was notified), it is reused
// with the counters of KUBE-EXTERNAL-SERVICES — the only counters the states
// carry — dumped over netlink and matched to its rules by content
// (counterkeys.go), and those of KUBE-PROXY-FIREWALL when a drop's count
// includes one of its rules (linkFirewall). The legacy backend saves filter
// every read (it is small, and saved alone).
func (r *reader) readFilter(ctx context.Context, fi int, f ipFamily, bin string, backend Backend, sig *signals, s changeSig, sigErr error) (*iptablesResult, error) {
	key := f.name + "/filter"
	var c cachedTable
	var verify bool
	if backend == BackendNFT {
		var v vouch
		c, v, verify = r.cached(key, fi, s, sigErr, sig.view)
		if v == vouchNone && !verify && sigErr == nil {
			// A relevant change in the family, perhaps in nat alone (a
			// Service's local endpoints moved): the kept filter holds while
			// no relevant transaction since its save touched filter.
			if kept, ok := r.tables.byKey[key]; ok && untouched(sig, fi, kept.sig.gen, tableFilter) {
				c, v = kept, vouchNotified
				if r.verifyDue(kept) {
					v, verify = vouchNone, true
				}
			}
		}
		if v != vouchNone {
			res, err := r.freshCounters(ctx, fi, f, sig, key, c)
			if err == nil {
				return res, nil
			}
			r.opts.Logger.Debug("filter counters unreadable over netlink, or filter changed since its save; saving filter", "family", f.name, "err", err)
		}
	}
	filter, err := r.saveTable(ctx, f, bin, "filter")
	if err != nil || filter == nil {
		return nil, err
	}
	if backend == BackendNFT {
		if verify && !sameTable(c.ipt, filter) {
			r.drifted(key, verifyHow(backend))
		}
		r.keep(key, s, sigErr, cachedTable{ipt: filter})
	}
	return filter, nil
}

// freshCounters dumps KUBE-EXTERNAL-SERVICES (and, when linked,
// KUBE-PROXY-FIREWALL) over netlink and applies their counters to a copy of
// the kept parse, each dumped rule matched to the saved one with the same
// content key. The keys are learned on the first dump after the save (and
// kept with the parse): by index when the chain was not rewritten since the
// save (same generation, or the watcher saw no transaction touch it), else by
// what the rules spell (ruleIdentity). An error when the counters cannot be
// read, or the dump is not the saved rules in some order: filter changed.
func (r *reader) freshCounters(ctx context.Context, fi int, f ipFamily, sig *signals, key string, c cachedTable) (*iptablesResult, error) {
	kept := c.ipt
	keys := c.keys
	if keys == nil {
		keys = &counterKeys{}
	}
	learned := false
	chain := func(name []byte, which int, ids []ruleIdentity, idx **keyIndex) ([]uint64, error) {
		gen, rules, err := sig.cs.NFTablesChainRules(ctx, f.ipv6, "filter", string(name))
		if err != nil {
			return nil, err
		}
		if *idx == nil {
			zip := gen == c.sig.gen
			if !zip && sig.w != nil {
				v := sig.w.await(ctx, gen, sig.scope)
				zip = v != nil && !genAfter(v.lastTouch[fi][which], c.sig.gen)
			}
			k, ok := learnKeys(ids, rules, zip)
			if !ok {
				return nil, fmt.Errorf("%s: %d rules dumped, %d saved: cannot tell which is which", name, len(rules), len(ids))
			}
			*idx, learned = newKeyIndex(k), true
		}
		packets, ok := (*idx).counters(rules)
		if !ok {
			return nil, fmt.Errorf("%s: the dumped rules are not the saved ones (%d dumped, %d saved)", name, len(rules), len(ids))
		}
		return packets, nil
	}
	ext, err := chain(chainExternalServices, counterExt, kept.extIDs, &keys.ext)
	if err != nil {
		return nil, err
	}
	var fw []uint64
	if kept.firewallLinked() {
		if fw, err = chain(chainProxyFirewall, counterFW, kept.fwIDs, &keys.fw); err != nil {
			return nil, err
		}
	}
	if learned {
		c.keys = keys
		r.tables.byKey[key] = c
	}
	return withCounters(kept, ext, fw), nil
}

// withCounters is a copy of a kept filter parse whose KUBE-EXTERNAL-SERVICES
// drop rules carry the given packet counters (ext[i] for the chain's i-th rule,
// plus fw[j] of the KUBE-PROXY-FIREWALL rule linked to it).
func withCounters(kept *iptablesResult, ext, fw []uint64) *iptablesResult {
	res := &iptablesResult{ports: make(map[portKey]*PortState, len(kept.ports)), kubeServices: kept.kubeServices,
		extDrops: kept.extDrops, fwDrops: kept.fwDrops}
	for k, st := range kept.ports {
		c := *st
		c.Drops = slices.Clone(st.Drops)
		res.ports[k] = &c
	}
	res.applyCounters(ext, fw)
	return res
}

// saveTable saves and parses one table; nil, nil when an IPv6 save says the
// family is not available.
func (r *node) saveTable(ctx context.Context, f ipFamily, bin, table string) (*iptablesResult, error) {
	res := newIPTablesResult()
	if ok, err := r.saveInto(ctx, f, bin, table, res); err != nil || !ok {
		return nil, err
	}
	return res, nil
}

// saveInto saves one table and parses it into res; false when an IPv6 save
// says the family is not available.
func (r *node) saveInto(ctx context.Context, f ipFamily, bin, table string, res *iptablesResult) (bool, error) {
	var err error
	if st, ok := r.opts.Runner.(Streamer); ok {
		var parseErr error
		err = st.Stream(ctx, func(out io.Reader) error {
			parseErr = parseIPTablesSaveFrom(out, res)
			return parseErr
		}, bin, "-c", "-t", table)
		if err != nil && parseErr != nil && errors.Is(err, parseErr) {
			return false, fmt.Errorf("parsing %s -c -t %s: %w", bin, table, parseErr)
		}
	} else {
		var out []byte
		if out, err = r.opts.Runner.Run(ctx, bin, "-c", "-t", table); err == nil {
			if err := parseIPTablesSave(out, res); err != nil {
				return false, fmt.Errorf("parsing %s -c -t %s: %w", bin, table, err)
			}
		}
	}
	if err != nil {
		if f.ipv6 && familyAbsent(err) {
			r.opts.Logger.Debug("IPv6 rules unavailable; reading IPv4 only", "cmd", bin, "err", err)
			return false, nil
		}
		return false, fmt.Errorf("reading %s table %s: %w", f.name, table, err)
	}
	return true, nil
}

// natCountsDrops: ≤1.24 layouts drop in nat (KUBE-MARK-DROP), with counters
// that move without any rule change.
func natCountsDrops(nat *iptablesResult) bool {
	for _, st := range nat.ports {
		if len(st.Drops) > 0 {
			return true
		}
	}
	return false
}

// mergeState adds one table's findings for a port to another's: every field
// is a flag, a count or a list, as if both tables had been parsed together.
func mergeState(dst, src *PortState) {
	dst.Programmed = dst.Programmed || src.Programmed
	dst.Drop = dst.Drop || src.Drop
	dst.Reject = dst.Reject || src.Reject
	dst.LocalEndpoints += src.LocalEndpoints
	dst.DropPackets += src.DropPackets
	dst.Drops = append(dst.Drops, src.Drops...)
	if len(src.Endpoints) > 0 {
		// dst's may be a kept table's, shared: never appended to in place.
		dst.Endpoints = append(slices.Clip(dst.Endpoints), src.Endpoints...)
		slices.SortFunc(dst.Endpoints, compareEndpoints)
	}
}

// saveTables saves and parses the given tables of one family into one result,
// for backend detection (mangle hints, KUBE- rule counts). It returns nil, nil
// when the family is absent (no IPv6 on this node, no legacy table).
func (r *node) saveTables(ctx context.Context, f ipFamily, backend Backend, tables []string) (*iptablesResult, error) {
	bin, err := r.binary(saveCommand(f, backend))
	if err != nil {
		return nil, err
	}
	if backend == BackendLegacy {
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
		if ok, err := r.saveInto(ctx, f, bin, t, res); err != nil || !ok {
			return nil, err
		}
	}
	return res, nil
}

// legacyTables lists the legacy xtables tables that exist in the (reader's)
// network namespace.
func (r *node) legacyTables(ctx context.Context, f ipFamily) (map[string]bool, error) {
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
