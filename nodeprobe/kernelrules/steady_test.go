package kernelrules

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingRunner is a NetnsRunner that counts the commands it runs; its
// change signals are the namespace's own (embedded NetnsRunner).
type countingRunner struct {
	NetnsRunner
	mu   sync.Mutex
	runs map[string]int
}

func (c *countingRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	c.mu.Lock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[strings.Join(append([]string{name}, args...), " ")]++
	c.mu.Unlock()
	return c.NetnsRunner.Run(ctx, name, args...)
}

// Stream counts like Run (the reader streams saves through it).
func (c *countingRunner) Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error {
	c.mu.Lock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[strings.Join(append([]string{name}, args...), " ")]++
	c.mu.Unlock()
	return c.NetnsRunner.Stream(ctx, fn, name, args...)
}

func (c *countingRunner) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

// dialDropped sends one TCP SYN to addr from inside ns; the drop rule eats it.
func dialDropped(t *testing.T, ns, addr string) {
	t.Helper()
	err := inNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second) // room for ARP on a loaded machine
		if err == nil {
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSteadyStateIPTables: on the real kernel, in a test namespace whose change
// signals are read through the Runner, nat is saved once while nothing changes,
// filter every read (a dropped packet's counter is seen at once), and a nat
// change is seen on the very next read.
func TestSteadyStateIPTables(t *testing.T) {
	requireRoot(t)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		t.Run(string(backend), func(t *testing.T) {
			ns := newNetns(t)
			restoreBothFamilies(t, ns, backend, func(v6 bool) string { return genRules(layout125, v6, scenario(v6)) })
			run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
			r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1})
			read := func() *Snapshot {
				t.Helper()
				snap, err := r.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return snap
			}
			nat := saveCommand(ipFamilies[0], backend) + " -c -t nat"
			filter := saveCommand(ipFamilies[0], backend) + " -c -t filter"
			nat6 := saveCommand(ipFamilies[1], backend) + " -c -t nat"

			snap := read()
			checkFamily(t, snap, FamilyIPv4, scenarioWant(layout125, false))
			for range 3 {
				snap = read()
			}
			checkFamily(t, snap, FamilyIPv4, scenarioWant(layout125, false))
			checkFamily(t, snap, FamilyIPv6, layoutWant(layout125, backend, true))
			if n, m := run.count(nat), run.count(nat6); n != 1 || m != 1 {
				t.Errorf("nothing changed: nat saved %d (IPv4) and %d (IPv6) times in 4 reads, want 1", n, m)
			}
			// Legacy saves filter every read; the nft backend keeps its parse
			// while the generation holds and dumps the drop counters over netlink.
			wantFilter := 4
			if backend == BackendNFT {
				wantFilter = 1
			}
			if n := run.count(filter); n != wantFilter {
				t.Errorf("filter saved %d times in 4 reads, want %d", n, wantFilter)
			}

			// One SYN from outside to the NodePort is dropped in filter: the next
			// read has its counter without any rule change.
			peer := newNetns(t)
			nsRun(t, ns, nil, "ip", "link", "add", "lt-in", "type", "veth", "peer", "name", "lt-out", "netns", peer)
			nsRun(t, ns, nil, "ip", "addr", "add", "10.99.0.2/24", "dev", "lt-in")
			nsRun(t, ns, nil, "ip", "link", "set", "lt-in", "up")
			nsRun(t, peer, nil, "ip", "addr", "add", "10.99.0.1/24", "dev", "lt-out")
			nsRun(t, peer, nil, "ip", "link", "set", "lt-out", "up")
			dialDropped(t, peer, "10.99.0.2:30090")
			snap = read()
			checkout := ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
			// (At least 8: the SYN and any retransmission within the dial's timeout.)
			if d := snap.Family(checkout, FamilyIPv4).Drops; len(d) != 3 || d[0].Address != "" || d[0].Packets < 8 {
				t.Errorf("NodePort drop counter after one dropped SYN: %+v, want 7+1 packets or more", d)
			}
			if n := run.count(filter); n != wantFilter+1 && backend == BackendLegacy || n != wantFilter && backend == BackendNFT {
				t.Errorf("filter saved %d times after the packet", n)
			}

			// Traffic moves nat's counters (a local connection to the LB IP
			// is DNATed in nat OUTPUT), not its rules: nat is not saved again.
			nsRun(t, ns, nil, "ip", "addr", "add", "192.0.2.10/32", "dev", "lo")
			natBefore := stripComments(nsRun(t, ns, nil, saveCommand(ipFamilies[0], backend), "-c", "-t", "nat"))
			dialDropped(t, ns, "192.0.2.10:80")
			if natAfter := stripComments(nsRun(t, ns, nil, saveCommand(ipFamilies[0], backend), "-c", "-t", "nat")); natAfter == natBefore {
				t.Fatal("the connection moved no nat counter: the test proves nothing")
			}
			read()
			if n := run.count(nat); n != 1 {
				t.Errorf("nat counters moved, rules did not: nat saved %d times, want 1", n)
			}
			// Filter's counters are read every time: zeroed, the next read says 0.
			// (With the nft backend zeroing rewrites the rules, a new generation:
			// nat may be saved again, which is only slower.)
			nsRun(t, ns, nil, "iptables-"+string(backend), "-t", "filter", "-Z", "KUBE-EXTERNAL-SERVICES")
			snap = read()
			if st := snap.Family(checkout, FamilyIPv4); !st.Drop || len(st.Drops) != 3 || st.DropPackets != 0 {
				t.Errorf("checkout after its counters were zeroed: %+v, want 3 drops, 0 packets", st)
			}
			natSaves := run.count(nat)
			if backend == BackendLegacy && natSaves != 1 {
				t.Errorf("legacy filter counters zeroed: nat saved %d times, want 1", natSaves)
			}

			// kube-proxy removes web's local endpoints: nat changes.
			web := scenario(false)[1]
			nsRun(t, ns, nil, "iptables-"+string(backend), "-t", "nat", "-F", web.chain("KUBE-SVL-"))
			snap = read()
			if n := run.count(nat); n != natSaves+1 {
				t.Errorf("nat changed: saved %d times, want %d", n, natSaves+1)
			}
			if got := snap.Family(web.servicePort(), FamilyIPv4).LocalEndpoints; got != 0 {
				t.Errorf("web after its local endpoints went: %d local endpoints, want 0", got)
			}
			read()
			if n := run.count(nat); n != natSaves+1 {
				t.Errorf("no change since: nat saved %d times, want %d", n, natSaves+1)
			}
		})
	}
}

// TestSteadyStateNFTables: nftables mode lists its table once while the
// generation stays, and again on the next read after a change.
func TestSteadyStateNFTables(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(genNFT(v6, scenario(v6))), "nft", "-f", "-")
	}
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	r := NewReader(Options{Mode: ModeNFTables, Runner: run, CacheTTL: -1})
	var snap *Snapshot
	for range 3 {
		var err error
		if snap, err = r.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	checkFamily(t, snap, FamilyIPv4, nftWant(false))
	checkFamily(t, snap, FamilyIPv6, nftWant(true))
	list := "nft -j list table ip kube-proxy"
	if n := run.count(list); n != 1 {
		t.Errorf("nothing changed: table listed %d times in 3 reads, want 1", n)
	}
	// web loses its local endpoints: its local chain is emptied.
	web := scenario(false)[1]
	var chain string
	for _, line := range strings.Split(string(nsRun(t, ns, nil, "nft", "list", "chains", "ip")), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "chain" && strings.HasPrefix(f[1], "local-") && strings.HasSuffix(f[1], "-"+strings.Join([]string{web.ns, web.name, web.proto, web.port}, "/")) {
			chain = f[1]
		}
	}
	if chain == "" {
		t.Fatal("web's local- chain not found")
	}
	nsRun(t, ns, nil, "nft", "flush", "chain", "ip", "kube-proxy", chain)
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := run.count(list); n != 2 {
		t.Errorf("ruleset changed: table listed %d times, want 2", n)
	}
	if got := snap.Family(web.servicePort(), FamilyIPv4).LocalEndpoints; got != 0 {
		t.Errorf("web after its local chain was flushed: %d local endpoints, want 0", got)
	}
}

// signalRunner is a fake node whose change signal the test sets.
type signalRunner struct {
	*fakeRunner
	gen    uint32
	genErr error
}

func (s *signalRunner) NFTablesGeneration(context.Context) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.genErr
}

func (s *signalRunner) LegacyTableInfo(context.Context, bool, string) (uint64, error) {
	return 0, errors.New("no legacy here")
}

func (s *signalRunner) NFTablesChainRules(context.Context, bool, string, string) (uint32, []ChainRule, error) {
	return 0, nil, errors.New("no counters here")
}

func TestChangeSignalGatesNAT(t *testing.T) {
	f := &signalRunner{fakeRunner: iptablesNode(t, BackendNFT)}
	var logs bytes.Buffer
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, CacheTTL: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	read := func() {
		t.Helper()
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		checkScenario(t, snap, mergedWant(BackendNFT))
	}
	nat, filter := "iptables-nft-save -c -t nat", "iptables-nft-save -c -t filter"
	read()
	read()
	if n, m := f.count(nat), f.count(filter); n != 1 || m != 2 {
		t.Errorf("same generation: nat saved %d, filter %d times in 2 reads; want 1, 2", n, m)
	}
	f.mu.Lock()
	f.gen++
	f.mu.Unlock()
	read()
	if n := f.count(nat); n != 2 {
		t.Errorf("new generation: nat saved %d times, want 2", n)
	}
	// Unreadable: never guessed unchanged; said once in the log.
	f.mu.Lock()
	f.genErr = errors.New("netlink: permission denied")
	f.mu.Unlock()
	read()
	read()
	if n := f.count(nat); n != 4 {
		t.Errorf("signal unreadable: nat saved %d times, want 4", n)
	}
	if n := strings.Count(logs.String(), "cannot read the ruleset change signal"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
	// A failed read forgets what was kept.
	f.mu.Lock()
	f.genErr = nil
	f.mu.Unlock()
	read()
	f.mu.Lock()
	f.fail[filter] = &CommandError{Cmd: filter, Err: errors.New("exit status 4"), Stderr: "broken"}
	f.mu.Unlock()
	if _, err := r.Read(context.Background()); err == nil {
		t.Fatal("broken filter read without error")
	}
	f.mu.Lock()
	delete(f.fail, filter)
	f.mu.Unlock()
	before := f.count(nat)
	read()
	if n := f.count(nat); n != before+1 {
		t.Errorf("after a failed read: nat saved %d more times, want 1", n-before)
	}
}

// ≤1.24 drops live in nat with counters that move without a rule change: nat
// is saved every read there.
func TestNATDropsNotKept(t *testing.T) {
	f := &signalRunner{fakeRunner: newFakeRunner()}
	for _, v6 := range []bool{false, true} {
		fam := ipFamilies[0]
		if v6 {
			fam = ipFamilies[1]
		}
		nat, filter := splitTables(t, saveFixture(layout124, v6, BackendNFT))
		b := saveCommand(fam, BackendNFT)
		f.out[b+" -c -t nat"], f.out[b+" -c -t filter"], f.out[b+" -c -t mangle"] = nat, filter, hintMangle
	}
	f.out["cat /proc/net/ip_tables_names"], f.out["cat /proc/net/ip6_tables_names"] = "", ""
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, CacheTTL: -1})
	for range 2 {
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		checkFamily(t, snap, FamilyIPv4, layoutWant(layout124, BackendNFT, false))
	}
	if n := f.count("iptables-nft-save -c -t nat"); n != 2 {
		t.Errorf("nat with counted drops saved %d times in 2 reads, want 2", n)
	}
}

// TestLegacyVerifyBound: a legacy nat change that keeps the entry count and
// the size (one DNAT target rewritten) is not in GET_INFO; nat is read again
// once LegacyVerify has passed (and kept again after), and on every read with
// a negative LegacyVerify.
func TestLegacyVerifyBound(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	restoreBothFamilies(t, ns, BackendLegacy, func(v6 bool) string { return genRules(layout125, v6, scenario(v6)) })
	checkout := scenario(false)[0]
	sep := checkout.sepChain(checkout.eps[0])
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	bounded := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, Now: clock})
	exact := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1, LegacyVerify: -1})
	nat := "iptables-legacy-save -c -t nat"
	read := func(r Reader) int {
		t.Helper()
		before := run.count(nat)
		if _, err := r.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
		return run.count(nat) - before
	}
	read(bounded)
	read(exact)
	if n, m := read(bounded), read(exact); n != 0 || m != 1 {
		t.Fatalf("nothing changed: nat saved %d and %d times, want 0 (kept) and 1 (LegacyVerify < 0: every read)", n, m)
	}
	nsRun(t, ns, nil, "iptables-legacy", "-t", "nat", "-R", sep, "2", "-m", "comment", "--comment", "kubelings/checkout:http",
		"-m", "tcp", "-p", "tcp", "-j", "DNAT", "--to-destination", "10.244.2.9:8080")
	if m := read(exact); m != 1 {
		t.Errorf("same-size change, LegacyVerify < 0: nat saved %d times on the next read, want 1", m)
	}
	if n := read(bounded); n != 0 {
		t.Errorf("same-size change within LegacyVerify: nat saved %d times, want 0 (the documented bound)", n)
	}
	mu.Lock()
	now = now.Add(5 * time.Minute) // the default LegacyVerify
	mu.Unlock()
	if n := read(bounded); n != 1 {
		t.Errorf("same-size change after LegacyVerify: nat saved %d times, want 1", n)
	}
	if n := read(bounded); n != 0 {
		t.Errorf("just read again: nat saved %d times, want 0 (kept for another LegacyVerify)", n)
	}
}

// TestSignalsPerNamespace: the generation is per network namespace, so it must
// be read where kube-proxy writes. ExecRunner reads the calling thread's
// namespace (the exporter's own: the host's), NetnsRunner the one it names; a
// change in one is seen there and not in the other.
func TestSignalsPerNamespace(t *testing.T) {
	requireRoot(t)
	a, b := newNetns(t), newNetns(t)
	ctx := context.Background()
	var ownBefore, ownAfter uint32
	// ExecRunner inside a (on a thread switched there, as the exporter's
	// process lives in the host's namespace).
	err := inNetns(a, func() error {
		var err error
		ownBefore, err = ExecRunner{}.NFTablesGeneration(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	bBefore, err := NetnsRunner{Namespace: b}.NFTablesGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nsRun(t, a, nil, "nft", "add", "table", "ip", "lt-signal")
	if err := inNetns(a, func() error {
		var err error
		ownAfter, err = ExecRunner{}.NFTablesGeneration(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bAfter, err := NetnsRunner{Namespace: b}.NFTablesGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ownAfter == ownBefore {
		t.Errorf("a table added in the namespace: ExecRunner's generation stayed %d", ownBefore)
	}
	if bAfter != bBefore {
		t.Errorf("a table added elsewhere moved this namespace's generation %d → %d", bBefore, bAfter)
	}
	if g, err := (NetnsRunner{Namespace: a}).NFTablesGeneration(ctx); err != nil || g != ownAfter {
		t.Errorf("NetnsRunner{a} generation %d (%v), ExecRunner inside a %d", g, err, ownAfter)
	}
}
