package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The exporter's CPU and memory beside kube-proxy's on the same node, under the load a node of a real cluster
// carries: its price is paid on every node, so kube-proxy's own cost is the yardstick. Two nodes are measured
// at once, node-1 in iptables mode with the nft backend and node-2 in nftables mode, each with its real
// kube-proxy and one exporter. The Services are MixedServices (mostly NodePort, every fourth a LoadBalancer with
// an ingress IP and a health check node port, every tenth with a local endpoint on both nodes, two endpoints
// on other nodes each). During each window:
//
//   - churn: one endpoint replaced every 5 s on a node other than the measured ones (round robin over the
//     Services), and once a minute one local endpoint replaced on each measured node;
//   - each exporter scraped every 15 s as Prometheus does (its Accept and timeout headers, gzip, a kept-alive
//     connection), from inside the node's namespace;
//   - after it, with the same load, a CPU profile of each exporter over a second window as long
//     (--web.enable-pprof), written to a file the log names, with the top of `go tool pprof -top`: the
//     profiler's sampling and its buffers (about 3 MB) are in none of the measured window's figures.
//
// CPU is each process tree's (cluster.TreeCPU): the exporter with its iptables-save and nft runs, kube-proxy
// with its iptables-restore and nft runs; RSS is each process's own, the mean of a reading every second of the
// window (the reading at its end, split into anon, file and shmem, is logged beside it). The figures are
// logged (and reported as benchmark metrics), never asserted; what fails is the setup: kube-proxy never synced,
// a scrape failed, no churn applied, no profile.

// cpuScrapeInterval, cpuRemoteChurn and cpuLocalChurn are the load of a window: Prometheus' usual scrape
// interval, a busy cluster's endpoint changes elsewhere, and one rollout a minute reaching each measured node.
const (
	cpuScrapeInterval = 15 * time.Second
	cpuRemoteChurn    = 5 * time.Second
	cpuLocalChurn     = time.Minute
)

// cpuOptIn are the opt-in collectors the second window of each size turns on.
var cpuOptIn = []string{"--collector.service_details", "--collector.service_arrivals", "--collector.rules.per-port"}

// BenchmarkCPUBesideKubeProxy is the full run (make bench-cpu): for each size of LT_BENCH_CPU_SERVICES (default
// "310 1000 10000", growing one cluster's Services), a window of LT_BENCH_CPU_WINDOW (default 5m) with the
// default collectors, then one with the opt-in collectors, each exporter freshly started. Profiles go to a
// directory the log names, kept after the run.
//
//	e2e/run-e2e.sh -run '^$' -bench '^BenchmarkCPUBesideKubeProxy$' -benchtime 1x -timeout 180m
func BenchmarkCPUBesideKubeProxy(b *testing.B) {
	sizes := envSizes(b, "LT_BENCH_CPU_SERVICES", []int{310, 1000, 10000})
	window := envDuration(b, "LT_BENCH_CPU_WINDOW", 5*time.Minute)
	env := startCPUCluster(b, slices.Max(sizes))
	dir, err := os.MkdirTemp("", "lt-bench-cpu-")
	if err != nil {
		fatalln(b, err)
	}
	b.Logf("CPU profiles go to %s", dir)
	var all []cpuRow
	// Every size's figures, also when a later size fails.
	defer func() { b.Logf("all sizes, %s windows:\n%s", window, cpuTable(all)) }()
	for _, n := range sizes {
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			env.grow(b, n)
			var rows []cpuRow
			var errs []error
			for range b.N {
				for _, extra := range [][]string{nil, cpuOptIn} {
					r, err := env.measure(b, n, extra, window, dir)
					rows, errs = append(rows, r...), append(errs, err)
				}
			}
			b.Logf("%d Services, %s windows:\n%s", n, window, cpuTable(rows))
			all = append(all, rows...)
			if err := errors.Join(errs...); err != nil {
				fatalln(b, err)
			}
			for _, r := range rows {
				unit := strings.NewReplacer(" ", "", ",", "-").Replace(r.mode) + "-" + r.collectors
				b.ReportMetric(r.cpuRatio(), unit+"-cpu-ratio")
				b.ReportMetric(r.rssRatio(), unit+"-rss-ratio")
			}
		})
	}
}

// TestScaleCPUBesideKubeProxy is the suite's short variant of BenchmarkCPUBesideKubeProxy: 100 Services, one
// 40 s window with the default collectors and its 40 s profile (about 2 minutes in all). It proves the
// measurement works (kube-proxy synced, scrapes answered, churn applied, profiles taken) and logs the figures;
// it asserts none of them. The profiles go to the cluster's work directory, which LT_E2E_KEEP_LOGS=1 keeps.
func TestScaleCPUBesideKubeProxy(t *testing.T) {
	const services = 100
	env := startCPUCluster(t, services)
	env.grow(t, services)
	rows, err := env.measure(t, services, nil, 40*time.Second, env.c.WorkDir)
	t.Logf("%d Services, one 40s window:\n%s", services, cpuTable(rows))
	if err != nil {
		fatalln(t, err)
	}
}

// cpuEnv is the cluster of a CPU run: node-1 (iptables mode, nft backend) and node-2 (nftables mode), and the
// Services created so far.
type cpuEnv struct {
	c     *cluster.Cluster
	set   cluster.MixedServices
	have  int
	nodes []*cluster.Node
	// churn changes the Services' endpoints, window after window: it knows what they are now.
	churn *cluster.EndpointChurn
	// heapProfile: LT_BENCH_CPU_HEAP_PROFILE=1 keeps Go's sampling of allocations on in the exporters and
	// takes a heap profile at each window's end. Off (the default), the exporters run with
	// GODEBUG=memprofilerate=0, as one without --web.enable-pprof samples nothing: its table of allocation
	// sites (1.4 MB) would be in the RSS measured, and not in a node's.
	heapProfile bool
}

// cpuModes says how each measured node's kube-proxy runs.
var cpuModes = map[string]string{"node-1": "iptables, nft backend", "node-2": "nftables"}

// startCPUCluster starts the cluster with room in the node port range for maxServices Services.
func startCPUCluster(tb testing.TB, maxServices int) *cpuEnv {
	tb.Helper()
	requireRoot(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Config{
		Name: "cpu",
		Nodes: []cluster.NodeConfig{
			{Name: "node-1", ProxyMode: cluster.IPTables},
			{Name: "node-2", ProxyMode: cluster.NFTables},
		},
		Log: os.Stderr,
	})
	if err != nil {
		fatalf(tb, "cpu cluster: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	env := &cpuEnv{c: c, nodes: c.Nodes(), set: cluster.MixedServices{Namespace: "cpu", LocalNodes: []string{"node-1", "node-2"}},
		heapProfile: os.Getenv("LT_BENCH_CPU_HEAP_PROFILE") == "1"}
	// The default range holds 2,768 node ports; health check node ports come from it too.
	if ports := env.set.NodePorts(maxServices) + 1000; ports > 2768 {
		r := fmt.Sprintf("30000-%d", 30000+ports)
		if err := c.SetNodePortRange(ctx, r); err != nil {
			fatalln(tb, err)
		}
		tb.Logf("node port range %s", r)
	}
	return env
}

// grow creates Services until there are n, with kube-proxy stopped (each sync of a growing nft-backend ruleset
// costs seconds of CPU and slows the writes down to minutes at 10,000), then starts kube-proxy on both nodes
// and waits for its first, full sync.
func (e *cpuEnv) grow(tb testing.TB, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	for _, node := range e.nodes {
		node.StopKubeProxy()
	}
	t0 := time.Now()
	if err := e.c.CreateBulk(ctx, e.set.Bulk(), e.have, n); err != nil {
		fatalln(tb, err)
	}
	if n > e.have {
		tb.Logf("%d Services and EndpointSlices created in %s", n-e.have, time.Since(t0).Round(time.Millisecond))
		e.have = n
	}
	if e.churn == nil {
		e.churn = e.c.NewEndpointChurn(e.set, n)
	}
	e.churn.Grow(n)
	t0 = time.Now()
	for _, node := range e.nodes {
		var err error
		if node.ProxyMode == cluster.IPTables {
			err = node.StartKubeProxyWithBackend(ctx, "nft")
		} else {
			err = node.StartKubeProxy(ctx, cluster.KubeProxyOptions{})
		}
		if err != nil {
			fatalln(tb, err)
		}
	}
	syncTimeout := 5*time.Minute + time.Duration(n)*100*time.Millisecond
	var wg sync.WaitGroup
	errs := make([]error, len(e.nodes))
	for i, node := range e.nodes {
		wg.Go(func() {
			if errs[i] = node.WaitKubeProxyHealthy(ctx, 5*time.Minute); errs[i] != nil {
				return
			}
			if errs[i] = node.WaitKubeProxySynced(ctx, syncTimeout); errs[i] == nil {
				tb.Logf("%s (%s): kube-proxy synced %d Services %s after its start", node.Name, cpuModes[node.Name], n, time.Since(t0).Round(time.Second))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fatalf(tb, "kube-proxy never synced: %v", err)
	}
}

// cpuRow is one node's figures over one window.
type cpuRow struct {
	node, mode, collectors string
	services               int
	// exporter and kubeProxy are each process tree's CPU over the window; the Own figures the process alone
	// (its Go code), the rest is its children's.
	exporter, exporterOwn, kubeProxy, kubeProxyOwn time.Duration
	exporterRSS, kubeProxyRSS                      int64
	scrapes, failedScrapes, churn, kubeProxySyncs  int
	slowestScrape                                  time.Duration
	window                                         time.Duration
	profile, heap                                  string // the CPU profile over the window, the heap profile at its end ("": none)
}

func (r cpuRow) cpuRatio() float64 { return r.exporter.Seconds() / r.kubeProxy.Seconds() }
func (r cpuRow) rssRatio() float64 { return float64(r.exporterRSS) / float64(r.kubeProxyRSS) }

// cpuTable renders rows as the table docs/performance.md records.
func cpuTable(rows []cpuRow) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "node\tmode\tServices\tcollectors\texporter CPU s (Go + children)\tkube-proxy CPU s (Go + children)\tratio\texporter RSS MiB (mean)\tkube-proxy RSS MiB (mean)\tRSS ratio\tscrapes (failed)\tslowest scrape s\tchurn events\tkube-proxy syncs")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%.2f (%.2f + %.2f)\t%.2f (%.2f + %.2f)\t%.2f\t%.1f\t%.1f\t%.2f\t%d (%d)\t%.2f\t%d\t%d\n",
			r.node, r.mode, r.services, r.collectors,
			r.exporter.Seconds(), r.exporterOwn.Seconds(), (r.exporter - r.exporterOwn).Seconds(),
			r.kubeProxy.Seconds(), r.kubeProxyOwn.Seconds(), (r.kubeProxy - r.kubeProxyOwn).Seconds(),
			r.cpuRatio(), mib(r.exporterRSS), mib(r.kubeProxyRSS), r.rssRatio(), r.scrapes+r.failedScrapes, r.failedScrapes,
			r.slowestScrape.Seconds(), r.churn, r.kubeProxySyncs)
	}
	_ = w.Flush()
	return sb.String()
}

// cpuSample is one node's processes read at a window's boundary.
type cpuSample struct {
	exporter, exporterOwn, kubeProxy, kubeProxyOwn time.Duration
	syncs                                          int
}

// measure runs one window of the exporter beside kube-proxy on every measured node at once: fresh exporters
// with extra (and --web.enable-pprof), scraped from their start; once each has answered two scrapes (the first
// fills the rules' and the probes' state) the window opens with the churn and each exporter's CPU profile, and
// closes after window. It returns one row per node, and what went wrong that the figures survive (a failed
// scrape, no churn, no profile, kube-proxy behind); it fails at once when there can be no figures.
func (e *cpuEnv) measure(tb testing.TB, services int, extra []string, window time.Duration, profileDir string) ([]cpuRow, error) {
	tb.Helper()
	collectors := "default"
	if len(extra) > 0 {
		collectors = "opt-in"
	}
	ctx, cancel := context.WithTimeout(context.Background(), window+30*time.Minute)
	defer cancel()
	for _, node := range e.nodes {
		// The DaemonSet's log level, not the harness's debug: a window measures what a node pays.
		var env []string
		if !e.heapProfile {
			env = []string{"GODEBUG=memprofilerate=0"}
		}
		if err := node.StartExporterEnv(ctx, env, append([]string{"--web.enable-pprof", "--log.level=info"}, extra...)...); err != nil {
			fatalln(tb, err)
		}
	}
	defer func() {
		for _, node := range e.nodes {
			node.StopExporter()
		}
	}()
	for _, node := range e.nodes {
		if err := node.WaitExporter(ctx, 5*time.Minute); err != nil {
			fatalln(tb, err)
		}
	}

	// The scrapers, from the exporters' start to the window's end.
	scrapeCtx, stopScrapes := context.WithCancel(ctx)
	logs := make([]*scrapeLog, len(e.nodes))
	var scrapers sync.WaitGroup
	for i, node := range e.nodes {
		logs[i] = &scrapeLog{}
		scrapers.Go(func() { scrapeEvery(scrapeCtx, node, cpuScrapeInterval, logs[i]) })
	}
	stopScrapers := func() {
		stopScrapes()
		scrapers.Wait()
	}
	defer stopScrapers()
	// Two scrapes answered by each exporter (a failed one is reported with the window's).
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		ready := true
		for _, l := range logs {
			ready = ready && l.stats(time.Time{}, time.Now()).answered >= 2
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			fatalln(tb, "before the window: the exporters did not answer two scrapes in 5 minutes")
		}
	}

	// The window.
	start := make([]cpuSample, len(e.nodes))
	for i, node := range e.nodes {
		start[i] = sampleCPU(tb, ctx, node)
	}
	t0 := time.Now()
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnErr error
	var applied atomic.Int64
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		churnErr = churnOn(churnCtx, e.churn, len(e.nodes), t0, &applied)
	}()
	// The resident sets every second of the window: a Go process's RSS moves by a megabyte or two with its
	// collections (the heap between the live heap and its goal, and what the runtime has yet to give back), so
	// the window's mean is the figure, not one reading at its end.
	means := make([]rssMean, len(e.nodes))
	rssCtx, stopRSS := context.WithCancel(ctx)
	rssDone := make(chan struct{})
	var rssErr error
	go func() {
		defer close(rssDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for i, node := range e.nodes {
				st, err := readRSS(node)
				if err != nil {
					rssErr = fmt.Errorf("%s: the window's resident sets: %w", node.Name, err)
					return
				}
				means[i].add(st)
			}
			select {
			case <-tick.C:
			case <-rssCtx.Done():
				return
			}
		}
	}()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		fatalln(tb, ctx.Err())
	}
	stopRSS()
	<-rssDone
	if rssErr != nil {
		fatalln(tb, rssErr)
	}
	end := make([]cpuSample, len(e.nodes))
	rss := make([][2]cluster.ProcStatus, len(e.nodes))
	for i, node := range e.nodes {
		end[i] = sampleCPU(tb, ctx, node)
		rss[i] = sampleRSS(tb, node)
	}
	t1 := time.Now()
	churned := int(applied.Load())
	// What each exporter holds at the window's end, beside its RSS (a heap profile, after the window so its own
	// cost is in no figure), and where the window's CPU went: a CPU profile over a second window as long, the
	// churn and scrapes going on.
	profiles := make([]string, len(e.nodes))
	profileErr := make([]error, len(e.nodes))
	heaps := make([]string, len(e.nodes))
	var profilers sync.WaitGroup
	for i, node := range e.nodes {
		profiles[i] = filepath.Join(profileDir, fmt.Sprintf("cpu-%s-%d-%s-%s.pb.gz", node.Name, services, collectors, t0.UTC().Format("20060102T150405Z")))
		// Beside the CPU profile, named for the same run (the directory's own name holds "cpu-" too).
		heaps[i] = filepath.Join(filepath.Dir(profiles[i]), strings.Replace(filepath.Base(profiles[i]), "cpu-", "heap-", 1))
		if !e.heapProfile {
			heaps[i] = ""
		} else if err := node.ExporterHeapProfile(ctx, cluster.ExporterPort, heaps[i]); err != nil {
			heaps[i] = ""
			tb.Logf("%s: %v", node.Name, err)
		}
		// What the resident set is made of: the kernel's split and the Go runtime's own account of its memory.
		memstats := filepath.Join(filepath.Dir(profiles[i]), strings.Replace(strings.TrimSuffix(filepath.Base(profiles[i]), ".pb.gz"), "cpu-", "memstats-", 1)+".txt")
		stats, err := node.ExporterMemStats(ctx, cluster.ExporterPort, memstats)
		if err != nil {
			tb.Logf("%s: %v", node.Name, err)
		}
		ex, kp := rss[i][0], rss[i][1]
		tb.Logf("%s, %d Services, %s collectors, at the window's end: exporter RSS %.1f MiB (anon %.1f, file %.1f, shmem %.1f), kube-proxy RSS %.1f MiB (anon %.1f, file %.1f, shmem %.1f); over the window (%d readings): exporter %.1f–%.1f MiB, mean %.1f, kube-proxy %.1f–%.1f MiB, mean %.1f; the exporter's runtime.MemStats:\n%s",
			node.Name, services, collectors, mib(ex.VmRSS), mib(ex.RssAnon), mib(ex.RssFile), mib(ex.RssShmem),
			mib(kp.VmRSS), mib(kp.RssAnon), mib(kp.RssFile), mib(kp.RssShmem), means[i].n,
			mib(means[i].min[0]), mib(means[i].max[0]), mib(means[i].mean(0)), mib(means[i].min[1]), mib(means[i].max[1]), mib(means[i].mean(1)),
			strings.Join(stats, "\n"))
		profilers.Go(func() {
			profileErr[i] = node.ExporterCPUProfile(ctx, cluster.ExporterPort, max(1, int(window.Seconds())), profiles[i])
		})
	}
	profilers.Wait()
	stopChurn()
	<-churnDone
	stopScrapers()

	// What must have worked.
	var problems []error
	if churnErr != nil {
		problems = append(problems, churnErr)
	}
	if churned == 0 {
		problems = append(problems, fmt.Errorf("no churn applied in the %s window", window))
	}
	rows := make([]cpuRow, len(e.nodes))
	for i, node := range e.nodes {
		scrapes := logs[i].stats(t0, t1)
		if all := logs[i].stats(time.Time{}, t1); all.failed > 0 {
			problems = append(problems, fmt.Errorf("%s: %d of %d scrapes failed (%d in the window), the first: %w",
				node.Name, all.failed, all.failed+all.answered, scrapes.failed, all.firstErr))
		}
		if scrapes.answered == 0 {
			problems = append(problems, fmt.Errorf("%s: no scrape answered in the %s window", node.Name, window))
		}
		if profileErr[i] != nil {
			problems = append(problems, profileErr[i])
		}
		rows[i] = cpuRow{
			node: node.Name, mode: cpuModes[node.Name], collectors: collectors, services: services,
			exporter: end[i].exporter - start[i].exporter, exporterOwn: end[i].exporterOwn - start[i].exporterOwn,
			kubeProxy: end[i].kubeProxy - start[i].kubeProxy, kubeProxyOwn: end[i].kubeProxyOwn - start[i].kubeProxyOwn,
			exporterRSS: means[i].mean(0), kubeProxyRSS: means[i].mean(1),
			scrapes: scrapes.answered, failedScrapes: scrapes.failed, slowestScrape: scrapes.slowest, churn: churned, kubeProxySyncs: end[i].syncs - start[i].syncs,
			window: t1.Sub(t0), profile: profiles[i], heap: heaps[i],
		}
	}
	// kube-proxy kept up with the churn: it syncs what the window changed.
	for _, node := range e.nodes {
		if err := node.WaitKubeProxySynced(ctx, 5*time.Minute+time.Duration(services)*50*time.Millisecond); err != nil {
			problems = append(problems, fmt.Errorf("kube-proxy never synced the window's churn: %w", err))
		}
	}
	// The figures first, even of a failed run: they say how it failed.
	for _, r := range rows {
		tb.Logf("%s (%s), %d Services, %s collectors, a %s window: CPU profile of the exporter in %s; go tool pprof -top:\n%s",
			r.node, r.mode, r.services, r.collectors, r.window.Round(time.Millisecond), r.profile, pprofTop(ctx, r.profile, 25))
		if r.heap != "" {
			tb.Logf("%s (%s), %d Services, %s collectors: what the exporter holds at the window's end, in %s; go tool pprof -top -sample_index=inuse_space:\n%s",
				r.node, r.mode, r.services, r.collectors, r.heap, pprofTop(ctx, r.heap, 25, "-sample_index=inuse_space"))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return rows, fmt.Errorf("%d Services, %s collectors: %w", services, collectors, err)
	}
	return rows, nil
}

// sampleCPU reads the node's exporter's and kube-proxy's process trees, and kube-proxy's count of syncs.
func sampleCPU(tb testing.TB, ctx context.Context, node *cluster.Node) cpuSample {
	tb.Helper()
	var s cpuSample
	for _, p := range []struct {
		pid       func() (int, error)
		tree, own *time.Duration
	}{{node.ExporterPID, &s.exporter, &s.exporterOwn}, {node.KubeProxyPID, &s.kubeProxy, &s.kubeProxyOwn}} {
		pid, err := p.pid()
		if err != nil {
			fatalln(tb, err)
		}
		// The process alone first: its tree read after it can only be larger.
		own, err := cluster.ReadProcCPU(pid)
		if err != nil {
			fatalln(tb, err)
		}
		tree, _, err := cluster.TreeCPU(pid)
		if err != nil {
			fatalln(tb, err)
		}
		*p.tree, *p.own = tree, own.Own()
	}
	m, err := node.KubeProxyMetrics(ctx)
	if err != nil {
		fatalln(tb, err)
	}
	for _, series := range m.Series("kubeproxy_sync_proxy_rules_duration_seconds", nil) {
		s.syncs += int(series.GetHistogram().GetSampleCount())
	}
	return s
}

// rssMean gathers the resident sets of a node's exporter ([0]) and kube-proxy ([1]) read over a window.
type rssMean struct {
	n             int
	sum, min, max [2]int64
}

func (m *rssMean) add(st [2]cluster.ProcStatus) {
	for i, s := range st {
		if m.n == 0 || s.VmRSS < m.min[i] {
			m.min[i] = s.VmRSS
		}
		m.max[i] = max(m.max[i], s.VmRSS)
		m.sum[i] += s.VmRSS
	}
	m.n++
}

func (m *rssMean) mean(i int) int64 { return m.sum[i] / int64(max(m.n, 1)) }

// sampleRSS reads the resident memory of the node's exporter and kube-proxy (each process alone: the children
// come and go).
func sampleRSS(tb testing.TB, node *cluster.Node) [2]cluster.ProcStatus {
	tb.Helper()
	st, err := readRSS(node)
	if err != nil {
		fatalln(tb, err)
	}
	return st
}

func readRSS(node *cluster.Node) ([2]cluster.ProcStatus, error) {
	var out [2]cluster.ProcStatus
	for i, pid := range []func() (int, error){node.ExporterPID, node.KubeProxyPID} {
		p, err := pid()
		if err != nil {
			return out, err
		}
		if out[i], err = cluster.ReadProcStatus(p); err != nil {
			return out, err
		}
	}
	return out, nil
}

// churnOn applies the window's churn from t0 until ctx ends: a remote endpoint change every cpuRemoteChurn
// (the first half a period in), and every cpuLocalChurn (the first half a period in) one local endpoint change
// on each of nodes. It counts each change it made in applied, as it makes it: the measured window's figures
// read it at that window's end, while the churn goes on for the profile's.
func churnOn(ctx context.Context, churn *cluster.EndpointChurn, nodes int, t0 time.Time, applied *atomic.Int64) error {
	remote, local := t0.Add(cpuRemoteChurn/2), t0.Add(cpuLocalChurn/2)
	for {
		next := remote
		if local.Before(remote) {
			next = local
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		if !next.Before(local) {
			for m := range nodes {
				if _, err := churn.ChangeLocal(ctx, m); err != nil {
					return ignoreEnd(ctx, err)
				}
				applied.Add(1)
			}
			local = local.Add(cpuLocalChurn)
		}
		if !next.Before(remote) {
			if _, err := churn.ChangeRemote(ctx); err != nil {
				return ignoreEnd(ctx, err)
			}
			applied.Add(1)
			remote = remote.Add(cpuRemoteChurn)
		}
	}
}

// ignoreEnd is err, unless ctx ended (the window closed during a write).
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// scrapeLog is a scraper's scrapes: when each started, how long it took, and how it failed.
type scrapeLog struct {
	mu      sync.Mutex
	scrapes []scrapeResult
}

type scrapeResult struct {
	at   time.Time
	took time.Duration
	err  error
}

// scrapeStats are the scrapes started in a span of time.
type scrapeStats struct {
	answered, failed int
	slowest          time.Duration
	firstErr         error
}

// stats are the scrapes that started in [from, to).
func (l *scrapeLog) stats(from, to time.Time) scrapeStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st scrapeStats
	for _, r := range l.scrapes {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		st.slowest = max(st.slowest, r.took)
		if r.err != nil {
			st.failed++
			if st.firstErr == nil {
				st.firstErr = r.err
			}
			continue
		}
		st.answered++
	}
	return st
}

// scrapeEvery scrapes the node's exporter at once and then every interval until ctx ends. A failed scrape does
// not stop it, as a failed scrape does not stop Prometheus: the load stays what it is, and the failure is
// counted.
func scrapeEvery(ctx context.Context, node *cluster.Node, interval time.Duration, l *scrapeLog) {
	s := node.NewScraper(cluster.ExporterPort)
	defer s.Close()
	for next := time.Now(); ; next = next.Add(interval) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		at := time.Now()
		_, err := s.Scrape(ctx)
		if ctx.Err() != nil {
			return // stopped during the scrape
		}
		l.mu.Lock()
		l.scrapes = append(l.scrapes, scrapeResult{at: at, took: time.Since(at), err: err})
		l.mu.Unlock()
	}
}

// pprofTop is the first lines of `go tool pprof -top` of a profile (flat time per function), or why not.
func pprofTop(ctx context.Context, profile string, lines int, flags ...string) string {
	args := append(append([]string{"tool", "pprof", "-top", "-nodecount=" + strconv.Itoa(lines)}, flags...), profile)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v: %s", err, out)
	}
	return string(out)
}

// envSizes reads a list of Service counts separated by spaces or commas, sorted (a run only adds Services).
func envSizes(tb testing.TB, name string, def []int) []int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var sizes []int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fatalf(tb, "%s=%q: want Service counts, separated by spaces or commas", name, v)
		}
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// envDuration reads a duration (time.ParseDuration's syntax).
func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		fatalf(tb, "%s=%q: want a duration such as 5m", name, v)
	}
	return d
}
