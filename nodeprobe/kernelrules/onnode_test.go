package kernelrules

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests and the benchmark in this file (and onnode_watch_test.go) read the
// rules of the network namespace they run in, written by a real kube-proxy:
// e2e's TestScaleRules (e2e/scale_rules_test.go) and
// TestRulesModelEqualsFullReadUnderChurn (e2e/drift_test.go) build this
// package's test binary and run it in their cluster's nodes' namespaces, with
// -rules.on-node. They use the reader exactly as the exporter does
// (ExecRunner, its change signals in the process's own namespace, the
// /proxyMode URL of kube-proxy on 127.0.0.1:10249), with the snapshot cache
// off so that every Read reads.

// The test binary's flags with which e2e's TestScaleRules runs it on a node.
var (
	onNodeFlag = flag.Bool("rules.on-node", false,
		"read the rules of the network namespace the test runs in (a node of the e2e cluster, where TestScaleRules and TestRulesModelEqualsFullReadUnderChurn run it)")
	expectFlag = flag.String("rules.expect", "",
		`the counts to find on the node: Service ports with rules, with a drop, with local endpoints ("ports=10000,drops=9000,local=1000")`)
	expectWaitFlag = flag.Duration("rules.expect-wait", 0,
		"how long to wait at most for -rules.expect's counts, reading again every few seconds (a kube-proxy still syncing)")
	expectServicesFlag = flag.String("rules.expect-services", "",
		`the Services as e2e names them ("ns/s%05d:port:N"), to name those missing when the counts are not reached`)
	watchFlag = flag.String("rules.watch", "", `the Service port TestOnNodeWatchDrop follows ("ns/name:port")`)
)

// onNode skips unless started by the e2e harness on a node: outside one there
// is no kube-proxy whose rules to read (the e2e suite, which CI runs, runs them).
func onNode(tb testing.TB) {
	tb.Helper()
	if !*onNodeFlag {
		tb.Skip("reads a real kube-proxy's rules in the namespace it runs in; e2e TestScaleRules and TestRulesModelEqualsFullReadUnderChurn run it on their nodes (-rules.on-node)")
	}
}

// nodeReader is the exporter's reader (cmd/localtraffic-exporter: selectReader)
// without the snapshot cache; opts may change it.
func nodeReader(opts func(*Options)) Reader {
	o := Options{ProxyModeURL: "http://127.0.0.1:10249/proxyMode", CacheTTL: -1}
	if opts != nil {
		opts(&o)
	}
	return NewReader(o)
}

// fullReader reads every table on every Read (a Runner without change signals).
func fullReader() Reader {
	return nodeReader(func(o *Options) { o.Runner = hideSignals{ExecRunner{}} })
}

// snapshotDiff says how two snapshots' rules differ ("" when equal); the read
// time and duration are not compared.
func snapshotDiff(a, b *Snapshot) string {
	if a.Mode != b.Mode || a.Backend != b.Backend || !slices.Equal(a.Families, b.Families) {
		return fmt.Sprintf("mode/backend/families %s/%s/%v vs %s/%s/%v", a.Mode, a.Backend, a.Families, b.Mode, b.Backend, b.Families)
	}
	var diffs []string
	for i, fa := range a.fams {
		fb := b.fams[i]
		for k, sa := range fa.ports {
			sb, ok := fb.ports[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s: only in the first", fa.name, k[:]))
				continue
			}
			x, y := *sa, *sb
			if len(x.Drops) == 0 {
				x.Drops = nil
			}
			if len(y.Drops) == 0 {
				y.Drops = nil
			}
			if !reflect.DeepEqual(x, y) {
				diffs = append(diffs, fmt.Sprintf("%s %s: %+v vs %+v", fa.name, k[:], x, y))
			}
		}
		for k := range fb.ports {
			if _, ok := fa.ports[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s: only in the second", fa.name, k[:]))
			}
		}
	}
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("… %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "\n")
}

// counts is what e2e expects on the node: Service ports with rules, with a drop,
// with local endpoints (-rules.expect="ports=10000,drops=9000,local=1000").
type counts struct{ ports, drops, local int }

func countSnapshot(s *Snapshot) counts {
	c := counts{ports: s.Len()}
	for _, f := range s.fams {
		for _, st := range f.ports {
			if st.Drop {
				c.drops++
			}
			if st.LocalEndpoints > 0 {
				c.local++
			}
		}
	}
	return c
}

func expectedCounts(tb testing.TB) (counts, bool) {
	v := *expectFlag
	if v == "" {
		return counts{}, false
	}
	var c counts
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(val)
		if err != nil {
			tb.Fatalf("-rules.expect %q: %v", v, err)
		}
		switch k {
		case "ports":
			c.ports = n
		case "drops":
			c.drops = n
		case "local":
			c.local = n
		default:
			tb.Fatalf("-rules.expect %q: unknown %q", v, k)
		}
	}
	return c, true
}

// atLeast: the node's counts include the expected Services (kube-proxy's own
// and the harness's few others come on top).
func (c counts) atLeast(want counts) bool {
	return c.ports >= want.ports && c.drops >= want.drops && c.local >= want.local
}

// TestOnNodeSteadyEqualsFull: at rest, the steady-state reads (nat kept by its
// change signal) give the very snapshot a full read gives, with the counts the
// harness created.
//
// With -rules.expect-wait it first waits that long at most for the counts,
// reading again every few seconds (a kube-proxy still syncing), and with
// -rules.expect-services="ns/s%05d:port:N" (the Services as named by e2e) it
// names those missing.
func TestOnNodeSteadyEqualsFull(t *testing.T) {
	onNode(t)
	ctx := context.Background()
	steady, full := nodeReader(nil), fullReader()
	want, wantOK := expectedCounts(t)
	wait := *expectWaitFlag
	start := time.Now()
	for {
		snap, err := steady.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := countSnapshot(snap)
		if !wantOK || got.atLeast(want) {
			break
		}
		if time.Since(start) >= wait {
			t.Errorf("counts %+v, want at least %+v; missing: %s", got, want, missingServices(t, snap))
			break
		}
		t.Logf("after %s: counts %+v, want at least %+v; reading again", time.Since(start).Round(time.Second), got, want)
		time.Sleep(5 * time.Second)
	}
	var snap *Snapshot
	for range 3 { // steady reads (nothing changed since the last)
		var err error
		if snap, err = steady.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := full.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := snapshotDiff(snap, ref); d != "" {
		t.Errorf("steady-state snapshot differs from a full read:\n%s", d)
	}
	got := countSnapshot(snap)
	t.Logf("mode %s backend %q families %v: %d ports, %d dropping, %d with local endpoints", snap.Mode, snap.Backend, snap.Families, got.ports, got.drops, got.local)
	if wantOK && !got.atLeast(want) {
		t.Errorf("counts %+v, want at least %+v", got, want)
	}
}

// missingServices names (at most 10 of) the Services -rules.expect-services
// lists that have no state in snap.
func missingServices(t *testing.T, snap *Snapshot) string {
	spec := *expectServicesFlag
	nsFmt, rest, ok := strings.Cut(spec, ":")
	port, count, ok2 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(count)
	if !ok || !ok2 || err != nil {
		return "(-rules.expect-services not set)"
	}
	ns, nameFmt, _ := strings.Cut(nsFmt, "/")
	var missing []string
	total := 0
	for i := range n {
		sp := ServicePort{Namespace: ns, Name: fmt.Sprintf(nameFmt, i), Port: port, Protocol: "TCP"}
		if !snap.Family(sp, FamilyIPv4).Programmed {
			total++
			if len(missing) < 10 {
				missing = append(missing, sp.String())
			}
		}
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(missing, " "))
}

// TestOnNodeWatchDrop follows one Service port (-rules.watch="ns/name:port")
// with steady-state reads back to back. It prints "lt-watch: ready" once the
// port has local endpoints and no drop; the harness then removes them and
// waits for "lt-watch: drop <unix ns> reads=<n>", printed by the first read whose
// snapshot shows the drop. That snapshot must equal a full read's.
func TestOnNodeWatchDrop(t *testing.T) {
	onNode(t)
	spec := *watchFlag
	nsName, port, ok := strings.Cut(spec, ":")
	ns, name, ok2 := strings.Cut(nsName, "/")
	if !ok || !ok2 {
		t.Fatalf("-rules.watch %q: want ns/name:port", spec)
	}
	sp := ServicePort{Namespace: ns, Name: name, Port: port, Protocol: "TCP"}
	ctx := context.Background()
	r := nodeReader(nil)
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "lt-watch: "+format+"\n", args...)
		out.Flush()
	}
	deadline := time.Now().Add(3 * time.Minute)
	ready := false
	reads := 0
	for time.Now().Before(deadline) {
		snap, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := snap.Family(sp, FamilyIPv4)
		switch {
		case !ready && st.LocalEndpoints > 0 && !st.Drop:
			ready = true
			say("ready %d", time.Now().UnixNano())
		case ready && st.Drop:
			say("drop %d reads=%d", time.Now().UnixNano(), reads)
			ref, err := fullReader().Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := snapshotDiff(snap, ref); d != "" {
				t.Errorf("steady-state snapshot after the change differs from a full read:\n%s", d)
			}
			return
		}
		if ready {
			reads++
		}
	}
	t.Fatalf("%s: no drop within 3 minutes (ready %v, %d reads)", sp, ready, reads)
}

// BenchmarkOnNode: on a node of the e2e cluster, in one run, one bare save of
// IPv4 nat + filter (the reference: what reading the rules costs with the
// iptables tools alone), one steady-state Read of the exporter's reader
// (nothing changed since the last read), the same on a 15 s scrape interval
// (the reader's clock moved 15 s per read, so the legacy backend's full
// comparison runs every 8th read), and one full Read (every table saved). Each
// read sub-benchmark times a bare save before each of its reads (off its own
// clock) and reports its total over theirs: x-of-save. In nftables mode the
// reference is `nft -j list table ip kube-proxy`, what the full read lists.
func BenchmarkOnNode(b *testing.B) {
	onNode(b)
	ctx := context.Background()
	probe, err := nodeReader(nil).Read(ctx)
	if err != nil {
		b.Fatal(err)
	}
	run := ExecRunner{}
	save := func(b *testing.B) {
		var cmds [][]string
		if probe.Mode == ModeNFTables {
			cmds = [][]string{{"nft", "-j", "list", "table", "ip", "kube-proxy"}}
		} else {
			bin := saveCommand(ipFamilies[0], probe.Backend)
			cmds = [][]string{{bin, "-c", "-t", "nat"}, {bin, "-c", "-t", "filter"}}
		}
		for _, c := range cmds {
			if _, err := run.Run(ctx, c[0], c[1:]...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("mode %s, backend %q, %d Service ports", probe.Mode, probe.Backend, probe.Len())
	b.Run("save", func(b *testing.B) {
		for b.Loop() {
			save(b)
		}
	})
	var clock time.Time
	readers := []struct {
		name string
		r    Reader
	}{
		{"steady", nodeReader(nil)},
		{"steady-30s", nodeReader(func(o *Options) { o.Now = func() time.Time { return clock } })},
		{"full", fullReader()},
	}
	for _, rd := range readers {
		b.Run(rd.name, func(b *testing.B) {
			if _, err := rd.r.Read(ctx); err != nil { // detection and what is kept, warm
				b.Fatal(err)
			}
			var saves, reads time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				t0 := time.Now()
				save(b)
				saves += time.Since(t0)
				clock = clock.Add(30 * time.Second)
				b.StartTimer()
				t1 := time.Now()
				snap, err := rd.r.Read(ctx)
				reads += time.Since(t1)
				if err != nil || snap.Len() != probe.Len() {
					b.Fatalf("read: %v, %d ports (first read %d)", err, snap.Len(), probe.Len())
				}
			}
			b.ReportMetric(float64(reads)/float64(saves), "x-of-save")
			b.ReportMetric(float64(saves.Milliseconds())/float64(b.N), "save-ms")
		})
	}
}
