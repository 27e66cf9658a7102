package kernelrules

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The test binary's flags with which e2e's TestRulesModelEqualsFullReadUnderChurn runs TestOnNodeWatchEqualsFull
// on a node (with -rules.on-node) while it churns the API.
var (
	driftForFlag = flag.Duration("rules.drift-for", 0,
		"how long TestOnNodeWatchEqualsFull compares the watched readers with full reads while kube-proxy churns, before it compares once more at rest")
	driftMinFlag = flag.Int("rules.drift-min", 1,
		"the least number of rule generations (kube-proxy's commits) TestOnNodeWatchEqualsFull must have compared, settled")
)

// Bounds of TestOnNodeWatchEqualsFull's comparisons.
const (
	// driftAttempts: how often one comparison is tried again because the
	// rules moved while it read. kube-proxy commits every couple of seconds
	// under churn and a pair of reads takes a fraction of that, so a pair
	// that never settles in this many tries is a kube-proxy that never
	// rests, not a reader's fault: it is counted apart.
	driftAttempts = 5
	// driftPoll: how often the rules' change signal is read between
	// kube-proxy's syncs, so that every commit is compared, also those the
	// watchers judge irrelevant (a misjudged one shows only there).
	driftPoll = 100 * time.Millisecond
	// driftRestWait bounds the wait for kube-proxy to have synced the last
	// change before the comparison at rest.
	driftRestWait = time.Minute
	// driftShown: differences printed in full per reader; more are counted.
	driftShown = 3
)

// TestOnNodeWatchEqualsFull holds the readers the exporter keeps — their
// tables kept while change notifications (or, for the legacy backend, the
// polled change signal) vouch for them — to a full read after each of
// kube-proxy's commits, for -rules.drift-for while the harness churns the API,
// then once more at rest. Two watched readers run, each with its Watch in a
// goroutine as the exporter's node model runs it: the exporter's own
// (nodeReader), and one whose notification socket has the kernel's smallest
// receive buffer, so that a sync's notifications overrun it and it must
// resynchronise (Snapshot.Resyncs) and still agree.
//
// A comparison reads the rules' change signal (the nf_tables generation; for
// the legacy backend, which has none, a hash of its saved tables), both watched
// readers, a full read, then the signal again: when the signal moved, kube-proxy
// committed in between and the reads may differ for that reason alone, so the
// comparison is tried again (driftAttempts times at most; one that never
// settles is counted apart). A settled comparison that differs is drift. A
// comparison is made each time a watcher calls changed, and each time the signal
// moved since the last one (what a watcher judged irrelevant is compared too).
//
// It prints "lt-drift: ready" once both watchers have their baseline (the
// harness starts churning then) and ends with "lt-drift: …" lines of figures.
// It fails on any difference, on fewer than -rules.drift-min generations
// compared, on a resync of the exporter's reader, and when the small buffer's
// reader lost no notification where notifications cover the mode (nothing
// tested) or lost some without resynchronising. On the legacy backend, which
// has no notifications, a difference within the reader's documented bound
// (legacyBound) is counted apart, not failed.
func TestOnNodeWatchEqualsFull(t *testing.T) {
	onNode(t)
	if *driftForFlag <= 0 {
		t.Skip("compares only while kube-proxy churns, for -rules.drift-for; e2e TestRulesModelEqualsFullReadUnderChurn sets it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "lt-drift: "+format+"\n", args...)
		out.Flush()
	}
	full := fullReader()
	whole := &wholeCounter{}
	readers := []*watchedReader{
		{name: "exporter's reader", r: nodeReader(func(o *Options) { o.Runner = whole }).(*selector)},
		// The kernel raises a smaller buffer to its minimum, a few KiB: one
		// datagram of notifications, where a sync sends several at once.
		{name: "small-buffer reader", r: nodeReader(func(o *Options) { o.NotifyBuffer = 1 }).(*selector), lossy: true},
	}
	var first *Snapshot
	for _, w := range readers {
		snap, err := w.r.Read(ctx)
		if err != nil {
			t.Fatalf("%s: first read: %v", w.name, err)
		}
		first = snap
	}
	if first.Mode == ModeIPVS {
		t.Fatal("kube-proxy runs in IPVS mode: no rules to compare")
	}
	var watching sync.WaitGroup
	for _, w := range readers {
		w.start(ctx, &watching)
	}
	defer func() { cancel(); watching.Wait() }()
	for _, w := range readers {
		waitBaseline(t, w.r)
	}
	d := &driftRun{t: t, ctx: ctx, full: full, readers: readers, mode: first.Mode, backend: first.Backend,
		generations: map[string]bool{}, syncs: map[int]bool{}}
	syncs0, syncsErr := kubeProxySyncs(ctx)
	start := time.Now()
	say("ready %d", start.UnixNano())

	// Under churn: a comparison per changed call, and per commit of the rules.
	deadline := time.NewTimer(*driftForFlag)
	defer deadline.Stop()
	poll := time.NewTicker(driftPoll)
	defer poll.Stop()
	triggers := map[string]int{}
churn:
	for {
		why := ""
		select {
		case <-deadline.C:
			break churn
		case <-readers[0].changed:
			why = "changed: " + readers[0].name
		case <-readers[1].changed:
			why = "changed: " + readers[1].name
		case <-poll.C:
			sig, err := d.signal()
			if err != nil {
				t.Fatal(err)
			}
			if sig == d.lastCompared {
				continue
			}
			why = "signal moved"
		}
		triggers[why]++
		d.compare()
		if d.diffs() > 4*driftShown {
			break churn // enough said
		}
	}
	churnTook := time.Since(start)

	// At rest: kube-proxy has synced the last change; the watched readers must
	// still agree, read once more.
	if err := waitKubeProxySynced(ctx, driftRestWait); err != nil {
		t.Errorf("at rest: %v", err)
	}
	restSettled := false
	for range driftAttempts {
		if restSettled = d.compare(); restSettled {
			break
		}
	}
	if !restSettled {
		t.Errorf("at rest: the rules kept moving over %d comparisons", driftAttempts)
	}
	syncs1, syncsErr1 := kubeProxySyncs(ctx)
	syncs := "unknown"
	if syncsErr == nil && syncsErr1 == nil {
		compared := 0
		for n := range d.syncs {
			if n > syncs0 {
				compared++
			}
		}
		syncs = fmt.Sprintf("%d, %d of them compared after", syncs1-syncs0, compared)
	}

	say("mode %s backend %q: %s under churn; kube-proxy syncs %s; rule generations compared %d (settled comparisons %d, tried again %d, never settled %d); at rest settled %v",
		d.mode, d.backend, churnTook.Round(time.Second), syncs, len(d.generations), d.settled, d.moved, d.unsettled, restSettled)
	say("comparisons prompted: %s", formatCounts(triggers))
	say("exporter's reader: read in part %d times (%d netlink requests or chain listings); tables listed or saved whole %d times",
		readers[0].r.relists.Load(), readers[0].r.relistDumps.Load(), whole.n.Load())
	for _, w := range readers {
		say("%s: changed called %d times; watch states %s; resyncs %d; notification losses %d; differences %d",
			w.name, w.calls.Load(), formatCounts(w.states), w.resyncs, w.r.lossEvents.Load(), w.diffs)
		if w.bounded > 0 {
			say("%s: %d differences while nat's GET_INFO held (legacy backend: seen within LegacyVerify, not counted)", w.name, w.bounded)
		}
	}
	if err := errors.Join(syncsErr, syncsErr1); err != nil {
		t.Logf("kube-proxy's sync count: %v", err)
	}
	// nftables mode reads its changed objects in part, iptables mode with the nft backend its changed nat
	// chains (the churn moves local endpoints on this node).
	if (d.mode == ModeNFTables || d.backend == BackendNFT) && readers[0].r.relists.Load() == 0 {
		t.Errorf("%s: never read in part: the reads of the changed objects went untested", readers[0].name)
	}
	if len(d.generations) < *driftMinFlag {
		t.Errorf("compared %d rule generations, want at least %d (-rules.drift-min)", len(d.generations), *driftMinFlag)
	}
	for _, w := range readers {
		switch {
		case w.diffs > 0:
			t.Errorf("%s: %d settled comparisons differed from a full read", w.name, w.diffs)
		case !w.lossy && w.resyncs > 0:
			t.Errorf("%s: resynchronised %d times (notifications lost %d times): with the default buffer nothing here should overrun it", w.name, w.resyncs, w.r.lossEvents.Load())
		case w.lossy && w.r.lossEvents.Load() == 0 && scopeOf(d.mode, d.backend).covered():
			t.Errorf("%s: lost no notification: kube-proxy's syncs were too small to overrun its buffer, the loss went untested", w.name)
		case w.lossy && w.r.lossEvents.Load() > 0 && w.resyncs == 0:
			t.Errorf("%s: lost notifications %d times but never resynchronised", w.name, w.r.lossEvents.Load())
		}
	}
}

// watchedReader is a reader with its Watch running, as the exporter's node
// model runs it, and what the comparisons saw of it.
type watchedReader struct {
	name  string
	r     *selector
	lossy bool // its notification buffer overruns on purpose

	changed chan struct{} // one slot: calls that pile up become one, as Watch's own
	calls   atomic.Int64
	states  map[string]int
	resyncs uint64
	diffs   int
	bounded int // legacy backend: differences within LegacyVerify's bound (legacyBound)
}

func (w *watchedReader) start(ctx context.Context, wg *sync.WaitGroup) {
	w.changed = make(chan struct{}, 1)
	w.states = map[string]int{}
	wg.Go(func() {
		w.r.Watch(ctx, func(bool) {
			w.calls.Add(1)
			select {
			case w.changed <- struct{}{}:
			default:
			}
		})
	})
}

// driftRun is TestOnNodeWatchEqualsFull's comparisons.
type driftRun struct {
	t       *testing.T
	ctx     context.Context
	full    Reader
	readers []*watchedReader
	mode    Mode
	backend Backend

	settled, moved, unsettled int
	generations               map[string]bool // change signals at settled comparisons
	lastCompared              string
	// syncs: kube-proxy's sync count after each settled comparison (a
	// figure: its metric moves just after the sync's commit, so a comparison
	// in between counts for the sync before).
	syncs map[int]bool
}

func (d *driftRun) diffs() int {
	n := 0
	for _, w := range d.readers {
		n += w.diffs
	}
	return n
}

// compare reads the change signal, every watched reader, a full read and the
// signal again, and compares the readers with the full read when the signal
// held (true); when it moved it tries again, at most driftAttempts times.
func (d *driftRun) compare() bool {
	t := d.t
	for range driftAttempts {
		before, err := d.signal()
		if err != nil {
			t.Fatal(err)
		}
		snaps := make([]*Snapshot, len(d.readers))
		for i, w := range d.readers {
			// A pending changed call is the one this read answers.
			select {
			case <-w.changed:
			default:
			}
			if snaps[i], err = w.r.Read(d.ctx); err != nil {
				t.Fatalf("%s: read: %v", w.name, err)
			}
		}
		ref, err := d.full.Read(d.ctx)
		if err != nil {
			t.Fatalf("full read: %v", err)
		}
		after, err := d.signal()
		if err != nil {
			t.Fatal(err)
		}
		if before != after {
			d.moved++
			continue
		}
		d.settled++
		d.generations[before] = true
		d.lastCompared = before
		if n, err := kubeProxySyncs(d.ctx); err == nil {
			d.syncs[n] = true
		}
		for i, w := range d.readers {
			w.states[string(snaps[i].Watch)]++
			w.resyncs = snaps[i].Resyncs
			if diff := snapshotDiff(snaps[i], ref); diff != "" {
				if d.legacyBound(w) {
					w.bounded++
					if w.bounded == 1 {
						t.Logf("%s at %s differs from a full read while nat's GET_INFO is the one it was kept under (LegacyVerify's bound):\n%s", w.name, before, diff)
					}
					continue
				}
				w.diffs++
				if w.diffs <= driftShown {
					t.Errorf("%s at %s (watch %s, resyncs %d) differs from a full read:\n%s", w.name, before, snaps[i].Watch, snaps[i].Resyncs, diff)
				}
			}
		}
		return true
	}
	d.unsettled++
	return false
}

// legacyBound says whether a difference of w's snapshot from a full read is
// the legacy backend's documented bound rather than drift: the reader keeps
// nat while its GET_INFO (entry count, size, hooks) holds and saves it again
// every LegacyVerify regardless (doc.go, "Steady-state reads"), so a sync
// that keeps nat's entry count and size (two rules rewritten to two of the
// same size) shows only then. It is the bound when every nat the reader keeps
// still has the GET_INFO it was saved under. Called right after the read:
// nothing else reads through w meanwhile.
func (d *driftRun) legacyBound(w *watchedReader) bool {
	if d.mode != ModeIPTables || d.backend != BackendLegacy {
		return false
	}
	kept := false
	for _, f := range ipFamilies {
		c, ok := w.r.tables.byKey[f.name+"/nat"]
		if !ok {
			continue // not kept (nor existing: asking would create it)
		}
		info, err := ExecRunner{}.LegacyTableInfo(d.ctx, f.ipv6, "nat")
		if err != nil || info != c.sig.info {
			return false
		}
		kept = true
	}
	return kept
}

// signal reads what moves whenever the kernel's rules change: the nf_tables
// generation (every transaction moves it; the nft backend and nftables mode),
// or for the legacy backend, which has no generation, a hash of the saved
// tables without their counters.
func (d *driftRun) signal() (string, error) {
	if d.mode == ModeIPTables && d.backend == BackendLegacy {
		return d.legacySaveHash()
	}
	gen, err := ExecRunner{}.NFTablesGeneration(d.ctx)
	if err != nil {
		return "", fmt.Errorf("reading the nf_tables generation: %w", err)
	}
	return "generation " + strconv.FormatUint(uint64(gen), 10), nil
}

// legacySaveHash hashes the nat and filter tables of both families as
// iptables-legacy-save prints them, without counters or the save's dated
// comments: exact where GET_INFO (the reader's own signal) misses a rewrite of
// the same size. Only tables the kernel lists are saved (saving a missing one
// creates it).
func (d *driftRun) legacySaveHash() (string, error) {
	h := sha256.New()
	for _, f := range ipFamilies {
		list := "/proc/net/ip_tables_names"
		if f.ipv6 {
			list = "/proc/net/ip6_tables_names"
		}
		names, err := os.ReadFile(list)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("legacy tables of %s: %w", f.name, err)
		}
		tables := strings.Fields(string(names))
		for _, table := range []string{"nat", "filter"} {
			if !slices.Contains(tables, table) {
				continue
			}
			bin, err := d.readers[0].r.binary(saveCommand(f, BackendLegacy))
			if err != nil {
				return "", err
			}
			save, err := ExecRunner{}.Run(d.ctx, bin, "-t", table)
			if err != nil {
				return "", fmt.Errorf("saving legacy %s %s: %w", f.name, table, err)
			}
			for line := range bytes.Lines(save) {
				if bytes.HasPrefix(line, []byte("#")) {
					continue
				}
				if bytes.HasPrefix(line, []byte(":")) {
					line, _, _ = bytes.Cut(line, []byte(" ["))
				}
				h.Write(line)
			}
		}
	}
	return fmt.Sprintf("legacy tables %x", h.Sum(nil)[:8]), nil
}

// kubeProxyMetrics fetches kube-proxy's metrics in this namespace.
func kubeProxyMetrics(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10249/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kube-proxy metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("kube-proxy metrics: %w", err)
	}
	// Per name, the largest value over its series (one per IP family's
	// proxier): what the waits and counts below need.
	m := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		if old, ok := m[name]; !ok || v > old {
			m[name] = v
		}
	}
	return m, nil
}

// kubeProxySyncs is how many times kube-proxy has synced its rules (its sync
// duration histogram's count).
func kubeProxySyncs(ctx context.Context) (int, error) {
	m, err := kubeProxyMetrics(ctx)
	if err != nil {
		return 0, err
	}
	n, ok := m["kubeproxy_sync_proxy_rules_duration_seconds_count"]
	if !ok {
		return 0, fmt.Errorf("kube-proxy exports no kubeproxy_sync_proxy_rules_duration_seconds_count")
	}
	return int(n), nil
}

// waitKubeProxySynced waits until kube-proxy has no change pending and synced
// after the last one it queued (its own metrics), at most wait.
func waitKubeProxySynced(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var last error
	for {
		m, err := kubeProxyMetrics(ctx)
		if err == nil {
			switch {
			case m["kubeproxy_sync_proxy_rules_service_changes_pending"] != 0 || m["kubeproxy_sync_proxy_rules_endpoint_changes_pending"] != 0:
				err = fmt.Errorf("changes pending (services %v, endpoints %v)",
					m["kubeproxy_sync_proxy_rules_service_changes_pending"], m["kubeproxy_sync_proxy_rules_endpoint_changes_pending"])
			case m["kubeproxy_sync_proxy_rules_last_timestamp_seconds"] < m["kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"]:
				err = fmt.Errorf("last sync before the last queued change")
			default:
				return nil
			}
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy not synced within %s: %w", wait, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// formatCounts spells counts as "a 3, b 1" in name order.
func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// wholeCounter is the exporter's Runner (ExecRunner), counting the saves and
// listings of whole tables.
type wholeCounter struct {
	ExecRunner
	n atomic.Int64
}

func (c *wholeCounter) count(name string, args []string) {
	if strings.Contains(name, "-save") || strings.Contains(strings.Join(args, " "), "list table") {
		c.n.Add(1)
	}
}

func (c *wholeCounter) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	c.count(name, args)
	return c.ExecRunner.Run(ctx, name, args...)
}

func (c *wholeCounter) Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error {
	c.count(name, args)
	return c.ExecRunner.Stream(ctx, fn, name, args...)
}
