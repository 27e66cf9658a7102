package kernelrules

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestChangeLog: the names of relevant transactions are kept per family for
// every transaction after the log's start; a transaction that cannot name
// what it changed, and names past the bound, move the start, and a question
// about an earlier generation is answered "cannot say".
func TestChangeLog(t *testing.T) {
	chain := func(n string) objName { return objName{table: "kube-proxy", name: n} }
	var l changeLog
	l.reset(10)
	if got, ok := l.since(10); !ok || len(got) != 0 {
		t.Errorf("nothing after the start: %v %v", got, ok)
	}
	if _, ok := l.since(9); ok {
		t.Error("before the start: named")
	}
	l.add(11, txNames{objs: []objName{chain("a"), chain("b")}})
	l.add(12, txNames{objs: []objName{chain("b"), {table: "kube-proxy", set: true, name: "b"}}})
	got, ok := l.since(10)
	if want := []objName{chain("a"), chain("b"), {table: "kube-proxy", set: true, name: "b"}}; !ok || !slices.Equal(got, want) {
		t.Errorf("since 10: %v %v, want %v", got, ok, want)
	}
	if got, ok := l.since(11); !ok || len(got) != 2 {
		t.Errorf("since 11: %v %v, want b twice (chain and set)", got, ok)
	}
	l.add(13, txNames{unnamed: true})
	if _, ok := l.since(12); ok {
		t.Error("a transaction that named nothing: earlier generations still named")
	}
	if got, ok := l.since(13); !ok || len(got) != 0 {
		t.Errorf("since the unnamed transaction: %v %v", got, ok)
	}
	// Past the bound the oldest go.
	for g := uint32(14); g < 14+maxLoggedNames; g++ {
		l.add(g, txNames{objs: []objName{chain(fmt.Sprint(g))}})
	}
	l.add(14+maxLoggedNames, txNames{objs: []objName{chain("x"), chain("y")}})
	if _, ok := l.since(14); ok {
		t.Error("names past the bound: the oldest still answered for")
	}
	// 14 and 15 went: after 15, 16 up to the last (maxLoggedNames-2 of one
	// name) and x and y.
	if got, ok := l.since(15); !ok || len(got) != maxLoggedNames {
		t.Errorf("since 15: %d names, %v; want %d", len(got), ok, maxLoggedNames)
	}
	if l.names > maxLoggedNames {
		t.Errorf("%d names kept, bound %d", l.names, maxLoggedNames)
	}
	// Generations wrap.
	l.reset(^uint32(0))
	l.add(0, txNames{objs: []objName{chain("w")}})
	if got, ok := l.since(^uint32(0)); !ok || len(got) != 1 {
		t.Errorf("across the wrap: %v %v", got, ok)
	}
}

// TestWatchNamesNFTables: in nftables mode the watcher names, per family,
// what a partial sync changed — a local endpoint's removal: the Service's
// local-* chain (flushed) and external-* chain (no longer jumping to it) and
// the drop added to no-endpoint-nodeports — and nothing for a sync that
// changed nothing read (remote endpoints moved, chains refilled as they
// were). A full rewrite of more objects than a transaction names leaves them
// unnamed.
func TestWatchNamesNFTables(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	before := map[bool][]genService{false: scenario(false), true: scenario(true)}
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(genNFTLayout(v6, before[v6], true)), "nft", "-f", "-")
	}
	r := NewReader(Options{Mode: ModeNFTables, Runner: NetnsRunner{Namespace: ns}, CacheTTL: -1})
	watch := startWatch(t, r)
	ctx := context.Background()
	if _, err := r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	waitBaseline(t, r)
	w := r.(*selector).currentWatch()
	sync := func(after map[bool][]genService, changed ...string) uint32 {
		t.Helper()
		gen, err := nftGeneration(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, v6 := range []bool{false, true} {
			in, _ := nftPartialSync(v6, true, before[v6], after[v6], changedSet(changed))
			nsRun(t, ns, []byte(in), "nft", "-f", "-")
		}
		before = after
		now, err := nftGeneration(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		if w.await(ctx, now, scopeOf(ModeNFTables, "")) == nil {
			t.Fatal("the watcher did not judge the sync")
		}
		return gen
	}
	watch.drain()
	gen := sync(map[bool][]genService{
		false: remoteChurn(before[false], 1, "kubelings/checkout", "kubelings/web"),
		true:  remoteChurn(before[true], 1, "kubelings/checkout", "kubelings/web"),
	}, "kubelings/checkout", "kubelings/web")
	for fi := range 2 {
		if got, ok := w.changedSince(fi, gen); !ok || len(got) != 0 {
			t.Errorf("family %d: remote endpoints moved: named %v (%v), want nothing", fi, got, ok)
		}
	}
	gen = sync(map[bool][]genService{false: noLocal(before[false], "kubelings/web"), true: noLocal(before[true], "kubelings/web")}, "kubelings/web")
	for fi, v6 := range []bool{false, true} {
		got, ok := w.changedSince(fi, gen)
		var names []string
		for _, o := range got {
			if o.table != "kube-proxy" {
				t.Errorf("family %d: %v named, not in table kube-proxy", fi, o)
			}
			kind := "chain"
			if o.set {
				kind = "map"
			}
			names = append(names, kind+" "+o.name)
		}
		slices.Sort(names)
		web := scenario(v6)[1]
		want := []string{"chain " + nftChainOf("external-", web), "chain " + nftChainOf("local-", web), "map no-endpoint-nodeports"}
		if !ok || !slices.Equal(names, want) {
			t.Errorf("family %d: web's local endpoints gone: named %v (%v), want %v", fi, names, ok, want)
		}
	}
	// Every Service's chains rewritten, past what one transaction names.
	var many []genService
	for i := range maxTxObjects {
		s := scenario(false)[1]
		s.name = fmt.Sprintf("many%d", i)
		s.clusterIP = fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1)
		s.nodePort = 0
		many = append(many, s)
	}
	gen = sync(map[bool][]genService{false: append(slices.Clone(before[false]), many...), true: before[true]}, namesOf(many)...)
	if got, ok := w.changedSince(0, gen); ok {
		t.Errorf("%d Services created: named %d objects, want them unnamed", len(many), len(got))
	}
	if got, ok := w.changedSince(1, gen); !ok || len(got) != 0 {
		t.Errorf("IPv6 untouched: named %v (%v)", got, ok)
	}
}

// nftChainOf is the name of s's chain with the prefix in nftables mode.
func nftChainOf(prefix string, s genService) string {
	for _, line := range strings.Split(genNFTLayout(strings.Contains(s.clusterIP, ":"), []genService{s}, true), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "chain "+prefix); ok {
			return prefix + strings.TrimSuffix(name, " {")
		}
	}
	return ""
}

func namesOf(svcs []genService) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.ns+"/"+s.name)
	}
	return out
}
