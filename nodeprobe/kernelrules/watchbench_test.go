package kernelrules

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTimes is this process's and its waited-for children's CPU time.
func cpuTimes(tb testing.TB) (self, children time.Duration) {
	tb.Helper()
	var s, c syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s); err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c); err != nil {
		tb.Fatal(err)
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

// nftClusterOf is clusterOf with a NodePort of its own per Service: an
// nftables map has one element per key (the iptables layout shares some).
func nftClusterOf(n int) []genService {
	svcs := clusterOf(n, false)
	for i := range svcs {
		if svcs[i].nodePort != 0 {
			svcs[i].nodePort = 20000 + i
		}
	}
	return svcs
}

// churned names the Services a benchmark sync moves a remote endpoint of:
// ten with a local endpoint (a NodePort Service with Local policy, i%4 == 2),
// whose local chains kube-proxy rewrites unchanged.
func churned(svcs []genService) []string {
	var out []string
	for i, s := range svcs {
		if i%4 == 2 {
			out = append(out, s.ns+"/"+s.name)
		}
		if len(out) == 10 {
			break
		}
	}
	return out
}

// BenchmarkChangeNotifications loads the generated ruleset of 1,000 and of
// 10,000 Services (bigCluster's shape, IPv4) into a namespace (root), for the
// nft backend and for nftables mode, and in each
// iteration applies one kube-proxy partial sync that changes nothing a
// Snapshot depends on (ten Services' remote endpoints move; in iptables mode
// every top-level chain is refilled in another order), then reads with two
// readers, in the same loop: one without Watch (generation-read: the
// generation moved, so it saves again, as every read did before change
// notifications) and one with Watch running (notified-read: the watcher saw
// nothing relevant, nothing is saved; the generation alone vouched for the
// reads before Watch, docs/performance.md "Steady-state reads"). Per sync it
// reports the sync's wall
// time, the CPU of the restore or nft process (kube-proxy's child:
// kubeproxy-child-cpu-ms) and of this process while the watcher took the
// sync's notifications in (watcher-cpu-ms: everything the test process did
// from the restore's start until the watcher had accounted for its
// generation, so an upper bound; exec-cpu-ms is what starting a command
// alone costs it, measured beside, and watcher-less-exec/child the ratio
// without it), the notifications decoded, and the two reads' times and saves. Run it with -benchtime 3x or more:
//
//	go test -run '^$' -bench BenchmarkChangeNotifications -benchtime 3x ./nodeprobe/kernelrules/
func BenchmarkChangeNotifications(b *testing.B) {
	requireRoot(b)
	for _, mode := range []Mode{ModeIPTables, ModeNFTables} {
		name := "nft-backend"
		if mode == ModeNFTables {
			name = "nftables"
		}
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) { benchNotifications(b, mode, n) })
		}
	}
}

func benchNotifications(b *testing.B, mode Mode, size int) {
	ns := newNetns(b)
	svcs := clusterOf(size, false)
	if mode == ModeNFTables {
		svcs = nftClusterOf(size)
		nsRun(b, ns, []byte(genNFTLayout(false, svcs, true)), "nft", "-f", "-")
	} else {
		nsRun(b, ns, []byte(genRules(layout125, false, svcs)), xtablesCmd(false, BackendNFT, "restore"))
	}
	ctx := context.Background()
	genRun := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	notRun := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	generation := NewReader(Options{Mode: mode, Runner: genRun, CacheTTL: -1})
	notified := NewReader(Options{Mode: mode, Runner: notRun, CacheTTL: -1})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		notified.(Watcher).Watch(wctx, func(bool) {})
	}()
	defer func() { cancel(); <-done }()
	for _, r := range []Reader{generation, notified} {
		if _, err := r.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
	waitBaseline(b, notified)
	if _, err := notified.Read(ctx); err != nil {
		b.Fatal(err)
	}
	w := notified.(*selector).currentWatch()
	scope := scopeOf(mode, BackendNFT)
	if mode == ModeNFTables {
		scope = scopeOf(mode, "")
	}
	changed := changedSet(churned(svcs))
	var syncWall, childCPU, watchCPU, execCPU, genRead, notRead time.Duration
	var genSaves, notSaves int
	msgs0, tx0, lost0 := w.messages.Load(), w.transactions.Load(), w.losses.Load()
	round := 0
	for b.Loop() {
		round++
		after := remoteChurn(svcs, round, churned(svcs)...)
		var input []byte
		cmd := []string{"nft", "-f", "-"}
		if mode == ModeNFTables {
			in, _ := nftPartialSync(false, true, svcs, after, changed)
			input = []byte(in)
		} else {
			input = []byte(iptPartialSync(false, svcs, shuffled(after, uint64(round)), changed))
			cmd = []string{xtablesCmd(false, BackendNFT, "restore"), "--noflush"}
		}
		svcs = after
		// What starting a command through `ip netns exec` costs this process
		// (fork, exec, wait): part of the window below that is not the watcher's.
		runtime.GC()
		e0, _ := cpuTimes(b)
		nsRun(b, ns, nil, "true")
		e1, _ := cpuTimes(b)
		execCPU += e1 - e0
		runtime.GC()
		self0, child0 := cpuTimes(b)
		t0 := time.Now()
		nsRun(b, ns, input, cmd[0], cmd[1:]...)
		gen, err := notRun.NFTablesGeneration(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if w.await(ctx, gen, scope) == nil {
			b.Fatalf("the watcher did not account for generation %d", gen)
		}
		t1 := time.Now()
		self1, child1 := cpuTimes(b)
		syncWall += t1.Sub(t0)
		childCPU += child1 - child0
		watchCPU += self1 - self0
		for _, rd := range []struct {
			r     Reader
			run   *countingRunner
			took  *time.Duration
			saves *int
		}{{generation, genRun, &genRead, &genSaves}, {notified, notRun, &notRead, &notSaves}} {
			s0 := rd.run.saves()
			t := time.Now()
			snap, err := rd.r.Read(ctx)
			*rd.took += time.Since(t)
			if err != nil || snap.Len() < size {
				b.Fatalf("read: %v, %d ports", err, snap.Len())
			}
			*rd.saves += rd.run.saves() - s0
		}
	}
	n := float64(round)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(syncWall), "sync-ms")
	b.ReportMetric(ms(childCPU), "kubeproxy-child-cpu-ms")
	b.ReportMetric(ms(watchCPU), "watcher-cpu-ms")
	b.ReportMetric(ms(execCPU), "exec-cpu-ms")
	b.ReportMetric(float64(watchCPU)/float64(childCPU), "watcher/child")
	b.ReportMetric(float64(watchCPU-execCPU)/float64(childCPU), "watcher-less-exec/child")
	b.ReportMetric(float64(w.messages.Load()-msgs0)/n, "notifications/sync")
	b.ReportMetric(float64(w.transactions.Load()-tx0)/n, "transactions/sync")
	b.ReportMetric(float64(w.losses.Load()-lost0), "losses")
	b.ReportMetric(ms(genRead), "generation-read-ms")
	b.ReportMetric(ms(notRead), "notified-read-ms")
	b.ReportMetric(float64(notRead)/float64(genRead), "notified/generation")
	b.ReportMetric(float64(genSaves)/n, "generation-saves/read")
	b.ReportMetric(float64(notSaves)/n, "notified-saves/read")
}

// BenchmarkRelevantRead: the Read after a relevant change in nftables mode,
// on the generated ruleset of 1,000 and of 10,000 Services (nftClusterOf,
// IPv4): each iteration one kube-proxy partial sync in which one Service loses
// its local endpoint (its local-* chain flushed, its external-* chain
// rewritten, a drop added to no-endpoint-nodeports; another Service each
// time), then a Read by a reader without Watch (whole: the generation moved,
// it lists the table, as a relevant change made every reader do before reads
// in part) and one with Watch running (targeted: it reads the objects the
// notifications named, over netlink), in the same loop; both must equal. Per
// change it reports each Read's wall time and CPU (this process and its
// children: nft), the CPU of the sync's nft (kube-proxy's child), the netlink
// requests of the targeted Read and the part of it that computes every port's
// state from the model (model-ports), and what nft itself costs for one chain and
// one map (`nft -j list chain`, `nft -j list map`: it fetches its cache
// first). kube-proxy deletes the flushed chain a transaction later; that, and
// the Reads after it, are outside the measured part.
//
// The iptables-nft/* runs do the same in iptables mode with the nft backend on
// clusterOf's ruleset (bigCluster's shape): each iteration a Service's local
// endpoints move to other pods (moved: only its KUBE-SVL is rewritten) or go
// (lost: KUBE-SVL deleted, a drop added to filter), written with
// iptables-nft-restore --noflush as kube-proxy's partial sync writes them; the
// whole Read saves nat and filter, the targeted one lists the changed Service
// chains and saves filter only when filter changed.
//
//	go test -run '^$' -bench BenchmarkRelevantRead -benchtime 5x ./nodeprobe/kernelrules/
func BenchmarkRelevantRead(b *testing.B) {
	requireRoot(b)
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("nftables/%d", n), func(b *testing.B) { benchRelevantRead(b, n) })
		for _, lost := range []bool{false, true} {
			kind := "moved"
			if lost {
				kind = "lost"
			}
			b.Run(fmt.Sprintf("iptables-nft-%s/%d", kind, n), func(b *testing.B) { benchRelevantReadIPT(b, n, lost) })
		}
	}
}

func benchRelevantReadIPT(b *testing.B, size int, lost bool) {
	ns := newNetns(b)
	svcs := clusterOf(size, false)
	nsRun(b, ns, []byte(genRules(layout125, false, svcs)), xtablesCmd(false, BackendNFT, "restore"))
	ctx := context.Background()
	wholeRun, partRun, whole, targeted, read := relevantReaders(b, ns, ModeIPTables, size)
	rd := targeted.(*selector)
	w := rd.currentWatch()
	scope := scopeOf(ModeIPTables, BackendNFT)
	cpu := func() time.Duration {
		self, children := cpuTimes(b)
		return self + children
	}
	var local []int // Services with a local endpoint, each changed in turn
	for i, s := range svcs {
		if len(s.eps) > 0 && s.eps[0].local {
			local = append(local, i)
		}
	}
	var syncCPU, wholeCPU, partCPU, wholeWall, partWall time.Duration
	var wholeSaves, partSaves, relists, listed int
	round := 0
	for b.Loop() {
		if round >= len(local) {
			b.Fatalf("more than %d iterations: no Service left with a local endpoint", len(local))
		}
		victim := svcs[local[round]]
		round++
		name := victim.ns + "/" + victim.name
		after := localChurn(svcs, round, name)
		if lost {
			after = noLocal(svcs, name)
		}
		in := iptPartialSync(false, svcs, after, changedSet([]string{name}))
		svcs = after
		_, c0 := cpuTimes(b)
		nsRun(b, ns, []byte(in), xtablesCmd(false, BackendNFT, "restore"), "--noflush")
		_, c1 := cpuTimes(b)
		syncCPU += c1 - c0
		gen, err := partRun.NFTablesGeneration(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if w.await(ctx, gen, scope) == nil {
			b.Fatalf("the watcher did not account for generation %d", gen)
		}

		debug.FreeOSMemory()
		s0, r0, l0 := partRun.saves(), rd.relists.Load(), partRun.chainLists()
		t0, cpu0 := time.Now(), cpu()
		snap := read(targeted)
		partWall, partCPU = partWall+time.Since(t0), partCPU+cpu()-cpu0
		partSaves += partRun.saves() - s0
		relists += int(rd.relists.Load() - r0)
		listed += partRun.chainLists() - l0

		debug.FreeOSMemory()
		s0, t0, cpu0 = wholeRun.saves(), time.Now(), cpu()
		ref := read(whole)
		wholeWall, wholeCPU = wholeWall+time.Since(t0), wholeCPU+cpu()-cpu0
		wholeSaves += wholeRun.saves() - s0
		if d := snapshotDiff(snap, ref); d != "" {
			b.Fatalf("round %d: the targeted Read differs from the whole one:\n%s", round, d)
		}
		if st := snap.Family(victim.servicePort(), FamilyIPv4); lost != (st.Drop && st.LocalEndpoints == 0) {
			b.Fatalf("round %d: %s after its local endpoint changed: %+v", round, victim.name, st)
		}
	}
	n := float64(round)
	reportReadTimes(b, n, syncCPU, wholeWall, wholeCPU, partWall, partCPU)
	b.ReportMetric(float64(wholeSaves)/n, "whole-saves/read")
	b.ReportMetric(float64(partSaves)/n, "targeted-saves/read")
	b.ReportMetric(float64(relists)/n, "targeted-relists/read")
	b.ReportMetric(float64(listed)/n, "targeted-chain-lists/read")
}

// reportReadTimes reports BenchmarkRelevantRead's times per change (of n): the
// sync's (kube-proxy's child) CPU, each Read's wall time and CPU, and their
// ratios. It returns the per-change milliseconds of a total.
func reportReadTimes(b *testing.B, n float64, syncCPU, wholeWall, wholeCPU, partWall, partCPU time.Duration) func(time.Duration) float64 {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(syncCPU), "kubeproxy-child-cpu-ms")
	b.ReportMetric(ms(wholeWall), "whole-read-ms")
	b.ReportMetric(ms(wholeCPU), "whole-read-cpu-ms")
	b.ReportMetric(ms(partWall), "targeted-read-ms")
	b.ReportMetric(ms(partCPU), "targeted-read-cpu-ms")
	b.ReportMetric(float64(partCPU)/float64(wholeCPU), "targeted/whole-cpu")
	b.ReportMetric(float64(partCPU)/float64(syncCPU), "targeted/kubeproxy-child")
	return ms
}

// relevantReaders are BenchmarkRelevantRead's two readers of ns in mode, each
// read once: whole, without Watch, and targeted, its Watch running until the
// benchmark ends and its baseline taken. read fails the benchmark on an error
// or fewer than size ports.
func relevantReaders(b *testing.B, ns string, mode Mode, size int) (wholeRun, partRun *countingRunner, whole, targeted Reader, read func(Reader) *Snapshot) {
	ctx := context.Background()
	wholeRun = &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	partRun = &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	whole = NewReader(Options{Mode: mode, Runner: wholeRun, CacheTTL: -1})
	targeted = NewReader(Options{Mode: mode, Runner: partRun, CacheTTL: -1})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		targeted.(Watcher).Watch(wctx, func(bool) {})
	}()
	b.Cleanup(func() { cancel(); <-done })
	read = func(r Reader) *Snapshot {
		snap, err := r.Read(ctx)
		if err != nil || snap.Len() < size {
			b.Fatalf("read: %v, %d ports", err, snap.Len())
		}
		return snap
	}
	read(whole)
	read(targeted)
	waitBaseline(b, targeted)
	read(targeted)
	return wholeRun, partRun, whole, targeted, read
}

func benchRelevantRead(b *testing.B, size int) {
	ns := newNetns(b)
	svcs := nftClusterOf(size)
	nsRun(b, ns, []byte(genNFTLayout(false, svcs, true)), "nft", "-f", "-")
	ctx := context.Background()
	wholeRun, partRun, whole, targeted, read := relevantReaders(b, ns, ModeNFTables, size)
	rd := targeted.(*selector)
	w := rd.currentWatch()
	scope := scopeOf(ModeNFTables, "")
	settle := func() {
		gen, err := partRun.NFTablesGeneration(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if w.await(ctx, gen, scope) == nil {
			b.Fatalf("the watcher did not account for generation %d", gen)
		}
	}
	cpu := func() time.Duration {
		self, children := cpuTimes(b)
		return self + children
	}
	var local []int // Services with a local endpoint, each losing it in turn
	for i, s := range svcs {
		if i%4 == 2 && len(s.eps) > 0 && s.eps[0].local {
			local = append(local, i)
		}
	}
	var syncCPU, wholeCPU, partCPU, wholeWall, partWall, chainCPU, mapCPU, portsCPU time.Duration
	var wholeLists, partLists, relists, dumps int
	round := 0
	for b.Loop() {
		if round >= len(local) {
			b.Fatalf("more than %d iterations: no Service left with a local endpoint", len(local))
		}
		victim := svcs[local[round]]
		round++
		after := noLocal(svcs, victim.ns+"/"+victim.name)
		in, stale := nftPartialSync(false, true, svcs, after, changedSet([]string{victim.ns + "/" + victim.name}))
		svcs = after
		_, c0 := cpuTimes(b)
		nsRun(b, ns, []byte(in), "nft", "-f", "-")
		_, c1 := cpuTimes(b)
		syncCPU += c1 - c0
		settle()

		// Each Read starts with the garbage of what ran before collected and
		// its memory returned to the system: the runtime does that in the
		// background otherwise, and a whole listing leaves hundreds of MB.
		debug.FreeOSMemory()
		l0, r0, d0 := partRun.saves(), rd.relists.Load(), rd.relistDumps.Load()
		t0, cpu0 := time.Now(), cpu()
		snap := read(targeted)
		partWall, partCPU = partWall+time.Since(t0), partCPU+cpu()-cpu0
		partLists += partRun.saves() - l0
		relists += int(rd.relists.Load() - r0)
		dumps += int(rd.relistDumps.Load() - d0)

		debug.FreeOSMemory()
		l0, t0, cpu0 = wholeRun.saves(), time.Now(), cpu()
		ref := read(whole)
		wholeWall, wholeCPU = wholeWall+time.Since(t0), wholeCPU+cpu()-cpu0
		wholeLists += wholeRun.saves() - l0
		if d := snapshotDiff(snap, ref); d != "" {
			b.Fatalf("round %d: the targeted Read differs from the whole one:\n%s", round, d)
		}
		if st := snap.Family(victim.servicePort(), FamilyIPv4); !st.Drop || st.LocalEndpoints != 0 {
			b.Fatalf("round %d: %s after its local endpoint went: %+v", round, victim.name, st)
		}
		// Of the targeted Read: computing every port's state from the model.
		debug.FreeOSMemory()
		cpu0 = cpu()
		rd.tables.byKey[FamilyIPv4+"/kube-proxy"].nft.model.ports()
		portsCPU += cpu() - cpu0

		// What nft costs for one object: the flushed local chain, the map.
		_, c0 = cpuTimes(b)
		nsRun(b, ns, nil, "nft", "-j", "list", "chain", "ip", "kube-proxy", stale[0])
		_, c1 = cpuTimes(b)
		nsRun(b, ns, nil, "nft", "-j", "list", "map", "ip", "kube-proxy", "no-endpoint-nodeports")
		_, c2 := cpuTimes(b)
		chainCPU, mapCPU = chainCPU+c1-c0, mapCPU+c2-c1

		// kube-proxy deletes the flushed chain later; both readers take it in.
		nsRun(b, ns, []byte(nftStaleDelete(false, stale)), "nft", "-f", "-")
		settle()
		read(whole)
		read(targeted)
	}
	n := float64(round)
	ms := reportReadTimes(b, n, syncCPU, wholeWall, wholeCPU, partWall, partCPU)
	b.ReportMetric(float64(wholeLists)/n, "whole-lists/read")
	b.ReportMetric(float64(partLists)/n, "targeted-lists/read")
	b.ReportMetric(float64(relists)/n, "targeted-relists/read")
	b.ReportMetric(float64(dumps)/n, "targeted-netlink-requests/read")
	b.ReportMetric(ms(portsCPU), "model-ports-cpu-ms")
	b.ReportMetric(ms(chainCPU), "nft-list-chain-cpu-ms")
	b.ReportMetric(ms(mapCPU), "nft-list-map-cpu-ms")
}

// BenchmarkNotificationDecode: the watcher's CPU per kube-proxy transaction
// without the receive: the datagrams of one partial sync of the
// 10,000-Service ruleset (as BenchmarkChangeNotifications applies it),
// recorded from a subscribed socket, decoded and judged again and again.
func BenchmarkNotificationDecode(b *testing.B) {
	requireRoot(b)
	for _, mode := range []Mode{ModeIPTables, ModeNFTables} {
		name := "nft-backend"
		if mode == ModeNFTables {
			name = "nftables"
		}
		b.Run(name, func(b *testing.B) {
			ns := newNetns(b)
			svcs := bigCluster(false)
			scope := scopeOf(mode, BackendNFT)
			var input string
			cmd := []string{xtablesCmd(false, BackendNFT, "restore"), "--noflush"}
			after := remoteChurn(svcs, 1, churned(svcs)...)
			if mode == ModeNFTables {
				svcs = nftClusterOf(10000)
				after = remoteChurn(svcs, 1, churned(svcs)...)
				scope = scopeOf(mode, "")
				nsRun(b, ns, []byte(genNFTLayout(false, svcs, true)), "nft", "-f", "-")
				input, _ = nftPartialSync(false, true, svcs, after, changedSet(churned(svcs)))
				cmd = []string{"nft", "-f", "-"}
			} else {
				nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, BackendNFT, "restore"))
				input = iptPartialSync(false, svcs, shuffled(after, 1), changedSet(churned(svcs)))
			}
			c, err := dialNotify(ns, DefaultNotifyBuffer)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			raw, err := c.SyscallConn()
			if err != nil {
				b.Fatal(err)
			}
			nc, err := dialNFT(context.Background(), ns, nftDumpBuffer)
			if err != nil {
				b.Fatal(err)
			}
			var kept [2]map[string]uint64
			if mode == ModeNFTables {
				if kept, err = nc.anonSets(scope); err != nil {
					b.Fatal(err)
				}
			}
			nc.close()
			before, err := nftGeneration(context.Background(), ns)
			if err != nil {
				b.Fatal(err)
			}
			nsRun(b, ns, []byte(input), cmd[0], cmd[1:]...)
			last, err := nftGeneration(context.Background(), ns)
			if err != nil {
				b.Fatal(err)
			}
			// Record every datagram up to the NEWGEN of the last transaction.
			var grams [][]byte
			var bytes int
			buf := make([]byte, recvBuffer)
			probe := newTxAccount()
			probe.scope = scope
			for seen := before; genAfter(last, seen); {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				n, err := recvDatagram(raw, buf)
				if err != nil {
					b.Fatal(err)
				}
				g := append([]byte(nil), buf[:n]...)
				grams, bytes = append(grams, g), bytes+n
				forEachMessage(g, func(htype uint16, data []byte) {
					if gen, ok := probe.message(htype, data); ok {
						seen = gen
					}
				})
			}
			var changedAny bool
			var messages uint64
			b.ReportAllocs()
			for b.Loop() {
				acct := newTxAccount()
				acct.rebase(scope, cloneKept(kept))
				changedAny = false
				for _, g := range grams {
					forEachMessage(g, func(htype uint16, data []byte) {
						if _, ok := acct.message(htype, data); ok {
							j := acct.end(true)
							changedAny = changedAny || j.changed[0] || j.changed[1]
						}
					})
				}
				messages = acct.messages
			}
			if changedAny {
				b.Errorf("the recorded sync was judged relevant: it changes nothing a Snapshot depends on")
			}
			b.ReportMetric(float64(messages), "notifications")
			b.ReportMetric(float64(len(grams)), "datagrams")
			b.ReportMetric(float64(bytes)/(1<<20), "MiB")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sync")
		})
	}
}

func cloneKept(k [2]map[string]uint64) [2]map[string]uint64 {
	var out [2]map[string]uint64
	for i := range k {
		out[i] = make(map[string]uint64, len(k[i]))
		for n, v := range k[i] {
			out[i][n] = v
		}
	}
	return out
}

// netlinkQueue is the receive queue, in bytes, of the socket of ns subscribed
// to NFNLGRP_NFTABLES (/proc/net/netlink's Rmem, read from a thread in the
// namespace), the most among them.
func netlinkQueue(ns string) (int, error) {
	most := 0
	err := inNetns(ns, func() error {
		data, err := os.ReadFile("/proc/thread-self/net/netlink")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(data), "\n") {
			// sk Eth Pid Groups Rmem Wmem ...: NETLINK_NETFILTER is 12, the
			// nf_tables group the seventh bit of the first word.
			f := strings.Fields(l)
			if len(f) > 5 && f[1] == "12" && f[3] == "00000040" {
				n, _ := strconv.Atoi(f[4])
				most = max(most, n)
			}
		}
		return nil
	})
	return most, err
}

// BenchmarkNotificationBurst: how much of the receive buffer a kube-proxy
// sync of the 10,000-Service ruleset (iptables mode, nft backend) fills
// while the watcher takes it in, sampled every 10 ms: a partial sync (ten
// Services' remote endpoints, every top-level chain refilled) and a full one
// (every chain of every Service refilled, as at kube-proxy's start and
// periodically), with the notifications, losses and the restore's CPU. It
// runs for minutes (a full restore of 107,000 rules takes some of CPU):
//
//	go test -run '^$' -bench BenchmarkNotificationBurst -benchtime 1x -timeout 60m ./nodeprobe/kernelrules/
func BenchmarkNotificationBurst(b *testing.B) {
	requireRoot(b)
	ns := newNetns(b)
	svcs := bigCluster(false)
	nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, BackendNFT, "restore"))
	run := &countingRunner{NetnsRunner: NetnsRunner{Namespace: ns}}
	r := NewReader(Options{Mode: ModeIPTables, Runner: run, CacheTTL: -1})
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.(Watcher).Watch(wctx, func(bool) {})
	}()
	defer func() { cancel(); <-done }()
	if _, err := r.Read(ctx); err != nil {
		b.Fatal(err)
	}
	waitBaseline(b, r)
	w := r.(*selector).currentWatch()
	all := map[string]bool{}
	for _, s := range svcs {
		all[s.ns+"/"+s.name] = true
	}
	for _, c := range []struct {
		name    string
		changed func([]genService) map[string]bool
	}{
		{"partial", func(s []genService) map[string]bool { return changedSet(churned(s)) }},
		{"full", func([]genService) map[string]bool { return all }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var peak, notes, losses int
			var child time.Duration
			round := 0
			for b.Loop() {
				round++
				after := remoteChurn(svcs, round+10, churned(svcs)...)
				input := iptPartialSync(false, svcs, shuffled(after, uint64(round)), c.changed(svcs))
				svcs = after
				stop, most := make(chan struct{}), make(chan int)
				go func() {
					m := 0
					for {
						select {
						case <-stop:
							most <- m
							return
						case <-time.After(10 * time.Millisecond):
						}
						if q, err := netlinkQueue(ns); err == nil {
							m = max(m, q)
						}
					}
				}()
				m0, l0 := w.messages.Load(), w.losses.Load()
				_, c0 := cpuTimes(b)
				nsRun(b, ns, []byte(input), xtablesCmd(false, BackendNFT, "restore"), "--noflush")
				_, c1 := cpuTimes(b)
				gen, err := run.NFTablesGeneration(ctx)
				if err != nil {
					b.Fatal(err)
				}
				// Taken in (or lost, which rebases): the watcher is past gen.
				for deadline := time.Now().Add(10 * time.Minute); w.await(ctx, gen, scopeOf(ModeIPTables, BackendNFT)) == nil; {
					if time.Now().After(deadline) {
						b.Fatalf("the watcher did not account for generation %d in 10 minutes", gen)
					}
					time.Sleep(10 * time.Millisecond)
				}
				close(stop)
				peak = max(peak, <-most)
				notes += int(w.messages.Load() - m0)
				losses += int(w.losses.Load() - l0)
				child += c1 - c0
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-queue-MiB")
			b.ReportMetric(float64(notes)/float64(round), "notifications/sync")
			b.ReportMetric(float64(losses), "losses")
			b.ReportMetric(float64(child.Milliseconds())/float64(round), "restore-cpu-ms")
		})
	}
}
