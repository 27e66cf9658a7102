package scrape

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// fixedTracker is an APITracker over one Service whose local endpoint count the test sets; Update reports it
// changed when the count moved.
type fixedTracker struct {
	mu    sync.Mutex
	local int
	seen  int
	state kubeview.ServiceState
	// mod, when set, changes each state Update builds (what the API view shows beside the count).
	mod func(*kubeview.ServiceState)
}

func (f *fixedTracker) set(local int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local = local
}

func (f *fixedTracker) Update(time.Time) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == f.local && f.state.Name != "" {
		return nil, nil
	}
	f.seen = f.local
	f.state = scrapetest.NodePortService(f.local, scrapetest.Family(corev1.IPv4Protocol, f.local, true))
	if f.mod != nil {
		f.mod(&f.state)
	}
	return []string{"kubelings/checkout"}, nil
}
func (f *fixedTracker) Keys() []string { return []string{"kubelings/checkout"} }
func (f *fixedTracker) State(string) (kubeview.ServiceState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, true
}
func (f *fixedTracker) Node() kubeview.NodeState {
	return kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}
}
func (f *fixedTracker) Announcers() map[announce.Source]announce.SourceState { return nil }
func (f *fixedTracker) NextChange() time.Time                                { return time.Time{} }

// watchedReader is a rule reader that tells of changes (RulesWatcher) when the test says so, and counts reads.
type watchedReader struct {
	mu      sync.Mutex
	snap    *kernelrules.Snapshot
	reads   atomic.Int32
	changed chan func(bool)
}

func (w *watchedReader) Read(context.Context) (dataplane.Rules, error) {
	w.reads.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.snap == nil {
		return nil, nil
	}
	return w.snap, nil
}

// The exporter's rules reader tells of changes as the model expects, and so does this test's.
var (
	_ RulesWatcher = (*kernelrules.Dataplane)(nil)
	_ RulesWatcher = (*watchedReader)(nil)
)

func (w *watchedReader) Watch(ctx context.Context, changed func(bool)) {
	select {
	case w.changed <- changed:
	case <-ctx.Done():
	}
	<-ctx.Done()
}

func (w *watchedReader) set(s *kernelrules.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.snap = s
}

func rulesWith(local int, drop bool) *kernelrules.Snapshot {
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	st := kernelrules.PortState{Programmed: true, LocalEndpoints: local}
	if drop {
		st.Drop, st.Drops = true, []kernelrules.DropRule{{Port: 30090}}
	}
	return kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Now(),
		map[kernelrules.ServicePort]kernelrules.PortState{sp: st})
}

// TestModelReadsUncountedRulesWhenTold: with a reader that tells of its changes, a read whose drop rules carry
// no counter (nftables mode: kube-proxy puts none on its elements) is read again when told of a change and
// every RulesSweep, not every RulesEvery; once a read has counted drops, they are read every RulesEvery, their
// counts moving without any change.
func TestModelReadsUncountedRulesWhenTold(t *testing.T) {
	tr := &fixedTracker{local: 0}
	rules := &watchedReader{snap: rulesWith(0, true)}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: rules, Addrs: scrapetest.Addrs{"127.0.0.1"},
		KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	now := time.Unix(1_800_000_000, 0)
	m := NewModel(g, ModelConfig{Tracker: tr, Synchronous: true, Now: func() time.Time { return now },
		RulesEvery: 15 * time.Second, RulesSweep: 5 * time.Minute})
	ctx := context.Background()
	stepTo := func(d time.Duration) int32 {
		t.Helper()
		for end := now.Add(d); now.Before(end); {
			now = now.Add(time.Second)
			m.Step(ctx, now)
		}
		return rules.reads.Load()
	}
	if n := stepTo(time.Second); n != 1 {
		t.Fatalf("first step: %d reads, want 1", n)
	}
	if n := stepTo(time.Minute); n != 1 {
		t.Errorf("a minute later, no change told, no counter read: %d reads, want 1", n)
	}
	m.RulesChanged(true)
	if n := stepTo(time.Second); n != 2 {
		t.Errorf("told of a change: %d reads, want 2", n)
	}
	if n := stepTo(5*time.Minute - 10*time.Second); n != 2 {
		t.Errorf("within RulesSweep of the last read: %d reads, want 2", n)
	}
	if n := stepTo(15 * time.Second); n != 3 {
		t.Errorf("RulesSweep after the last read: %d reads, want 3", n)
	}
	// A read with a counted drop: every RulesEvery from there.
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	counted := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, now,
		map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, DropPackets: 3,
			Drops: []kernelrules.DropRule{{Port: 30090, Packets: 3, Counted: true}}}})
	rules.set(counted)
	m.RulesChanged(true)
	if n := stepTo(time.Second); n != 4 {
		t.Errorf("told of a change: %d reads, want 4", n)
	}
	if n := stepTo(time.Minute); n != 8 {
		t.Errorf("a minute of reads with counted drops: %d reads, want 8 (one every 15 s)", n)
	}
}

// runModel runs m's loop until stop (or the test's end), which waits for it to return.
func runModel(t *testing.T, m *Model) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ctx, stop
}

// TestModelRunFollowsEvents: the model's own loop, with its jobs off its goroutine, follows an API change
// (woken by Notify) and a rule change (woken by the reader's Watch) without being asked, reads the rules only
// when told or due (not once per Gather), and writes the state file when it stops.
func TestModelRunFollowsEvents(t *testing.T) {
	tr := &fixedTracker{local: 1}
	rules := &watchedReader{snap: rulesWith(1, false), changed: make(chan func(bool), 1)}
	path := filepath.Join(t.TempDir(), "state.json")
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: rules, Addrs: scrapetest.Addrs{"127.0.0.1"},
		KubeProxyAddress: scrapetest.RefusedKubeProxy(t), ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler),
		State: OpenStateFile(StateFileConfig{Path: path, Node: "node-1"})})
	m := NewModel(g, ModelConfig{Tracker: tr, RulesEvery: time.Hour})
	ctx, stop := runModel(t, m)
	changed := <-rules.changed

	eventually := func(what string, ok func(*State) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if st := m.Gather(ctx); ok(st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the model never %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	served := func(st *State) bool {
		return st.APIErr == nil && len(st.Services) == 1 && !st.Services[0].Verdict.Drops && st.Rules != nil
	}
	eventually("decided the Service served", served)
	readsBefore := rules.reads.Load()
	for range 50 {
		m.Gather(ctx) // scrapes read nothing
	}
	if got := rules.reads.Load(); got != readsBefore {
		t.Errorf("50 scrapes made %d reads of the rules", got-readsBefore)
	}

	// The endpoint goes (an informer event), then kube-proxy syncs the drop (a change notification).
	tr.set(0)
	m.Notify()
	eventually("followed the API change", func(st *State) bool { return st.Services[0].Service.LocalEndpoints() == 0 })
	rules.set(rulesWith(0, true))
	changed(true)
	eventually("read the rules it was told of", func(st *State) bool { return st.Services[0].Verdict.Drops })

	stop()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("no state file when the model stopped: %v", err)
	}
}

// movingAddrs are node addresses the test changes.
type movingAddrs struct {
	mu    sync.Mutex
	addrs scrapetest.Addrs
}

func (a *movingAddrs) set(addrs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrs = addrs
}

func (a *movingAddrs) LocalAddrs() ([]net.IP, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addrs.LocalAddrs()
}

// TestModelWatchesNewAddresses: the meter counts a NodePort on the node's addresses, so a new address (or one
// gone) gives the meter a new Watch at the next address read, though no Service moved.
func TestModelWatchesNewAddresses(t *testing.T) {
	tr := &fixedTracker{local: 1}
	addrs := &movingAddrs{addrs: scrapetest.Addrs{"127.0.0.1"}}
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: time.Unix(1_800_000_000, 0)}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: &scrapetest.Reader{Snap: rulesWith(1, false)},
		Addrs: addrs, Meter: meter, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	m := NewModel(g, ModelConfig{Tracker: tr, Synchronous: true})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	watched := func() []netip.Addr {
		meter.Mu.Lock()
		defer meter.Mu.Unlock()
		return meter.Watched.NodeAddrs
	}
	m.Step(ctx, now)
	if got, want := watched(), []netip.Addr{netip.MustParseAddr("127.0.0.1")}; !slices.Equal(got, want) {
		t.Fatalf("first watch counts on %v, want %v", got, want)
	}
	for _, set := range [][]string{{"127.0.0.1", "127.0.0.2"}, {"127.0.0.2"}} {
		addrs.set(set...)
		for range 3 { // steps within the address period read nothing new
			now = now.Add(time.Second)
			m.Step(ctx, now)
		}
		now = now.Add(5 * time.Second) // the address period (AddrsEvery) passed
		m.Step(ctx, now)
		var want []netip.Addr
		for _, a := range set {
			want = append(want, netip.MustParseAddr(a))
		}
		if got := watched(); !slices.Equal(got, want) {
			t.Errorf("after the addresses became %v the meter counts on %v", set, got)
		}
	}
}

// mapTracker is an APITracker over a fixed set of Services: it tells of every one once, none changes after.
type mapTracker struct {
	states map[string]kubeview.ServiceState
	told   bool
}

// newLBTracker is a mapTracker over n LoadBalancer Services, each with a health check node port of its own.
func newLBTracker(n int) *mapTracker {
	t := &mapTracker{states: map[string]kubeview.ServiceState{}}
	for i := range n {
		st := scrapetest.LBService(scrapetest.Family(corev1.IPv4Protocol, 1, true))
		st.Name = fmt.Sprintf("web-%d", i)
		st.HealthCheckNodePort = int32(32000 + i)
		t.states[st.Namespace+"/"+st.Name] = st
	}
	return t
}

func (t *mapTracker) Update(time.Time) ([]string, error) {
	if t.told {
		return nil, nil
	}
	t.told = true
	return t.Keys(), nil
}
func (t *mapTracker) Keys() []string { return slices.Sorted(maps.Keys(t.states)) }
func (t *mapTracker) State(k string) (kubeview.ServiceState, bool) {
	st, ok := t.states[k]
	return st, ok
}
func (t *mapTracker) Node() kubeview.NodeState {
	return kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}
}
func (t *mapTracker) Announcers() map[announce.Source]announce.SourceState { return nil }
func (t *mapTracker) NextChange() time.Time                                { return time.Time{} }

// TestModelProbesConcurrently: the model's health check probes run beside each other, off its goroutine, and
// share what they read (the address each family is probed on); the race detector holds them to reading it only.
func TestModelProbesConcurrently(t *testing.T) {
	const services = 16
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: &scrapetest.Reader{Snap: rulesWith(1, false)},
		Addrs: scrapetest.Addrs{"127.0.0.1"}, KubeProxyAddress: scrapetest.RefusedKubeProxy(t), ProbeTimeout: time.Second,
		Concurrency: 8, Logger: slog.New(slog.DiscardHandler)})
	m := NewModel(g, ModelConfig{Tracker: newLBTracker(services)})
	ctx, _ := runModel(t, m)
	deadline := time.Now().Add(10 * time.Second)
	for {
		probed := 0
		st := m.Gather(ctx)
		for _, r := range st.Services {
			if len(r.Checks) > 0 && r.Checks[0].Address != "" {
				probed++
			}
		}
		if probed == services {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s %d of %d Services' health checks probed", probed, services)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockedReader is a rule reader whose reads wait until the test releases them.
type blockedReader struct {
	release chan struct{}
	snap    *kernelrules.Snapshot
}

func (b *blockedReader) Read(ctx context.Context) (dataplane.Rules, error) {
	select {
	case <-b.release:
		if b.snap == nil {
			return nil, nil
		}
		return b.snap, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestModelFirstVerdictWaitsForTheRules: until kube-proxy's rules were read once, the model shows no verdict
// (one from the API view alone would call a Service kube-proxy has not programmed yet a blackhole) and is not
// ready; once read, the verdict is the rules'.
func TestModelFirstVerdictWaitsForTheRules(t *testing.T) {
	// The API view: no local endpoint, a drop once kube-proxy programs one; its rules: not programmed yet.
	tr := &fixedTracker{local: 0}
	rules := &blockedReader{release: make(chan struct{}), snap: rulesWith(0, false)}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: rules, Addrs: scrapetest.Addrs{"127.0.0.1"},
		KubeProxyAddress: scrapetest.RefusedKubeProxy(t), ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	m := NewModel(g, ModelConfig{Tracker: tr})
	ctx, _ := runModel(t, m)

	for range 5 {
		sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
		st := m.Gather(sctx)
		scancel()
		if len(st.Services) != 0 {
			t.Fatalf("a verdict before the rules were read: %+v", st.Services[0].Verdict)
		}
		if m.Ready() {
			t.Fatal("ready before the rules were read")
		}
	}
	close(rules.release)
	st := m.Gather(ctx)
	if len(st.Services) != 1 || st.Source != SourceRules || st.Services[0].Verdict.Drops {
		t.Fatalf("after the rules were read: source %s, services %d, want one from the rules that drops nothing", st.Source, len(st.Services))
	}
	if !m.Ready() {
		t.Error("not ready after the first verdict")
	}
}

// expiringTracker is an APITracker over one Service that a Cilium lease announces from this node until
// expiry: as kubeview.Tracker with a lease nobody renews, nothing tells the model when it expires (no event,
// no Notify); NextChange says when.
type expiringTracker struct {
	mu      sync.Mutex
	expiry  time.Time
	expired bool
	primed  bool
	state   kubeview.ServiceState
}

func (e *expiringTracker) Update(now time.Time) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.primed && (e.expired || now.Before(e.expiry)) {
		return nil, nil
	}
	e.primed, e.expired = true, !now.Before(e.expiry)
	e.state = scrapetest.NodePortService(1, scrapetest.Family(corev1.IPv4Protocol, 1, true))
	e.state.Announcements = []announce.Announcement{{Source: announce.SourceCiliumL2, Node: "node-1", Exclusive: true, Expired: e.expired}}
	return []string{"kubelings/checkout"}, nil
}
func (e *expiringTracker) Keys() []string { return []string{"kubelings/checkout"} }
func (e *expiringTracker) State(string) (kubeview.ServiceState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state, true
}
func (e *expiringTracker) Node() kubeview.NodeState {
	return kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}
}
func (e *expiringTracker) Announcers() map[announce.Source]announce.SourceState { return nil }
func (e *expiringTracker) NextChange() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.expired {
		return time.Time{}
	}
	return e.expiry
}

// TestModelWakesAtALeaseExpiry: a lease that stops changing expires a lease duration after the reader last saw
// it change, with no event to wake the model; the model's timer (the tracker's NextChange) decides the Service
// again then, though every other input polls only hourly.
func TestModelWakesAtALeaseExpiry(t *testing.T) {
	tr := &expiringTracker{expiry: time.Now().Add(300 * time.Millisecond)}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: &watchedReader{snap: rulesWith(1, false), changed: make(chan func(bool), 1)},
		Addrs: scrapetest.Addrs{"127.0.0.1"}, KubeProxyAddress: scrapetest.RefusedKubeProxy(t), ProbeTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	m := NewModel(g, ModelConfig{Tracker: tr, KubeProxyEvery: time.Hour, AddrsEvery: time.Hour, AddrsSweep: time.Hour,
		RulesEvery: time.Hour, HealthCheckSweep: time.Hour, Resweep: time.Hour})
	ctx, _ := runModel(t, m)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := m.Gather(ctx)
		if len(st.Services) == 1 && len(st.Services[0].Service.Announcements) == 1 && st.Services[0].Service.Announcements[0].Expired {
			if late := time.Since(tr.expiry); late > 2*time.Second {
				t.Errorf("the expiry decided %s after it", late)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the model never decided the Service again at its lease's expiry")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Sweeps come in batches: every Service's next sweep lies within the period's second half and on one of its
// ticks, so that 1,000 Services wake the model a few times a period, not once each.
func TestSweepAtBatches(t *testing.T) {
	m := &Model{}
	now := time.Unix(1_800_000_000, 123_456_789)
	const period = time.Minute
	ticks := map[time.Time]int{}
	for i := range 1000 {
		at := m.sweepAt(fmt.Sprintf("ns/svc-%d", i), now, period)
		if d := at.Sub(now); d < period/2 || d > period {
			t.Fatalf("service %d: next sweep in %v, want within [%v, %v]", i, d, period/2, period)
		}
		if at.Truncate(period/sweepTicks) != at {
			t.Fatalf("service %d: next sweep at %v, not on a tick of %v", i, at, period/sweepTicks)
		}
		ticks[at]++
	}
	if len(ticks) > sweepTicks/2+1 || len(ticks) < sweepTicks/2-1 {
		t.Errorf("1,000 Services' sweeps fall on %d ticks, want about %d (half a period of %d)", len(ticks), sweepTicks/2, sweepTicks)
	}
}
