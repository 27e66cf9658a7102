package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestScaleRules: the rule reader on rules written by a real kube-proxy (v1.37.2) that has synced many Local
// NodePort Services, on three nodes of a cluster of its own: node-1 iptables mode with the legacy backend, node-2
// iptables mode with the nft backend, node-3 nftables mode. Every Service has an endpoint on a node that does not
// exist, so each node drops it (filter's "has no local endpoints" rules, nftables mode's drop verdicts), and every
// tenth one also has a local endpoint on each node (nat's local-endpoint chains). On each node, with this
// package's build of nodeprobe/kernelrules's test binary run inside the node's namespace (the reader as the exporter
// uses it, ExecRunner and all):
//
//   - at rest, steady-state reads give the same snapshot as a full read, with the counts created
//     (TestOnNodeSteadyEqualsFull);
//   - one Service loses its last local endpoints: each node's steady-state reads, back to back, show the drop,
//     and that snapshot equals a full read's (TestOnNodeWatchDrop); the time from the API write to that read is
//     logged (detection latency at this scale: kube-proxy's sync plus at most one read);
//   - BenchmarkOnNode: bare save vs steady-state read vs full read (x-of-save);
//   - each exporter's CPU seconds per scrape (its process_cpu_seconds_total over scrapes 2.5 s apart, so each
//     scrape reads the rules: the cache holds 2 s), logged.
//
// 500 Services by default (what `make e2e` runs, a minute or two). The full run, 10,000 Services:
//
//	cd e2e && LT_SCALE_SERVICES=10000 LT_SCALE_BENCHTIME=20x LT_SCALE_CHANGES=5 LT_SCALE_SCRAPES=8 \
//	    go test -run '^TestScaleRules$' -v -timeout 90m .
//
// Figures are logged, never asserted (docs/performance.md records them).
func TestScaleRules(t *testing.T) {
	requireRoot(t)
	n := envInt(t, "LT_SCALE_SERVICES", 500)
	changes := envInt(t, "LT_SCALE_CHANGES", 2)
	scrapes := envInt(t, "LT_SCALE_SCRAPES", 3)
	benchtime := os.Getenv("LT_SCALE_BENCHTIME")
	if benchtime == "" {
		benchtime = "1x"
	}
	ctx := testContext(t)
	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Config{
		Name: "scale",
		Nodes: []cluster.NodeConfig{
			{Name: "node-1", ProxyMode: cluster.IPTables},
			{Name: "node-2", ProxyMode: cluster.IPTables},
			{Name: "node-3", ProxyMode: cluster.NFTables},
		},
		Log: os.Stderr,
	})
	if err != nil {
		fatalln(t, err)
	}
	defer c.Close()
	backends := map[string]string{"node-1": "legacy", "node-2": "nft"}
	if n+1000 > 2768 {
		r := fmt.Sprintf("30000-%d", 30000+n+1000)
		if err := c.SetNodePortRange(ctx, r); err != nil {
			fatalln(t, err)
		}
		t.Logf("node port range %s", r)
	}
	// kube-proxy is stopped while the Services are written (each sync of a growing nft-backend ruleset takes up
	// to 20 s of CPU here, and slows the writes down to minutes) and started once they are all there: its first
	// sync is a full one, as after any kube-proxy restart.
	for _, node := range c.Nodes() {
		node.StopKubeProxy()
	}
	var names []string
	for _, node := range c.Nodes() {
		names = append(names, node.Name)
	}
	set := cluster.ScaleServices{Namespace: "scale", Count: n, LocalEvery: 10, LocalNodes: names}
	t0 := time.Now()
	if err := c.CreateBulk(ctx, set.Bulk(), 0, set.Count); err != nil {
		fatalln(t, err)
	}
	t.Logf("%d Services and EndpointSlices created in %s", n, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	for _, node := range c.Nodes() {
		var err error
		if b := backends[node.Name]; b != "" {
			err = node.StartKubeProxyWithBackend(ctx, b)
		} else {
			err = node.StartKubeProxy(ctx, cluster.KubeProxyOptions{})
		}
		if err != nil {
			fatalln(t, err)
		}
	}
	for _, node := range c.Nodes() {
		if err := node.WaitKubeProxyHealthy(ctx, 5*time.Minute); err != nil {
			fatalln(t, err)
		}
	}
	syncTimeout := 5*time.Minute + time.Duration(n)*100*time.Millisecond
	var wg sync.WaitGroup
	syncErr := make([]error, len(c.Nodes()))
	for i, node := range c.Nodes() {
		wg.Go(func() {
			syncErr[i] = node.WaitKubeProxySynced(ctx, syncTimeout)
			t.Logf("%s: kube-proxy synced %s after its start", node.Name, time.Since(t0).Round(time.Millisecond))
		})
	}
	wg.Wait()
	for _, err := range syncErr {
		if err != nil {
			fatalln(t, err)
		}
	}
	bin, err := cluster.BuildRulesTest(ctx, c.WorkDir)
	if err != nil {
		fatalln(t, err)
	}
	local := 0
	for i := range n {
		if set.HasLocal(i) {
			local++
		}
	}
	expect := fmt.Sprintf("ports=%d,drops=%d,local=%d", n, n-local, local)

	// At rest: steady equals full, with the counts created.
	for _, node := range c.Nodes() {
		out, err := runOnNode(ctx, node, bin, "-rules.expect="+expect,
			"-rules.expect-services="+fmt.Sprintf("%s/%%05d:%s:%d", set.Namespace, cluster.ScalePortName, n), "-rules.expect-wait=5m",
			"-test.run", "^TestOnNodeSteadyEqualsFull$", "-test.v")
		t.Logf("%s (%s):\n%s", node.Name, modeOf(node, backends), out)
		if err != nil {
			fatalf(t, "%s: steady-state snapshot at rest: %v", node.Name, err)
		}
	}

	// Detection: a Service loses its local endpoints on every node at once.
	for k := range changes {
		i := k * set.LocalEvery
		watch := fmt.Sprintf("%s/%s:%s", set.Namespace, cluster.ScaleServiceName(i), cluster.ScalePortName)
		latencies, err := watchDrop(ctx, c, bin, watch, func() error { return c.SetScaleLocal(ctx, set, i, false) })
		if err != nil {
			fatalf(t, "change %d (%s): %v", k+1, watch, err)
		}
		t.Logf("change %d: %s lost its local endpoints; API write → steady-state snapshot shows the drop: %s", k+1, watch, latencies)
	}

	// The benchmark, one node after the other (each saves the whole table: they would slow each other).
	for _, node := range c.Nodes() {
		out, err := runOnNode(ctx, node, bin, "-test.run", "^$", "-test.bench", "^BenchmarkOnNode$", "-test.benchtime", benchtime, "-test.benchmem")
		t.Logf("%s (%s), %d Services:\n%s", node.Name, modeOf(node, backends), n, out)
		if err != nil {
			fatalf(t, "%s: BenchmarkOnNode: %v", node.Name, err)
		}
	}

	// The exporter's CPU per scrape, rules mode on (the default auto).
	if err := c.StartExporters(ctx); err != nil {
		fatalln(t, err)
	}
	// The nodes at once: each exporter's own CPU seconds are what is measured, not the wall time.
	cpus := make([]string, len(c.Nodes()))
	cpuErr := make([]error, len(c.Nodes()))
	for i, node := range c.Nodes() {
		wg.Go(func() { cpus[i], cpuErr[i] = exporterCPU(ctx, c, node.Name, scrapes) })
	}
	wg.Wait()
	for i, node := range c.Nodes() {
		if cpuErr[i] != nil {
			fatalf(t, "%s: %v", node.Name, cpuErr[i])
		}
		t.Logf("%s (%s), %d Services: exporter %s", node.Name, modeOf(node, backends), n, cpus[i])
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Second))
}

func modeOf(n *cluster.Node, backends map[string]string) string {
	if b := backends[n.Name]; b != "" {
		return "iptables, " + b + " backend"
	}
	return string(n.ProxyMode)
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		fatalf(t, "%s=%q: want a count", name, v)
	}
	return n
}

// runOnNode runs the rules test binary inside the node's namespace (-rules.on-node) and returns its output.
func runOnNode(ctx context.Context, n *cluster.Node, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := n.CommandOnNode(ctx, bin, append([]string{"-rules.on-node"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// watchDrop starts TestOnNodeWatchDrop on every node, waits until each says ready, makes the change, and
// returns each node's time from the change to its first snapshot showing the drop.
func watchDrop(ctx context.Context, c *cluster.Cluster, bin, watch string, change func() error) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	type watcher struct {
		node  *cluster.Node
		proc  *cluster.Process
		lines chan string
		out   *bytes.Buffer
	}
	var ws []*watcher
	defer func() {
		for _, w := range ws {
			w.proc.Stop(0) // a watcher still running is killed (its process group)
		}
	}()
	for _, node := range c.Nodes() {
		w := &watcher{node: node, lines: make(chan string, 16), out: &bytes.Buffer{}}
		pr, pw := io.Pipe()
		var err error
		w.proc, err = cluster.StartProcess(cluster.ProcessSpec{Name: "rules-watch-" + node.Name, LogDir: c.WorkDir, NS: node.NS,
			Bin: bin, Args: []string{"-rules.on-node", "-rules.watch=" + watch, "-test.run", "^TestOnNodeWatchDrop$", "-test.v"},
			Stdout: pw, Stderr: pw})
		if err != nil {
			return "", err
		}
		go func() {
			s := bufio.NewScanner(pr)
			for s.Scan() {
				w.out.WriteString(s.Text() + "\n")
				if l, ok := strings.CutPrefix(s.Text(), "lt-watch: "); ok {
					w.lines <- l
				}
			}
			close(w.lines)
		}()
		go func() {
			<-w.proc.Done()
			pw.Close()
		}()
		ws = append(ws, w)
	}
	next := func(w *watcher, want string) (int64, error) {
		select {
		case l, ok := <-w.lines:
			if !ok {
				return 0, fmt.Errorf("%s: watcher ended before %q:\n%s", w.node.Name, want, w.out)
			}
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != want {
				return 0, fmt.Errorf("%s: watcher said %q, want %q", w.node.Name, l, want)
			}
			return strconv.ParseInt(f[1], 10, 64)
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: waiting for %q: %w:\n%s", w.node.Name, want, ctx.Err(), w.out)
		}
	}
	for _, w := range ws {
		if _, err := next(w, "ready"); err != nil {
			return "", err
		}
	}
	t0 := time.Now()
	if err := change(); err != nil {
		return "", err
	}
	var parts []string
	for _, w := range ws {
		at, err := next(w, "drop")
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %s", w.node.Name, time.Unix(0, at).Sub(t0).Round(time.Millisecond)))
	}
	for _, w := range ws {
		for range w.lines {
		}
		if err := w.proc.Wait(); err != nil {
			return "", fmt.Errorf("%s: %v:\n%s", w.node.Name, err, w.out)
		}
	}
	return strings.Join(parts, ", "), nil
}

// idleWindow: how long exporterCPU leaves the exporter alone to see its CPU at rest.
const idleWindow = 5 * time.Second

// exporterCPU scrapes the node's exporter scrapes times, 2.5 s apart (past the 2 s rules cache: every scrape
// reads the rules), and reports process CPU seconds per scrape, the CPU used while idle before, and RSS.
func exporterCPU(ctx context.Context, c *cluster.Cluster, node string, scrapes int) (string, error) {
	value := func(m cluster.Metrics, name string) (float64, error) {
		v, ok, err := m.Value(name, nil)
		if err == nil && !ok {
			err = fmt.Errorf("no %s", name)
		}
		return v, err
	}
	// A first scrape fills the informers' and the rules' state.
	if _, err := c.Metrics(ctx, node); err != nil {
		return "", err
	}
	m0, err := c.Metrics(ctx, node)
	if err != nil {
		return "", err
	}
	idle0, err := value(m0, "process_cpu_seconds_total")
	if err != nil {
		return "", err
	}
	time.Sleep(idleWindow)
	m1, err := c.Metrics(ctx, node)
	if err != nil {
		return "", err
	}
	cpu1, err := value(m1, "process_cpu_seconds_total")
	if err != nil {
		return "", err
	}
	var wall time.Duration
	var series int
	for range scrapes {
		time.Sleep(2500 * time.Millisecond)
		t0 := time.Now()
		text, err := c.ScrapeText(ctx, node)
		if err != nil {
			return "", err
		}
		wall += time.Since(t0)
		series = strings.Count(text, "\n") - strings.Count(text, "\n#")
	}
	m2, err := c.Metrics(ctx, node)
	if err != nil {
		return "", err
	}
	cpu2, err := value(m2, "process_cpu_seconds_total")
	if err != nil {
		return "", err
	}
	rss, err := value(m2, "process_resident_memory_bytes")
	if err != nil {
		return "", err
	}
	// CPU per scrape: everything the process used over the scrapes (the timed ones and the closing one, each
	// a rules read), idle time between them included; the idle rate (idleWindow with one scrape at its end)
	// says how little of it is not the scrape's.
	perScrape := (cpu2 - cpu1) / float64(scrapes+1)
	return fmt.Sprintf("CPU %.3f s per scrape (%d scrapes 2.5 s apart: %.2f s of CPU), idle %.3f s of CPU in %s, wall %s per scrape, %d series, RSS %.1f MiB",
		perScrape, scrapes+1, cpu2-cpu1, cpu1-idle0, idleWindow, (wall / time.Duration(scrapes)).Round(time.Millisecond), series, rss/(1<<20)), nil
}
