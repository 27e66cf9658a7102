package kernelrules

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchRun is a Watch running on a reader until the test ends.
type watchRun struct {
	ch    chan bool // one send per changed call: its content
	calls atomic.Int64
}

// startWatch runs r's Watch until the test ends, counting its calls.
// Watcher is what the Reader NewReader returns implements (reader.Watch says what it promises); the exporter
// asserts its own interface of the method (package scrape), so only these tests name this one.
type Watcher interface {
	Watch(ctx context.Context, changed func(content bool))
}

func startWatch(t *testing.T, r Reader) *watchRun {
	t.Helper()
	w, ok := r.(Watcher)
	if !ok {
		t.Fatal("the Reader NewReader returns is no Watcher")
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &watchRun{ch: make(chan bool, 1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Watch(ctx, func(content bool) {
			run.calls.Add(1)
			run.ch <- content
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return within 10 s of its context's end")
		}
	})
	return run
}

// waitBaseline waits until r's watcher vouches for the scope r read last
// (subscribed, its baseline set after that read's scope reached it): reads
// from then on are judged by notifications.
func waitBaseline(t testing.TB, r Reader) {
	t.Helper()
	rd := r.(*selector)
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if w := rd.currentWatch(); w != nil {
			w.mu.Lock()
			ok := w.subscribed && w.baseline && w.scope == rd.scopeNow()
			w.mu.Unlock()
			if ok {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the watcher set no baseline within 45 s")
}

// drain forgets the calls so far.
func (w *watchRun) drain() {
	for {
		select {
		case <-w.ch:
		default:
			return
		}
	}
}

// waitCall waits for a call of changed; false after d without one.
func (w *watchRun) waitCall(d time.Duration) bool {
	called, _ := w.waitContent(d)
	return called
}

// waitContent waits for a call of changed and says its content; called false after d without one.
func (w *watchRun) waitContent(d time.Duration) (called, content bool) {
	select {
	case content := <-w.ch:
		return true, content
	case <-time.After(d):
		return false, false
	}
}

// fullRead reads ns with a reader that saves every table (no change signal).
func fullRead(t *testing.T, ns string, mode Mode) *Snapshot {
	t.Helper()
	snap, err := NewReader(Options{Mode: mode, Runner: hideSignals{NetnsRunner{Namespace: ns}}, CacheTTL: -1}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// saves counts the save and list commands a countingRunner ran.
// chainLists counts the chains listed alone (`iptables-nft -t nat -S <chain>`).
func (c *countingRunner) chainLists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.runs {
		if strings.Contains(k, " -S ") {
			n += v
		}
	}
	return n
}

func (c *countingRunner) saves() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.runs {
		if strings.Contains(k, "-save ") || strings.Contains(k, " list table ") {
			n += v
		}
	}
	return n
}

// remoteChurn is svcs with the remote endpoint of each Service named in
// names moved to another address: what kube-proxy rewrites for endpoint churn
// on another node (the Service's chains), with the local endpoints unchanged.
func remoteChurn(svcs []genService, round int, names ...string) []genService {
	return moveEndpoints(svcs, names, func(j int, ep genEndpoint) string {
		if ep.local {
			return ep.ip
		}
		return bumpAddr(ep.ip, round)
	})
}

// moveEndpoints is svcs with each endpoint of the Services named at the
// address to gives it (the j-th of its Service's).
func moveEndpoints(svcs []genService, names []string, to func(j int, ep genEndpoint) string) []genService {
	out := make([]genService, len(svcs))
	for i, s := range svcs {
		out[i] = s
		if !containsName(names, s.ns+"/"+s.name) {
			continue
		}
		eps := slices.Clone(s.eps)
		for j := range eps {
			eps[j].ip = to(j, eps[j])
		}
		out[i].eps = eps
	}
	return out
}

func containsName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// bumpAddr moves an address's last part by round (10.244.2.5 → 10.244.2.105+).
func bumpAddr(a string, round int) string {
	if i := strings.LastIndexAny(a, ".:"); i >= 0 {
		return fmt.Sprintf("%s%c%d", a[:i], a[i], 100+round)
	}
	return a
}

// noLocal is svcs with the Service named lost its local endpoints (their pods
// went; the remote one stays).
func noLocal(svcs []genService, name string) []genService {
	out := make([]genService, len(svcs))
	for i, s := range svcs {
		out[i] = s
		if s.ns+"/"+s.name != name {
			continue
		}
		var eps []genEndpoint
		for _, ep := range s.eps {
			if !ep.local {
				eps = append(eps, ep)
			}
		}
		out[i].eps = eps
	}
	return out
}

var dropLine = regexp.MustCompile(`^-A KUBE-EXTERNAL-SERVICES .*-j DROP$`)
var destArg = regexp.MustCompile(`-d ([^/ ]+)(/\d+)? `)
var dportArg = regexp.MustCompile(`--dport (\d+)`)

// countedDrops puts a distinct packet counter on each KUBE-EXTERNAL-SERVICES
// drop of a restore input (for `iptables-restore -c`) and returns them by
// destination ("addr:port", ":nodeport"), so that a read can be checked rule by rule.
func countedDrops(input string, base uint64) (string, map[string]uint64) {
	want := map[string]uint64{}
	lines := strings.Split(input, "\n")
	n := base
	for i, l := range lines {
		if !dropLine.MatchString(l) {
			continue
		}
		dest := ""
		if m := destArg.FindStringSubmatch(l); m != nil {
			dest = m[1]
		}
		port := dportArg.FindStringSubmatch(l)[1]
		n++
		want[dest+":"+port] = n
		lines[i] = fmt.Sprintf("[%d:%d] %s", n, n*60, l)
	}
	return strings.Join(lines, "\n"), want
}

// checkDropCounters checks each drop rule's counter of one family against
// want (by destination).
func checkDropCounters(t *testing.T, snap *Snapshot, svcs []genService, fam string, want map[string]uint64) {
	t.Helper()
	seen := 0
	for _, s := range svcs {
		for _, d := range snap.Family(s.servicePort(), fam).Drops {
			k := fmt.Sprintf("%s:%d", d.Address, d.Port)
			w, ok := want[k]
			if !ok {
				t.Errorf("%s drop %s: no counter expected", s.portName(), k)
				continue
			}
			seen++
			if !d.Counted || d.Packets != w {
				t.Errorf("%s drop %s: %d packets (counted %v), want %d", s.portName(), k, d.Packets, d.Counted, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d drop rules read, %d written", seen, len(want))
	}
}

// logBuffer is a Logger's output, safe for the watcher's goroutine. While
// held, every write waits: the watcher, which logs each transaction it
// judges, stops receiving (how a test overruns its buffer for sure).
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	gate chan struct{} // closed to let held writes through; nil: not held
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		<-gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// hold makes writes wait until release.
func (l *logBuffer) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate = make(chan struct{})
}

func (l *logBuffer) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.gate)
	l.gate = nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestWatchIPTablesNFT: with the nft backend and Watch running, kube-proxy's
// partial syncs that change nothing the parse reads — every top-level chain
// flushed and refilled in another order, a remote endpoint's KUBE-SVC/SEP
// chains rewritten — are notified as irrelevant: changed is not called, the
// next Read saves nothing, equals a full read, and has each drop rule's own
// counter though the rules moved; a local endpoint's removal (KUBE-SVL gone,
// a drop added) is notified and read: filter saved, nat read in part (its
// changed Service chains asked after, none listed whole).
func TestWatchIPTablesNFT(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	before := map[bool][]genService{false: scenario(false), true: scenario(true)}
	restoreBothFamilies(t, ns, BackendNFT, func(v6 bool) string { return genRules(layout125, v6, before[v6]) })
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	var logs logBuffer
	r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, Logger: logs.logger()})
	watch := startWatch(t, r)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ctx := context.Background()
	read := func() *Snapshot {
		t.Helper()
		snap, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	read()
	waitBaseline(t, r)
	read()
	watch.drain()

	sync := func(after map[bool][]genService, changed []string, counted bool, seed uint64) map[string]uint64 {
		t.Helper()
		var want map[string]uint64
		for _, v6 := range []bool{false, true} {
			in := iptPartialSync(v6, before[v6], shuffled(after[v6], seed), changedSet(changed))
			args := []string{"--noflush"}
			if counted && !v6 {
				in, want = countedDrops(in, seed*100)
				args = append(args, "-c")
			}
			nsRun(t, ns, []byte(in), xtablesCmd(v6, BackendNFT, "restore"), args...)
		}
		before = after
		return want
	}

	// Remote endpoints move for checkout (no local endpoint) and web (two
	// local ones): top-level chains reordered, their KUBE-SVC/SEP rewritten.
	for round, seed := range []uint64{1, 2} {
		after := map[bool][]genService{}
		for _, v6 := range []bool{false, true} {
			after[v6] = remoteChurn(before[v6], round+1, "kubelings/checkout", "kubelings/web")
		}
		want := sync(after, []string{"kubelings/checkout", "kubelings/web"}, true, seed)
		saves := run.saves()
		snap := read()
		if n := run.saves() - saves; n != 0 {
			t.Errorf("round %d: an irrelevant sync, then a Read that ran %d saves; want none", round, n)
		}
		if snap.Watch != WatchNotified {
			t.Errorf("round %d: Snapshot.Watch %q, want %q", round, snap.Watch, WatchNotified)
		}
		if d := snapshotDiff(snap, fullRead(t, ns, ModeIPTables)); d != "" {
			t.Errorf("round %d: the Read after an irrelevant sync differs from a full read:\n%s", round, d)
		}
		checkDropCounters(t, snap, after[false], FamilyIPv4, want)
		// The sync rewrote KUBE-EXTERNAL-SERVICES, whose counters a caller keeps a total of: changed is
		// called for that (the Read it asks for runs no save, above), once the sync is judged, saying that
		// nothing but the counters' chain changed.
		if called, content := watch.waitContent(5 * time.Second); !called {
			t.Errorf("round %d: the counters' chain rewritten, and changed not called", round)
		} else if content {
			t.Errorf("round %d: only the counters' chain rewritten, and changed called with content true", round)
		}
		watch.drain()
	}

	// web loses its local endpoints: KUBE-SVL-web goes (-X), KUBE-EXT-web no
	// longer jumps to it, filter drops web's NodePort.
	after := map[bool][]genService{false: noLocal(before[false], "kubelings/web"), true: noLocal(before[true], "kubelings/web")}
	sync(after, []string{"kubelings/web"}, false, 3)
	if called, content := watch.waitContent(5 * time.Second); !called {
		t.Fatal("a local endpoint removed: changed not called within 5 s")
	} else if !content {
		t.Error("a local endpoint removed: changed called with content false")
	}
	saves, relists, listed := run.saves(), r.(*selector).relists.Load(), run.chainLists()
	snap := read()
	if n := run.saves() - saves; n != 2 {
		t.Errorf("a relevant sync, then a Read that ran %d saves; want 2 (filter of both families; nat read in part)", n)
	}
	if r.(*selector).relists.Load() == relists {
		t.Error("a relevant sync in nat's Service chains, and nat was not read in part")
	}
	// web's KUBE-SVL is gone: only GETCHAIN asks after it, and no chain is listed.
	if n := run.chainLists() - listed; n != 0 {
		t.Errorf("the Read listed %d nat chains, want none (web's KUBE-SVL was deleted)", n)
	}
	if !snap.Info().Counted {
		t.Error("a read with filter's drop rules: Info().Counted false")
	}
	web := scenario(false)[1].servicePort()
	if st := snap.Family(web, FamilyIPv4); !st.Drop || st.LocalEndpoints != 0 {
		t.Errorf("web after its local endpoints went: %+v, want a drop and no local endpoint", st)
	}
	if d := snapshotDiff(snap, fullRead(t, ns, ModeIPTables)); d != "" {
		t.Errorf("the Read after a relevant sync differs from a full read:\n%s", d)
	}
	if snap.Resyncs != 0 {
		t.Errorf("Resyncs %d without a loss", snap.Resyncs)
	}

	// The reads in part that follow: each sync is notified as relevant, the
	// Read runs the saves and chain listings given, and equals a full read.
	inPart := func(what string, after map[bool][]genService, changed string, wantSaves, wantLists int) *Snapshot {
		t.Helper()
		watch.drain()
		sync(after, []string{changed}, false, 4)
		if called, _ := watch.waitContent(5 * time.Second); !called {
			t.Fatalf("%s: changed not called within 5 s", what)
		}
		saves, listed := run.saves(), run.chainLists()
		snap := read()
		if n := run.saves() - saves; n != wantSaves {
			t.Errorf("%s: the Read ran %d saves, want %d", what, n, wantSaves)
		}
		if n := run.chainLists() - listed; n != wantLists {
			t.Errorf("%s: the Read listed %d nat chains, want %d", what, n, wantLists)
		}
		if d := snapshotDiff(snap, fullRead(t, ns, ModeIPTables)); d != "" {
			t.Errorf("%s: the Read differs from a full read:\n%s", what, d)
		}
		return snap
	}
	both := func(f func(v6 bool) []genService) map[bool][]genService {
		return map[bool][]genService{false: f(false), true: f(true)}
	}
	// web's local endpoints come back: KUBE-SVL-web created with its two
	// jumps (listed, once per family), filter's drop gone (saved).
	snap = inPart("web's local endpoints back", both(func(v6 bool) []genService { return endpointsOf(before[v6], scenario(v6), "kubelings/web") }), "kubelings/web", 2, 2)
	if st := snap.Family(web, FamilyIPv4); st.Drop || st.LocalEndpoints != 2 {
		t.Errorf("web with its local endpoints back: %+v, want no drop and 2 local endpoints", st)
	}
	// web's local endpoints move to other pods: only KUBE-SVL-web's rules
	// change (listed), filter does not (no save).
	back := snap.Family(web, FamilyIPv4)
	snap = inPart("web's local endpoints moved", both(func(v6 bool) []genService { return localChurn(before[v6], 1, "kubelings/web") }), "kubelings/web", 0, 2)
	if st := snap.Family(web, FamilyIPv4); st.LocalEndpoints != 2 || len(st.Endpoints) != 2 || reflect.DeepEqual(st.Endpoints, back.Endpoints) {
		t.Errorf("web with its local endpoints moved: %+v, want 2 others than %+v", st, back.Endpoints)
	}
	// A Service deleted: KUBE-SERVICES and KUBE-NODEPORTS change, which only
	// a whole save of nat reads (and filter loses its drop or reject).
	natSaves := run.count(xtablesCmd(false, BackendNFT, "save")+" -c -t nat") + run.count(xtablesCmd(true, BackendNFT, "save")+" -c -t nat")
	inPart("checkout deleted", both(func(v6 bool) []genService { return without(before[v6], "kubelings/checkout") }), "kubelings/checkout", 4, 0)
	if n := run.count(xtablesCmd(false, BackendNFT, "save")+" -c -t nat") + run.count(xtablesCmd(true, BackendNFT, "save")+" -c -t nat") - natSaves; n != 2 {
		t.Errorf("a Service deleted: nat saved %d times, want 2 (once per family)", n)
	}
}

// localChurn is svcs with the local endpoints of each Service named moved to
// other addresses (their pods replaced on this node).
func localChurn(svcs []genService, round int, names ...string) []genService {
	return moveEndpoints(svcs, names, func(j int, ep genEndpoint) string {
		if !ep.local {
			return ep.ip
		}
		return bumpAddr(ep.ip, round+10*j)
	})
}

// endpointsOf is svcs with the endpoints of the Service named as from has them.
func endpointsOf(svcs, from []genService, name string) []genService {
	out := slices.Clone(svcs)
	for i, s := range out {
		if s.ns+"/"+s.name != name {
			continue
		}
		for _, f := range from {
			if f.ns == s.ns && f.name == s.name && f.port == s.port {
				out[i].eps = f.eps
			}
		}
	}
	return out
}

// without is svcs with the Service named deleted.
func without(svcs []genService, name string) []genService {
	var out []genService
	for _, s := range svcs {
		if s.ns+"/"+s.name != name {
			out = append(out, s)
		}
	}
	return out
}

func changedSet(names []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// TestWatchNFTables: nftables mode (v1.37's layout: a local chain with two
// local endpoints DNATs through an anonymous numgen map) with Watch running,
// its table rewritten as kube-proxy's partial syncs rewrite it. A sync for
// remote endpoint churn — the Services' chains added again, flushed and
// refilled, their anonymous maps created anew — is notified as irrelevant and
// the next Read lists nothing. Every relevant one is notified, and the Read
// after it lists no table: it reads again, over netlink, only the objects the
// notifications named and the chains they reveal, and equals a full read —
// a local endpoint removed (a drop element added, the local chain flushed,
// then deleted a transaction later) and added back (the chain created anew,
// which is not notified by itself), local endpoints moved, Services created
// (a ClusterIP one's only chain found through the service-ips entry that
// sends to it) and deleted, an element of each map changed (a load balancer IP, a
// NodePort, a firewall-ips entry with its firewall chain). A sync that
// touches more objects than a transaction names is listed whole.
func TestWatchNFTables(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	before := map[bool][]genService{false: scenario(false), true: scenario(true)}
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(genNFTLayout(v6, before[v6], true)), "nft", "-f", "-")
	}
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	var logs logBuffer
	r := NewReader(Options{Mode: ModeNFTables, Runner: run, CacheTTL: -1, Logger: logs.logger()})
	rd := r.(*selector)
	watch := startWatch(t, r)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ctx := context.Background()
	read := func() *Snapshot {
		t.Helper()
		snap, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	read()
	waitBaseline(t, r)
	read()
	watch.drain()
	var stale map[bool][]string
	sync := func(after map[bool][]genService, changed ...string) {
		t.Helper()
		stale = map[bool][]string{}
		for _, v6 := range []bool{false, true} {
			in, st := nftPartialSync(v6, true, before[v6], after[v6], changedSet(changed))
			nsRun(t, ns, []byte(in), "nft", "-f", "-")
			stale[v6] = st
		}
		before = after
	}
	each := func(f func(v6 bool, svcs []genService) []genService) map[bool][]genService {
		return map[bool][]genService{false: f(false, before[false]), true: f(true, before[true])}
	}
	// step reads after a relevant change: changed was called, the Read listed
	// wantLists tables (none: read in part) and equals a full read.
	step := func(what string, wantLists int) *Snapshot {
		t.Helper()
		if !watch.waitCall(5 * time.Second) {
			t.Fatalf("%s: changed not called within 5 s", what)
		}
		lists, relists := run.saves(), rd.relists.Load()
		snap := read()
		if n := run.saves() - lists; n != wantLists {
			t.Errorf("%s: the Read listed %d tables, want %d", what, n, wantLists)
		}
		if wantLists == 0 && rd.relists.Load() == relists {
			t.Errorf("%s: the Read read nothing in part", what)
		}
		if snap.Watch != WatchNotified || snap.Resyncs != 0 {
			t.Errorf("%s: Snapshot.Watch %q, Resyncs %d; want %q, 0", what, snap.Watch, snap.Resyncs, WatchNotified)
		}
		if snap.Info().Counted {
			t.Errorf("%s: Info().Counted, though kube-proxy's elements carry no counter", what)
		}
		if d := snapshotDiff(snap, fullRead(t, ns, ModeNFTables)); d != "" {
			t.Errorf("%s: the Read differs from a full read:\n%s", what, d)
		}
		watch.drain()
		return snap
	}
	deleteStale := func() {
		t.Helper()
		for _, v6 := range []bool{false, true} {
			if len(stale[v6]) > 0 {
				nsRun(t, ns, []byte(nftStaleDelete(v6, stale[v6])), "nft", "-f", "-")
			}
		}
	}

	for round := range 2 {
		sync(each(func(_ bool, s []genService) []genService {
			return remoteChurn(s, round+1, "kubelings/checkout", "kubelings/web")
		}), "kubelings/checkout", "kubelings/web")
		saves := run.saves()
		snap := read()
		if n := run.saves() - saves; n != 0 {
			t.Errorf("round %d: an irrelevant sync, then a Read that listed %d tables; want none", round, n)
		}
		if snap.Watch != WatchNotified {
			t.Errorf("round %d: Snapshot.Watch %q, want %q", round, snap.Watch, WatchNotified)
		}
		if d := snapshotDiff(snap, fullRead(t, ns, ModeNFTables)); d != "" {
			t.Errorf("round %d: the Read after an irrelevant sync differs from a full read:\n%s", round, d)
		}
		if watch.waitCall(300 * time.Millisecond) {
			t.Errorf("round %d: changed called for an irrelevant sync", round)
		}
	}

	web := scenario(false)[1]
	withWeb := before
	sync(each(func(_ bool, s []genService) []genService { return noLocal(s, "kubelings/web") }), "kubelings/web")
	if len(stale[false]) == 0 {
		t.Fatal("web's local chain is not stale after its local endpoints went: the test proves nothing")
	}
	snap := step("web's local endpoints removed", 0)
	if st := snap.Family(web.servicePort(), FamilyIPv4); !st.Drop || st.LocalEndpoints != 0 {
		t.Errorf("web after its local endpoints went: %+v, want a drop and no local endpoint", st)
	}
	// kube-proxy deletes the flushed chain a second later: a Service chain
	// gone is a change (Programmed).
	deleteStale()
	step("web's stale local chain deleted", 0)

	// The local endpoints come back: local-web is created (not notified by
	// itself), external-web jumps to it, the drop goes.
	sync(map[bool][]genService{false: withWeb[false], true: withWeb[true]}, "kubelings/web")
	snap = step("web's local endpoints back", 0)
	if st := snap.Family(web.servicePort(), FamilyIPv4); st.Drop || st.LocalEndpoints != 2 {
		t.Errorf("web after its local endpoints came back: %+v, want no drop and 2 local endpoints", st)
	}
	// One local endpoint replaced by another: the numgen map rewritten.
	sync(each(func(_ bool, s []genService) []genService {
		out := slices.Clone(s)
		out[1].eps = slices.Clone(out[1].eps)
		out[1].eps[0].ip = bumpAddr(out[1].eps[0].ip, 50)
		return out
	}), "kubelings/web")
	step("one of web's local endpoints replaced", 0)

	// A Service created: its chains are found through the dispatch entries
	// that send to them.
	fresh := func(v6 bool) genService {
		s := scenario(v6)[1]
		s.name, s.nodePort = "fresh", 30191
		s.clusterIP, s.lbIPs = bumpAddr(s.clusterIP, 91), []string{bumpAddr(scenario(v6)[0].lbIPs[0], 91)}
		s.eps = []genEndpoint{{ip: bumpAddr(s.eps[0].ip, 91), port: 8080, local: true}, {ip: bumpAddr(s.eps[2].ip, 91), port: 8080}}
		return s
	}
	// A ClusterIP Service has only its service-* chain: no rule of it counts,
	// and only service-ips sends to it.
	plain := func(v6 bool) genService {
		s := scenario(v6)[3]
		s.name, s.clusterIP = "plain", bumpAddr(s.clusterIP, 92)
		return s
	}
	sync(each(func(v6 bool, s []genService) []genService { return append(slices.Clone(s), plain(v6), fresh(v6)) }),
		"kubelings/fresh", "kube-system/plain")
	snap = step("Services created", 0)
	if st := snap.Family(fresh(false).servicePort(), FamilyIPv4); !st.Programmed || st.LocalEndpoints != 1 {
		t.Errorf("the new Service: %+v, want programmed with 1 local endpoint", st)
	}
	if st := snap.Family(plain(false).servicePort(), FamilyIPv4); !st.Programmed {
		t.Errorf("the new ClusterIP Service: %+v, want programmed", st)
	}

	// An element of each map changed: checkout's load balancer IP moves
	// (service-ips, no-endpoint-services), fresh's NodePort moves
	// (service-nodeports; no-endpoint-nodeports moved above), and a
	// firewall-ips entry comes with its firewall chain.
	sync(each(func(_ bool, s []genService) []genService {
		out := slices.Clone(s)
		out[0].lbIPs = []string{bumpAddr(out[0].lbIPs[0], 7)}
		out[len(out)-1].nodePort = 30192
		return out
	}), "kubelings/checkout", "kubelings/fresh")
	step("a load balancer IP and a NodePort moved", 0)
	for _, v6 := range []bool{false, true} {
		fam, ip := "ip", "ip"
		if v6 {
			fam, ip = "ip6", "ip6"
		}
		f := fresh(v6)
		fw := strings.Replace(nftChainOf("external-", f), "external-", "firewall-", 1)
		nsRun(t, ns, []byte(fmt.Sprintf("add chain %s kube-proxy %s\nadd rule %s kube-proxy %s %s saddr != { %s } drop\nadd element %s kube-proxy firewall-ips { %s . tcp . 80 : goto %s }\n",
			fam, fw, fam, fw, ip, f.eps[0].ip, fam, f.lbIPs[0], fw)), "nft", "-f", "-")
	}
	step("a firewall-ips entry and its chain added", 0)

	// The Service deleted: its elements go and its chains are flushed, then
	// deleted a transaction later.
	for _, v6 := range []bool{false, true} {
		fam := "ip"
		if v6 {
			fam = "ip6"
		}
		nsRun(t, ns, []byte(fmt.Sprintf("flush map %s kube-proxy firewall-ips\ndelete chain %s kube-proxy %s\n",
			fam, fam, strings.Replace(nftChainOf("external-", fresh(v6)), "external-", "firewall-", 1))), "nft", "-f", "-")
	}
	step("the firewall entry and chain removed", 0)
	sync(each(func(_ bool, s []genService) []genService { return slices.Clone(s[:len(s)-2]) }), "kubelings/fresh", "kube-system/plain")
	if len(stale[false]) == 0 {
		t.Fatal("no stale chain after a Service's deletion: the test proves nothing")
	}
	snap = step("Services deleted, their chains flushed", 0)
	if st := snap.Family(fresh(false).servicePort(), FamilyIPv4); !st.Programmed {
		t.Errorf("the deleted Service's flushed chains still exist: %+v, want programmed", st)
	}
	deleteStale()
	snap = step("the deleted Services' chains deleted", 0)
	for _, s := range []genService{fresh(false), plain(false)} {
		if st := snap.Family(s.servicePort(), FamilyIPv4); st.Programmed {
			t.Errorf("the deleted Service %s: %+v, want nothing", s.name, st)
		}
	}

	// More Services than one transaction names, in IPv4 only: IPv4 is
	// listed whole, IPv6 kept.
	var many []genService
	for i := range maxTxObjects {
		s := fresh(false)
		s.name, s.nodePort, s.lbIPs = fmt.Sprintf("many%d", i), 0, nil
		s.clusterIP = fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1)
		many = append(many, s)
	}
	sync(map[bool][]genService{false: append(slices.Clone(before[false]), many...), true: before[true]}, namesOf(many)...)
	step("many Services created", 1)
}

// TestWatchOverrun: notifications lost to a receive buffer overrun (a tiny
// one here) are reported — changed called, a warning logged —, the next Read
// saves everything again and counts the resync, and the watcher goes on from a
// new baseline.
func TestWatchOverrun(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	before := clusterOf(200, false)
	nsRun(t, ns, []byte(genRules(layout125, false, before)), xtablesCmd(false, BackendNFT, "restore"))
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	var logs logBuffer
	r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, Logger: logs.logger(), NotifyBuffer: 1})
	watch := startWatch(t, r)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ctx := context.Background()
	read := func() *Snapshot {
		t.Helper()
		snap, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	read()
	waitBaseline(t, r)
	read()
	watch.drain()
	// An irrelevant sync of 200 Services: filter's transaction, then nat's,
	// some 600 notifications. The watcher stops at the first (its log
	// waits) while the second's overrun the buffer.
	logs.hold()
	nsRun(t, ns, []byte(iptPartialSync(false, before, shuffled(before, 7), nil)), xtablesCmd(false, BackendNFT, "restore"), "--noflush")
	logs.release()
	if !watch.waitCall(5 * time.Second) {
		t.Fatal("notifications overrun: changed not called within 5 s")
	}
	// The first call may be for filter's transaction (its counters' chain rewritten), judged before the
	// overrun of nat's is found: the loss is told soon after.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "notifications lost"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning of the loss logged:\n%s", logs.String())
		}
	}
	watch.waitCall(time.Second)
	saves := run.saves()
	snap := read()
	if n := run.saves() - saves; n == 0 {
		t.Error("the Read after a loss saved nothing: it trusted what was kept")
	}
	if snap.Resyncs != 1 {
		t.Errorf("Resyncs %d after one loss, want 1", snap.Resyncs)
	}
	if d := snapshotDiff(snap, fullRead(t, ns, ModeIPTables)); d != "" {
		t.Errorf("the Read after a loss differs from a full read:\n%s", d)
	}
	saves = run.saves()
	snap = read()
	if n := run.saves() - saves; n != 0 || snap.Resyncs != 1 {
		t.Errorf("nothing changed since: %d saves, Resyncs %d; want 0 and still 1", n, snap.Resyncs)
	}
}

// TestWatchLegacyPolled: the legacy backend has no notifications: Watch polls
// each table's GET_INFO every PollInterval and calls changed when it moved —
// not for a rewrite that keeps it, such as kube-proxy's reordered top-level
// chains — and Snapshot.Watch says polled.
func TestWatchLegacyPolled(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	svcs := scenario(false)
	nsRun(t, ns, []byte(genRules(layout125, false, svcs)), xtablesCmd(false, BackendLegacy, "restore"), "-c")
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, PollInterval: 50 * time.Millisecond})
	watch := startWatch(t, r)
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Watch != WatchPolled || snap.Backend != BackendLegacy {
		t.Fatalf("legacy: Snapshot.Watch %q, backend %q; want %q, legacy", snap.Watch, snap.Backend, WatchPolled)
	}
	time.Sleep(300 * time.Millisecond) // past the first polls: the baseline
	watch.drain()
	nsRun(t, ns, []byte(iptPartialSync(false, svcs, shuffled(svcs, 3), nil)), xtablesCmd(false, BackendLegacy, "restore"), "--noflush")
	if watch.waitCall(500 * time.Millisecond) {
		t.Error("a rewrite that keeps every table's GET_INFO: changed called")
	}
	web := svcs[1]
	nsRun(t, ns, nil, "iptables-legacy", "-t", "nat", "-F", web.chain("KUBE-SVL-"))
	if !watch.waitCall(2 * time.Second) {
		t.Fatal("nat changed: changed not called within 2 s")
	}
	snap, err = r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Family(web.servicePort(), FamilyIPv4).LocalEndpoints; got != 0 {
		t.Errorf("web after its local chain was flushed: %d local endpoints, want 0", got)
	}
}

// TestWatchFullVerify: a change the notifications do not count — a Service
// chain created with nothing jumping to it, which kube-proxy never writes —
// is kept out of the reads until FullVerify has passed since the save; then
// the table is saved again, the difference counted in Resyncs and logged.
func TestWatchFullVerify(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	svcs := scenario(false)
	nsRun(t, ns, []byte(genRules(layout125, false, svcs)), xtablesCmd(false, BackendNFT, "restore"), "-c")
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	var logs logBuffer
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, Now: clock, FullVerify: time.Minute, Logger: logs.logger()})
	startWatch(t, r)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ctx := context.Background()
	read := func() *Snapshot {
		t.Helper()
		snap, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	read()
	waitBaseline(t, r)
	read()
	orphan := genService{ns: "kubelings", name: "orphan", port: "http", proto: "tcp"}
	nsRun(t, ns, nil, "iptables-nft", "-t", "nat", "-N", orphan.chain("KUBE-SVC-"))
	saves := run.saves()
	if snap := read(); snap.Family(orphan.servicePort(), FamilyIPv4).Programmed || run.saves() != saves {
		t.Fatalf("an unreferenced chain: programmed %v, %d saves; want the kept nat (the blind spot FullVerify covers)",
			snap.Family(orphan.servicePort(), FamilyIPv4).Programmed, run.saves()-saves)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	snap := read()
	if !snap.Family(orphan.servicePort(), FamilyIPv4).Programmed || snap.Resyncs != 1 {
		t.Errorf("after FullVerify: orphan programmed %v, Resyncs %d; want true, 1", snap.Family(orphan.servicePort(), FamilyIPv4).Programmed, snap.Resyncs)
	}
	if !strings.Contains(logs.String(), "kept rules differed") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the difference is not logged at warn:\n%s", logs.String())
	}
	if d := snapshotDiff(snap, fullRead(t, ns, ModeIPTables)); d != "" {
		t.Errorf("after FullVerify the Read differs from a full read:\n%s", d)
	}
}

// TestWatchWithoutNotifications: where the watcher cannot subscribe (a
// Runner with change signals but no namespace to subscribe in) it polls the
// nf_tables generation: changed when it moved, not otherwise; without any
// change signal every tick may be a change. Calls never overlap and pile up
// into one.
func TestWatchWithoutNotifications(t *testing.T) {
	f := &signalRunner{fakeRunner: iptablesNode(t, BackendNFT)}
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, CacheTTL: -1, PollInterval: 20 * time.Millisecond})
	watch := startWatch(t, r)
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Watch != WatchPolled {
		t.Errorf("without notifications: Snapshot.Watch %q, want %q", snap.Watch, WatchPolled)
	}
	time.Sleep(100 * time.Millisecond)
	watch.drain()
	if watch.waitCall(200 * time.Millisecond) {
		t.Error("the generation held: changed called")
	}
	f.mu.Lock()
	f.gen++
	f.mu.Unlock()
	if !watch.waitCall(time.Second) {
		t.Error("the generation moved: changed not called within 1 s")
	}

	none := NewReader(Options{Mode: ModeIPTables, Runner: iptablesNode(t, BackendNFT), LookPath: anyPath, CacheTTL: -1, PollInterval: 5 * time.Millisecond})
	if snap, err := none.Read(context.Background()); err != nil || snap.Watch != WatchNone {
		t.Fatalf("no change signal: Snapshot.Watch %q (%v), want %q", snap.Watch, err, WatchNone)
	}
	var inside, overlap, calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		none.(Watcher).Watch(ctx, func(bool) {
			if inside.Add(1) > 1 {
				overlap.Add(1)
			}
			calls.Add(1)
			time.Sleep(50 * time.Millisecond) // ten ticks pile up meanwhile
			inside.Add(-1)
		})
	}()
	time.Sleep(520 * time.Millisecond)
	cancel()
	<-done
	if n := calls.Load(); n < 3 || n > 12 || overlap.Load() != 0 {
		t.Errorf("no change signal, a 50 ms callback, 5 ms ticks for 0.5 s: %d calls, %d overlapping; want about 10, none", n, overlap.Load())
	}
}

// TestWatchForgetsCachedSnapshot: a Read called because Watch said the rules
// changed reads them, though a snapshot younger than CacheTTL is kept.
func TestWatchForgetsCachedSnapshot(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	svcs := scenario(false)
	nsRun(t, ns, []byte(genNFTLayout(false, svcs, true)), "nft", "-f", "-")
	r := NewReader(Options{Mode: ModeNFTables, Runner: NetnsRunner{Namespace: ns}, CacheTTL: time.Hour})
	watch := startWatch(t, r)
	ctx := context.Background()
	if _, err := r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	waitBaseline(t, r)
	watch.drain()
	in, _ := nftPartialSync(false, true, svcs, noLocal(svcs, "kubelings/web"), changedSet([]string{"kubelings/web"}))
	nsRun(t, ns, []byte(in), "nft", "-f", "-")
	if !watch.waitCall(5 * time.Second) {
		t.Fatal("a local endpoint removed: changed not called within 5 s")
	}
	snap, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := snap.Family(svcs[1].servicePort(), FamilyIPv4); !st.Drop {
		t.Errorf("the Read after changed returned the cached snapshot: web %+v, want its drop", st)
	}
}
