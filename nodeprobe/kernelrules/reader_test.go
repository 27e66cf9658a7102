package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeRunner answers commands from a table and records what ran, how many ran
// at once per command line, and the most that ever did.
type fakeRunner struct {
	mu       sync.Mutex
	out      map[string]string // "cmd args..." -> stdout
	fail     map[string]error  // "cmd args..." -> error
	delay    time.Duration
	calls    map[string]int
	inflight map[string]int
	maxInfl  map[string]int
	block    chan struct{} // when set, every call waits for it (or ctx)
}

func newFakeRunner() *fakeRunner {
	return &fakeRunner{out: map[string]string{}, fail: map[string]error{}, calls: map[string]int{}, inflight: map[string]int{}, maxInfl: map[string]int{}}
}

func (f *fakeRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	key := strings.Join(append([]string{name}, args...), " ")
	f.mu.Lock()
	f.calls[key]++
	f.inflight[key]++
	f.maxInfl[key] = max(f.maxInfl[key], f.inflight[key])
	out, ok := f.out[key]
	err := f.fail[key]
	block := f.block
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[key]--
		f.mu.Unlock()
	}()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &CommandError{Cmd: key, Err: errors.New("exit status 1"), Stderr: "fake: unexpected command " + key}
	}
	return []byte(out), nil
}

func (f *fakeRunner) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

func (f *fakeRunner) ran(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.calls {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func anyPath(file string) (string, error) { return "/usr/sbin/" + file, nil }

const emptyMangle = "*mangle\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
const hintMangle = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"

func splitTables(t testing.TB, file string) (nat, filter string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "*nat")
	if i < 0 {
		t.Fatalf("%s: no *nat", file)
	}
	return s[i:], s[:i]
}

// iptablesNode fakes a node whose kube-proxy uses backend for both families.
func iptablesNode(t testing.TB, backend Backend) *fakeRunner {
	return iptablesNodeOf(t, backend, func(v6 bool) string { return saveFixture(layout125, v6, backend) })
}

// iptablesNodeOf fakes a node whose kube-proxy uses backend for both families, its saves those of files.
func iptablesNodeOf(t testing.TB, backend Backend, file func(v6 bool) string) *fakeRunner {
	f := newFakeRunner()
	other := BackendLegacy
	if backend == BackendLegacy {
		other = BackendNFT
	}
	for _, v6 := range []bool{false, true} {
		fam := ipFamilies[0]
		if v6 {
			fam = ipFamilies[1]
		}
		nat, filter := splitTables(t, file(v6))
		b := saveCommand(fam, backend)
		f.out[b+" -c -t nat"] = nat
		f.out[b+" -c -t filter"] = filter
		f.out[b+" -c -t mangle"] = hintMangle
		o := saveCommand(fam, other)
		f.out[o+" -c -t mangle"] = emptyMangle
		f.out[o+" -c -t nat"] = "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"
		f.out[o+" -c -t filter"] = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
	}
	names := "mangle\nfilter\nnat\n"
	if backend == BackendNFT {
		names = ""
	}
	f.out["cat /proc/net/ip_tables_names"] = names
	f.out["cat /proc/net/ip6_tables_names"] = names
	return f
}

func checkScenario(t *testing.T, snap *Snapshot, want map[ServicePort]PortState) {
	t.Helper()
	for sp, w := range want {
		if got := snap.Port(sp); !equalState(got, w) {
			t.Errorf("%v: got %+v, want %+v", sp, got, w)
		}
	}
}

// familyWant is what the 1.25 fixtures give per family with backend
// (ip6tables-nft fixtures carry zero counters, see TestParseIPTablesFixtures).
func familyWant(backend Backend, ipv6 bool) map[ServicePort]PortState {
	return layoutWant(layout125, backend, ipv6)
}

// layoutWant: what one family's saves of layout l with backend give.
func layoutWant(l layout, backend Backend, ipv6 bool) map[ServicePort]PortState {
	if ipv6 && backend == BackendNFT {
		return scenarioWantCounted(l, true, 0, true)
	}
	return scenarioWant(l, ipv6)
}

// mergedWant: both families of the 1.25 layout merged. Counters add up; Drops
// hold both families' rules, NodePort rules first, then by address.
func mergedWant(backend Backend) map[ServicePort]PortState {
	v4, v6 := familyWant(backend, false), familyWant(backend, true)
	w := map[ServicePort]PortState{}
	for sp, a := range v4 {
		b := v6[sp]
		m := a
		m.DropPackets += b.DropPackets
		m.LocalEndpoints = max(a.LocalEndpoints, b.LocalEndpoints)
		m.Endpoints = append(slices.Clone(a.Endpoints), b.Endpoints...)
		if len(b.Drops) > 0 {
			m.Drops = append(slices.Clone(a.Drops), b.Drops...)
			sortDrops(m.Drops)
		}
		w[sp] = m
	}
	return w
}

func TestReadIPTablesBothBackends(t *testing.T) {
	for _, backend := range []Backend{BackendNFT, BackendLegacy} {
		t.Run(string(backend), func(t *testing.T) {
			f := iptablesNode(t, backend)
			r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
			snap, err := r.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if snap.Mode != ModeIPTables || snap.Backend != backend || !slices.Equal(snap.Families, []string{FamilyIPv4, FamilyIPv6}) {
				t.Errorf("mode %s backend %s families %v", snap.Mode, snap.Backend, snap.Families)
			}
			checkScenario(t, snap, mergedWant(backend))
			checkFamily(t, snap, FamilyIPv4, familyWant(backend, false))
			checkFamily(t, snap, FamilyIPv6, familyWant(backend, true))
			if backend == BackendLegacy {
				// Never ask legacy for a table that may not exist.
				for _, k := range f.ran("iptables-legacy-save") {
					if !strings.Contains(k, "-t ") {
						t.Errorf("legacy save without -t: %s", k)
					}
				}
			} else if got := f.ran("iptables-legacy-save"); len(got) != 0 {
				// No legacy tables listed: legacy save would create them.
				t.Errorf("legacy save run although no legacy table exists: %v", got)
			}
		})
	}
}

func TestDetectBackendByRuleCount(t *testing.T) {
	// No hint chains anywhere (pre-1.17 kubelet): the backend with more KUBE-
	// rules wins, as in the iptables-wrapper.
	f := iptablesNode(t, BackendLegacy)
	for k := range f.out {
		if strings.HasSuffix(k, "-t mangle") {
			f.out[k] = emptyMangle
		}
	}
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Backend != BackendLegacy {
		t.Errorf("backend %s, want legacy", snap.Backend)
	}
}

func TestLegacyTablesNotCreated(t *testing.T) {
	// Legacy module not loaded at all: /proc file missing. The nft backend is
	// used and no legacy save runs.
	f := iptablesNode(t, BackendNFT)
	delete(f.out, "cat /proc/net/ip_tables_names")
	delete(f.out, "cat /proc/net/ip6_tables_names")
	f.fail["cat /proc/net/ip_tables_names"] = &CommandError{Cmd: "cat", Err: errors.New("exit status 1"), Stderr: "cat: /proc/net/ip_tables_names: No such file or directory"}
	f.fail["cat /proc/net/ip6_tables_names"] = &CommandError{Cmd: "cat", Err: errors.New("exit status 1"), Stderr: "cat: /proc/net/ip6_tables_names: No such file or directory"}
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	if _, err := r.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := append(f.ran("iptables-legacy-save"), f.ran("ip6tables-legacy-save")...); len(got) != 0 {
		t.Errorf("legacy saves ran: %v", got)
	}
}

func TestIPv6Absent(t *testing.T) {
	f := iptablesNode(t, BackendNFT)
	for _, tbl := range []string{"nat", "filter", "mangle"} {
		key := "ip6tables-nft-save -c -t " + tbl
		delete(f.out, key)
		f.fail[key] = &CommandError{Cmd: key, Err: errors.New("exit status 1"), Stderr: "ip6tables-nft-save v1.8.9 (nf_tables): Table does not exist (do you need to insmod?)"}
	}
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(snap.Families, []string{FamilyIPv4}) {
		t.Errorf("families %v, want [IPv4]", snap.Families)
	}
	checkScenario(t, snap, scenarioWant(layout125, false))
	checkFamily(t, snap, FamilyIPv4, scenarioWant(layout125, false))
	if snap.HasFamily(FamilyIPv6) {
		t.Error("HasFamily(IPv6) without IPv6 rules")
	}
}

func TestUnreadableIsError(t *testing.T) {
	cases := map[string]func(f *fakeRunner){
		"truncated": func(f *fakeRunner) {
			k := "iptables-nft-save -c -t filter"
			f.out[k] = strings.TrimSuffix(f.out[k], "COMMIT\n# Completed on Mon Nov 30 12:11:06 2026\n")[:200]
		},
		"garbage": func(f *fakeRunner) { f.out["iptables-nft-save -c -t nat"] = "iptables: hello\n" },
		"ipv4 fails": func(f *fakeRunner) {
			k := "iptables-nft-save -c -t nat"
			delete(f.out, k)
			f.fail[k] = &CommandError{Cmd: k, Err: errors.New("exit status 4"), Stderr: "Could not fetch rule set generation id: Permission denied (you must be root)"}
		},
		"ipv6 permission denied": func(f *fakeRunner) {
			k := "ip6tables-nft-save -c -t filter"
			delete(f.out, k)
			f.fail[k] = &CommandError{Cmd: k, Err: errors.New("exit status 4"), Stderr: "Could not fetch rule set generation id: Permission denied (you must be root)"}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			f := iptablesNode(t, BackendNFT)
			mutate(f)
			r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
			snap, err := r.Read(context.Background())
			if err == nil {
				t.Fatalf("no error; snapshot %+v", snap)
			}
			if snap != nil {
				t.Errorf("snapshot returned with error %v", err)
			}
		})
	}
}

func TestNoRules(t *testing.T) {
	f := newFakeRunner()
	for _, fam := range ipFamilies {
		for _, b := range []Backend{BackendNFT, BackendLegacy} {
			f.out[saveCommand(fam, b)+" -c -t mangle"] = emptyMangle
			f.out[saveCommand(fam, b)+" -c -t nat"] = "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"
			f.out[saveCommand(fam, b)+" -c -t filter"] = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
		}
	}
	f.out["cat /proc/net/ip_tables_names"] = "nat\nfilter\nmangle\n"
	f.out["cat /proc/net/ip6_tables_names"] = ""
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	if _, err := r.Read(context.Background()); !errors.Is(err, ErrNoRules) {
		t.Fatalf("err %v, want ErrNoRules", err)
	}
}

func nftNode(t testing.TB) *fakeRunner { return nftNodeOf(t, nftJSONFixture) }

// nftNodeOf fakes a node whose kube-proxy runs in nftables mode, its listings those of files.
func nftNodeOf(t testing.TB, file func(v6 bool) string) *fakeRunner {
	f := newFakeRunner()
	for _, v6 := range []bool{false, true} {
		data, err := os.ReadFile(file(v6))
		if err != nil {
			t.Fatal(err)
		}
		fam := "ip"
		if v6 {
			fam = "ip6"
		}
		f.out["nft -j list table "+fam+" kube-proxy"] = string(data)
	}
	return f
}

func TestReadNFT(t *testing.T) {
	f := nftNode(t)
	r := NewReader(Options{Mode: ModeNFTables, Runner: f, LookPath: anyPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Mode != ModeNFTables || snap.Backend != "" || !slices.Equal(snap.Families, []string{FamilyIPv4, FamilyIPv6}) {
		t.Errorf("mode %s backend %q families %v", snap.Mode, snap.Backend, snap.Families)
	}
	checkFamily(t, snap, FamilyIPv4, nftWant(false))
	checkFamily(t, snap, FamilyIPv6, nftWant(true))

	// No ip6 table: IPv4 only, not an error.
	delete(f.out, "nft -j list table ip6 kube-proxy")
	f.fail["nft -j list table ip6 kube-proxy"] = &CommandError{Cmd: "nft", Err: errors.New("exit status 1"), Stderr: "Error: No such file or directory\nlist table ip6 kube-proxy\n               ^^^^^^^^^^\n"}
	r = NewReader(Options{Mode: ModeNFTables, Runner: f, LookPath: anyPath})
	snap, err = r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(snap.Families, []string{FamilyIPv4}) {
		t.Errorf("families %v", snap.Families)
	}
}

func proxyModeServer(t *testing.T, answer string, status int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/proxyMode" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/proxyMode"
}

func TestProxyMode(t *testing.T) {
	t.Run("ipvs", func(t *testing.T) {
		f := iptablesNode(t, BackendNFT)
		r := NewReader(Options{ProxyModeURL: proxyModeServer(t, "ipvs", 200), Runner: f, LookPath: anyPath})
		snap, err := r.Read(context.Background())
		if !errors.Is(err, ErrUnsupported) || snap == nil || snap.Mode != ModeIPVS {
			t.Fatalf("snap %+v err %v, want Mode ipvs and ErrUnsupported", snap, err)
		}
		if !equalState(snap.Port(ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}), PortState{}) {
			t.Error("IPVS snapshot reports port state")
		}
		if len(f.ran("")) != 0 {
			t.Errorf("ran %v in IPVS mode", f.ran(""))
		}
	})
	t.Run("nftables", func(t *testing.T) {
		r := NewReader(Options{ProxyModeURL: proxyModeServer(t, "nftables", 200), Runner: nftNode(t), LookPath: anyPath})
		snap, err := r.Read(context.Background())
		if err != nil || snap.Mode != ModeNFTables {
			t.Fatalf("snap %+v err %v", snap, err)
		}
	})
	t.Run("iptables", func(t *testing.T) {
		r := NewReader(Options{ProxyModeURL: proxyModeServer(t, "iptables\n", 200), Runner: iptablesNode(t, BackendLegacy), LookPath: anyPath})
		snap, err := r.Read(context.Background())
		if err != nil || snap.Mode != ModeIPTables || snap.Backend != BackendLegacy {
			t.Fatalf("snap %+v err %v", snap, err)
		}
	})
	t.Run("unreachable falls back to tables", func(t *testing.T) {
		f := nftNode(t)
		for _, fam := range ipFamilies {
			for _, b := range []Backend{BackendNFT, BackendLegacy} {
				f.out[saveCommand(fam, b)+" -c -t mangle"] = hintMangle
				f.out[saveCommand(fam, b)+" -c -t nat"] = "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"
				f.out[saveCommand(fam, b)+" -c -t filter"] = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
			}
		}
		f.out["cat /proc/net/ip_tables_names"] = ""
		f.out["cat /proc/net/ip6_tables_names"] = ""
		r := NewReader(Options{ProxyModeURL: proxyModeServer(t, "", 404), Runner: f, LookPath: anyPath})
		snap, err := r.Read(context.Background())
		if err != nil || snap.Mode != ModeNFTables {
			t.Fatalf("snap %+v err %v", snap, err)
		}
	})
	t.Run("ambiguous tables", func(t *testing.T) {
		f := iptablesNode(t, BackendNFT)
		for k, v := range nftNode(t).out {
			f.out[k] = v
		}
		r := NewReader(Options{Runner: f, LookPath: anyPath})
		if _, err := r.Read(context.Background()); !errors.Is(err, ErrAmbiguous) {
			t.Fatalf("err %v, want ErrAmbiguous", err)
		}
	})
	t.Run("ipvs by tables", func(t *testing.T) {
		f := iptablesNode(t, BackendNFT)
		f.out["iptables-nft-save -c -t nat"] = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-LOAD-BALANCER - [0:0]\n:KUBE-NODE-PORT - [0:0]\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n"
		f.fail["nft -j list table ip kube-proxy"] = &CommandError{Cmd: "nft", Err: errors.New("exit status 1"), Stderr: "Error: No such file or directory"}
		f.fail["nft -j list table ip6 kube-proxy"] = f.fail["nft -j list table ip kube-proxy"]
		r := NewReader(Options{Runner: f, LookPath: anyPath})
		snap, err := r.Read(context.Background())
		if !errors.Is(err, ErrUnsupported) || snap == nil || snap.Mode != ModeIPVS {
			t.Fatalf("snap %+v err %v", snap, err)
		}
	})
}

// Fifty concurrent scrapes: one save per table in flight, one read shared.
func TestConcurrentReadsShareOneSave(t *testing.T) {
	for _, ttl := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("CacheTTL=%v", ttl), func(t *testing.T) {
			f := iptablesNode(t, BackendNFT)
			f.delay = 20 * time.Millisecond
			r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, CacheTTL: ttl})
			var wg sync.WaitGroup
			errs := make(chan error, 50)
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					snap, err := r.Read(context.Background())
					if err == nil && !snap.Port(ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}).Drop {
						err = errors.New("checkout not dropped")
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for key, n := range f.maxInfl {
				if n > 1 {
					t.Errorf("%s: %d in flight at once", key, n)
				}
			}
			for _, key := range []string{"iptables-nft-save -c -t nat", "iptables-nft-save -c -t filter", "ip6tables-nft-save -c -t nat"} {
				n := f.calls[key]
				if ttl >= 0 && n != 1 {
					// With caching, the 50 reads are served by one save.
					t.Errorf("%s ran %d times, want 1", key, n)
				}
				if n < 1 || n > 50 {
					t.Errorf("%s ran %d times", key, n)
				}
			}
		})
	}
}

func TestCacheTTL(t *testing.T) {
	f := iptablesNode(t, BackendNFT)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, Now: clock})
	for range 3 {
		if _, err := r.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count("iptables-nft-save -c -t nat"); n != 1 {
		t.Errorf("nat saved %d times within the TTL, want 1", n)
	}
	mu.Lock()
	now = now.Add(3 * time.Second)
	mu.Unlock()
	if _, err := r.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("iptables-nft-save -c -t nat"); n != 2 {
		t.Errorf("nat saved %d times after the TTL, want 2", n)
	}
	// Backend detection is not repeated within DetectTTL.
	if n := f.count("iptables-nft-save -c -t mangle"); n != 1 {
		t.Errorf("mangle (detection) saved %d times, want 1", n)
	}
}

// A waiting scrape whose own context is alive retries when the leader's
// context ended the shared read. In a synctest bubble synctest.Wait returns once
// the leader is blocked inside its command and the follower waits for it: the
// order the test asserts is a fact, not what a sleep hoped for.
func TestLeaderCancelled(t *testing.T) { synctest.Test(t, testLeaderCancelled) }

func testLeaderCancelled(t *testing.T) {
	f := iptablesNode(t, BackendNFT)
	f.block = make(chan struct{})
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan error, 1)
	go func() {
		_, err := r.Read(leaderCtx)
		leaderDone <- err
	}()
	synctest.Wait() // the leader is inside a command
	if len(f.ran("")) == 0 {
		t.Fatal("leader never ran a command")
	}
	ran := len(f.ran(""))
	followerDone := make(chan error, 1)
	go func() {
		_, err := r.Read(context.Background())
		followerDone <- err
	}()
	synctest.Wait() // the follower waits for the leader's read
	if n := len(f.ran("")); n != ran {
		t.Fatalf("the follower ran %d commands of its own while the leader's read was in flight", n-ran)
	}
	cancel()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader err %v, want context.Canceled", err)
	}
	f.mu.Lock()
	close(f.block)
	f.block = nil
	f.mu.Unlock()
	if err := <-followerDone; err != nil {
		t.Fatalf("follower err %v", err)
	}
}

func TestLegacyOnlyExistingTablesSaved(t *testing.T) {
	// nft node without hint chains, where something created only the legacy
	// filter table: detection counts rules in both backends, and must not make the
	// kernel create legacy nat or mangle by saving them.
	f := iptablesNode(t, BackendNFT)
	for k := range f.out {
		if strings.HasSuffix(k, "-t mangle") {
			f.out[k] = emptyMangle
		}
	}
	f.out["cat /proc/net/ip_tables_names"] = "filter\n"
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Backend != BackendNFT {
		t.Errorf("backend %s, want nft", snap.Backend)
	}
	got := append(f.ran("iptables-legacy-save"), f.ran("ip6tables-legacy-save")...)
	if !slices.Equal(got, []string{"iptables-legacy-save -c -t filter"}) {
		t.Errorf("legacy saves %v, want only the existing filter table", got)
	}
}

func TestBinariesOutsidePATH(t *testing.T) {
	// PATH without /usr/sbin: the reader runs the tools by full path.
	base := iptablesNode(t, BackendNFT)
	f := newFakeRunner()
	for k, v := range base.out {
		if strings.HasPrefix(k, "cat ") {
			f.out[k] = v
		} else {
			f.out["/usr/sbin/"+k] = v
		}
	}
	lookPath := func(file string) (string, error) {
		if strings.HasPrefix(file, "/usr/sbin/") {
			return file, nil
		}
		return "", errors.New("not in PATH")
	}
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: lookPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkScenario(t, snap, mergedWant(BackendNFT))
	if n := f.count("/usr/sbin/iptables-nft-save -c -t nat"); n != 1 {
		t.Errorf("full-path nat save ran %d times", n)
	}

	r = NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: func(string) (string, error) { return "", errors.New("nowhere") }})
	if _, err := r.Read(context.Background()); !errors.Is(err, ErrNoRules) {
		t.Errorf("no binaries at all: err %v, want ErrNoRules", err)
	}
}

// fileRunner is a fakeRunner that also reads files (as ExecRunner does), from a map.
type fileRunner struct {
	*fakeRunner
	files map[string]string
	reads []string
}

func (f *fileRunner) ReadFile(_ context.Context, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, path)
	s, ok := f.files[path]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return []byte(s), nil
}

func TestLegacyTablesReadInProcess(t *testing.T) {
	for _, name := range []string{"present", "module not loaded"} {
		t.Run(name, func(t *testing.T) {
			base := iptablesNode(t, BackendLegacy)
			fr := &fileRunner{fakeRunner: base, files: map[string]string{}}
			for _, v6 := range []bool{false, true} {
				k := "cat " + legacyNamesFile(v6)
				if name == "present" {
					fr.files[legacyNamesFile(v6)] = base.out[k]
				}
				delete(base.out, k) // must not run cat
			}
			r := NewReader(Options{Mode: ModeIPTables, Runner: fr, LookPath: anyPath})
			snap, err := r.Read(context.Background())
			if name == "module not loaded" {
				// No legacy table exists: only nft is looked at, and it has no rules.
				if !errors.Is(err, ErrNoRules) {
					t.Fatalf("err %v, want ErrNoRules", err)
				}
				if got := append(base.ran("iptables-legacy-save"), base.ran("ip6tables-legacy-save")...); len(got) != 0 {
					t.Errorf("legacy saves ran: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if snap.Backend != BackendLegacy {
				t.Errorf("backend %s", snap.Backend)
			}
			if len(base.ran("cat")) != 0 || len(fr.reads) == 0 {
				t.Errorf("cat ran %v, in-process reads %v", base.ran("cat"), fr.reads)
			}
		})
	}
}

func TestExecRunnerReadFile(t *testing.T) {
	if _, err := (ExecRunner{}).ReadFile(context.Background(), "/nonexistent/ip_tables_names"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if b, err := (ExecRunner{}).ReadFile(context.Background(), "testdata/nft-ipv4.nft"); err != nil || len(b) == 0 {
		t.Errorf("ReadFile: %d bytes, %v", len(b), err)
	}
}
