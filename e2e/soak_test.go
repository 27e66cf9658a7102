package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/leak"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// soakDuration is $SOAK (`make soak` sets 30m); the e2e suite, and so CI, runs 3 minutes.
func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("SOAK")
	if s == "" {
		return 3 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute {
		fatalf(t, "SOAK=%q: want a duration of at least 1m", s)
	}
	return d
}

const (
	soakNS           = "e2e-soak"
	soakChurnSvcs    = 200
	soakChangeEvery  = 200 * time.Millisecond // five API changes a second
	soakScrapers     = 4
	soakScrapeHeader = "10" // Prometheus' scrape timeout: no scrape may take longer
	// At rest after the soak, goroutines and open files are back to their baseline but for these: a few come
	// and go with the informers' watches.
	soakGoroutineSlack = 5
	soakFDSlack        = 3
)

// selfStats is one exporter's own process state, from its /metrics. heapGoal is the Go runtime's next GC
// target: the heap live at the last collection plus GOGC's margin, which follows what the process retains.
type selfStats struct{ goroutines, fds, rss, heapGoal float64 }

func readSelf(ctx context.Context, c *cluster.Cluster, node string) (selfStats, error) {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return selfStats{}, err
	}
	return selfStatsOf(m, node)
}

// selfStatsOf reads node's exporter's own state from one of its scrapes.
func selfStatsOf(m cluster.Metrics, node string) (selfStats, error) {
	var s selfStats
	for name, dst := range map[string]*float64{"go_goroutines": &s.goroutines, "process_open_fds": &s.fds,
		"process_resident_memory_bytes": &s.rss, "go_memstats_next_gc_bytes": &s.heapGoal} {
		v, ok, err := m.Value(name, cluster.Labels{"node": node})
		if err != nil || !ok {
			return s, fmt.Errorf("%s on %s: present %v, %v", name, node, ok, err)
		}
		*dst = v
	}
	return s, nil
}

// soakHostilePeer listens inside a node's namespace on a health check node port before kube-proxy can, and
// misbehaves: the exporter's probes of that Service meet it instead of kube-proxy.
func soakHostilePeer(t *testing.T, n *cluster.Node, port int, mode string) {
	t.Helper()
	l, err := netns.Listen(n.NS, fmt.Sprintf("%s:%d", n.IP, port))
	if err != nil {
		fatalln(t, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				buf := make([]byte, 4096)
				if _, err := conn.Read(buf); err != nil {
					return
				}
				switch mode {
				case "hang":
					_, _ = io.Copy(io.Discard, conn)
				case "flood":
					if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"); err != nil {
						return
					}
					chunk := []byte(strings.Repeat(`{"localEndpoints":1,`, 1024))
					for {
						if _, err := conn.Write(chunk); err != nil {
							return
						}
					}
				case "trickle":
					if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Slow: "); err != nil {
						return
					}
					for {
						if _, err := conn.Write([]byte("a")); err != nil {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
	}()
}

// soakSelfSamples collects, from every scrape under load after the warm-up, the exporter's own heap goal, RSS,
// goroutines and open files: four samples a second per node, taken from the scrapes the load makes anyway, so
// measuring adds no load and no pause of the main loop (a checkpoint, a restart) thins them.
type soakSelfSamples struct {
	mu      sync.Mutex
	started time.Time
	on      bool
	m       map[string]map[string][]leak.Sample // node → resource → samples
}

func (s *soakSelfSamples) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started, s.on, s.m = time.Now(), true, map[string]map[string][]leak.Sample{}
}

// stop ends the recording and returns what was recorded.
func (s *soakSelfSamples) stop() map[string]map[string][]leak.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = false
	return s.m
}

func (s *soakSelfSamples) record(node string, st selfStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on {
		return
	}
	at := time.Since(s.started)
	if s.m[node] == nil {
		s.m[node] = map[string][]leak.Sample{}
	}
	for name, v := range map[string]float64{"heap": st.heapGoal, "rss": st.rss, "goroutines": st.goroutines, "fds": st.fds} {
		s.m[node][name] = append(s.m[node][name], leak.Sample{At: at, Value: v})
	}
}

func peak(samples []leak.Sample) float64 {
	var most float64
	for _, x := range samples {
		most = max(most, x.Value)
	}
	return most
}

// soakScrapeStats collects every scrape of the soak.
type soakScrapeStats struct {
	mu       sync.Mutex
	n        int
	failures []string
	slowest  time.Duration
	over     int // scrapes that took longer than Prometheus' timeout
	slow     []string
}

func (s *soakScrapeStats) add(took time.Duration, err error, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.slowest = max(s.slowest, took)
	if took > 10*time.Second {
		s.over++
		if len(s.slow) < 10 {
			s.slow = append(s.slow, fmt.Sprintf("%.2fs %s", took.Seconds(), detail))
		}
	}
	if err != nil && len(s.failures) < 10 {
		s.failures = append(s.failures, err.Error())
	}
}

// TestSoak runs the shared cluster for $SOAK (3 minutes by default; `make soak` runs 30) under load: Service
// and EndpointSlice churn (five changes a second over 200 Services), a kube-proxy restart every few minutes,
// one kube-apiserver restart, scrapes every second from four clients on every node, and hostile peers on three
// health check node ports of node-1. It asserts that the exporters' goroutines and open file descriptors return
// to their baseline once the load stops, that none of heap, RSS, goroutines and open files grew over the run
// (package leak: a fitted trend over a sample a second, not two readings), that no scrape failed or took
// longer than Prometheus' timeout, and that at every checkpoint every node's verdict matches real traffic.
func TestSoak(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	promAgreeOptOut(t, "its restarts are timed from its start; the plugin's runs and the check's Prometheus start within it pushed them past its end")
	total := soakDuration(t)
	warmup := min(total/6, 2*time.Minute)
	kubeProxyEvery := min(total/3, 3*time.Minute)
	checkpointEvery := min(total/4, 2*time.Minute)
	apiRestartAt := warmup + (total-warmup)*2/5
	nodes := c.Nodes()
	n1 := c.Node("node-1")
	if err := c.EnsureNamespace(ctx, soakNS); err != nil {
		fatalln(t, err)
	}

	// Hostile health check node ports on node-1, bound before the Services exist so kube-proxy cannot.
	hostile := map[string]int{"hang": 32700, "flood": 32701, "trickle": 32702}
	for mode, port := range hostile {
		soakHostilePeer(t, n1, port, mode)
		svc := cluster.NewService(soakNS, "hostile-"+mode, corev1.ServiceTypeLoadBalancer, cluster.WithHealthCheckNodePort(int32(port)))
		if _, err := c.Admin().CoreV1().Services(soakNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() {
			_ = c.Admin().CoreV1().Services(soakNS).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
		})
	}

	// One pool pod per node backs the churned Services' endpoints; the checkpoint Service has pods of its own.
	var pool []*cluster.Pod
	for _, n := range nodes {
		pool = append(pool, startPodsNamed(t, c, soakNS, "pool-"+n.Name, n.Name)...)
	}
	churned := make([]string, soakChurnSvcs)
	{
		for i := range churned {
			churned[i] = fmt.Sprintf("churn-%03d", i)
		}
		churn := cluster.Bulk{
			Namespace: soakNS,
			Service:   func(i int) *corev1.Service { return cluster.NewService(soakNS, churned[i], corev1.ServiceTypeNodePort) },
			// Single-stack IPv4 (what a Service that asks for nothing gets): SetEndpoints' one slice.
			Slice: func(svc *corev1.Service, i int) *discoveryv1.EndpointSlice {
				return cluster.SliceOf(svc, corev1.IPv4Protocol, []cluster.Endpoint{{Pod: pool[i%len(pool)]}})
			},
		}
		if err := c.CreateBulk(ctx, churn, 0, len(churned)); err != nil {
			fatalf(t, "creating the churned Services: %v", err)
		}
		t.Cleanup(func() {
			for _, name := range churned {
				_ = c.Admin().DiscoveryV1().EndpointSlices(soakNS).Delete(context.Background(), cluster.SliceName(name), metav1.DeleteOptions{})
				_ = c.Admin().CoreV1().Services(soakNS).Delete(context.Background(), name, metav1.DeleteOptions{})
			}
		})
	}
	probe := newService(t, c, soakNS, "checkpoint", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	probePods := map[string]*cluster.Pod{}
	for _, n := range nodes {
		probePods[n.Name] = startPods(t, c, probe, n.Name)[0]
	}

	// The load: churn and scrapers, each pausable so that baselines are taken at rest.
	var paused atomic.Bool
	var changes, changeErrs atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var load sync.WaitGroup
	load.Add(1)
	go func() { // several API changes a second: EndpointSlices mostly, Services too
		defer load.Done()
		tick := time.NewTicker(soakChangeEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			if paused.Load() {
				continue
			}
			name := churned[rand.N(len(churned))]
			var err error
			if i%5 == 4 {
				err = touchService(loadCtx, c, soakNS, name, i)
			} else {
				var eps []cluster.Endpoint
				for _, p := range pool {
					if rand.N(2) == 0 {
						eps = append(eps, cluster.Endpoint{Pod: p})
					}
				}
				err = c.SetEndpoints(loadCtx, soakNS, name, eps)
			}
			changes.Add(1)
			if err != nil {
				changeErrs.Add(1) // expected while kube-apiserver restarts
			}
		}
	}()
	scrapes := &soakScrapeStats{}
	self := &soakSelfSamples{}
	var transports []*http.Transport
	for range soakScrapers {
		for _, n := range nodes {
			tr := &http.Transport{DialContext: n.Dialer().DialContext}
			transports = append(transports, tr)
			client := &http.Client{Transport: tr, Timeout: 60 * time.Second} // a hang guard; the bound is checked below
			load.Add(1)
			go func() {
				defer load.Done()
				for {
					next := time.Now().Add(time.Second)
					if !paused.Load() {
						took, detail, err := soakScrape(loadCtx, client, n, self)
						if loadCtx.Err() != nil {
							return
						}
						scrapes.add(took, err, detail)
					}
					select {
					case <-loadCtx.Done():
						return
					case <-time.After(time.Until(next)):
					}
				}
			}()
		}
	}
	// atRest pauses the load and reads every exporter's own state once in-flight work has ended: with base
	// nil, after the 10 s scrape timeout and the 5 s probe timeout have passed; with a baseline, as soon as
	// goroutines and open files are back to it (a few come and go with the informers' watches: the slack is
	// that, not growth), or at the deadline, the reading the assertions below then fail on.
	atRest := func(what string, base map[string]selfStats) map[string]selfStats {
		paused.Store(true)
		defer paused.Store(false)
		time.Sleep(12 * time.Second) // scrapes in flight end within their 10 s timeout; probes within 5 s
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
		out := map[string]selfStats{}
		_ = cluster.Eventually(ctx, time.Minute, time.Second, func() error {
			var errs []error
			for _, n := range nodes {
				s, err := readSelf(ctx, c, n.Name)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out[n.Name] = s
				if b, ok := base[n.Name]; ok && (s.goroutines > b.goroutines+soakGoroutineSlack || s.fds > b.fds+soakFDSlack) {
					errs = append(errs, fmt.Errorf("%s not back to its baseline", n.Name))
				}
			}
			return errors.Join(errs...)
		})
		for _, n := range nodes {
			s, ok := out[n.Name]
			if !ok {
				fatalf(t, "%s: %s: no reading of the exporter's own metrics", what, n.Name)
			}
			t.Logf("%s: %s: %.0f goroutines, %.0f fds, RSS %.1f MiB, heap goal %.1f MiB", what, n.Name, s.goroutines, s.fds,
				s.rss/(1<<20), s.heapGoal/(1<<20))
		}
		return out
	}

	start := time.Now()
	time.Sleep(warmup)
	base := atRest("baseline after warm-up", nil)
	self.start() // from now on every scrape's own figures are leak check samples

	checkpoint := 0
	nextCheckpoint := time.Now().Add(checkpointEvery)
	nextKubeProxy := time.Now().Add(kubeProxyEvery)
	kubeProxyRestarts, apiRestarted := 0, false
	for time.Since(start) < total {
		time.Sleep(time.Second)
		switch {
		case !apiRestarted && time.Since(start) >= apiRestartAt:
			apiRestarted = true
			c.StopAPIServer()
			time.Sleep(10 * time.Second)
			if err := c.StartAPIServer(ctx); err != nil {
				fatalln(t, err)
			}
			t.Logf("%s: kube-apiserver restarted", time.Since(start).Round(time.Second))
		case time.Now().After(nextKubeProxy):
			n := nodes[kubeProxyRestarts%len(nodes)]
			kubeProxyRestarts++
			n.StopKubeProxy()
			if err := n.StartKubeProxy(ctx, cluster.KubeProxyOptions{}); err != nil {
				fatalln(t, err)
			}
			if err := n.WaitKubeProxyHealthy(ctx, converge); err != nil {
				fatalln(t, err)
			}
			nextKubeProxy = time.Now().Add(kubeProxyEvery)
			t.Logf("%s: kube-proxy restarted on %s", time.Since(start).Round(time.Second), n.Name)
		case time.Now().After(nextCheckpoint):
			checkpoint++
			soakCheckpoint(t, c, probe, probePods, nodes[checkpoint%len(nodes)].Name)
			nextCheckpoint = time.Now().Add(checkpointEvery)
			t.Logf("%s: checkpoint %d: every verdict matches real traffic", time.Since(start).Round(time.Second), checkpoint)
		}
	}
	checkpoint++
	soakCheckpoint(t, c, probe, probePods, nodes[checkpoint%len(nodes)].Name)
	samples := self.stop()
	final := atRest("at rest after the soak", base)
	stopLoad()
	load.Wait()

	t.Logf("soak %s: %d API changes (%d failed, during the kube-apiserver restart), %d kube-proxy restarts, %d checkpoints, %d scrapes, slowest %.2fs",
		total, changes.Load(), changeErrs.Load(), kubeProxyRestarts, checkpoint, scrapes.n, scrapes.slowest.Seconds())
	if len(scrapes.failures) > 0 {
		errorf(t, "%d scrapes failed, e.g.:\n%s", len(scrapes.failures), strings.Join(scrapes.failures, "\n"))
	}
	if scrapes.over > 0 {
		errorf(t, "%d scrapes took longer than Prometheus' %s s timeout (slowest %.2fs; load average %s):\n%s", scrapes.over,
			soakScrapeHeader, scrapes.slowest.Seconds(), loadAverage(), strings.Join(scrapes.slow, "\n"))
	}
	if !apiRestarted || kubeProxyRestarts == 0 {
		errorf(t, "the soak did not restart kube-apiserver (%v) and kube-proxy (%d times)", apiRestarted, kubeProxyRestarts)
	}
	names := make([]string, 0, len(final))
	for name := range final {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, f := base[name], final[name]
		if f.goroutines > b.goroutines+soakGoroutineSlack {
			errorf(t, "%s: %.0f goroutines at rest after the soak, %.0f after warm-up", name, f.goroutines, b.goroutines)
		}
		if f.fds > b.fds+soakFDSlack {
			errorf(t, "%s: %.0f open fds at rest after the soak, %.0f after warm-up", name, f.fds, b.fds)
		}
		// Under load, the trend of each resource over the run (package leak: growth in both halves of the run,
		// not the difference between two readings).
		for _, j := range []struct {
			resource string
			bound    leak.Bound
		}{{"heap", leak.HeapBound()}, {"rss", leak.RSSBound()}, {"goroutines", leak.GoroutineBound()}, {"fds", leak.FDBound()}} {
			v, err := leak.Judge(name+" "+j.resource, samples[name][j.resource], j.bound)
			switch {
			case err != nil:
				errorf(t, "leak check: %v", err)
			case v.Leak:
				errorf(t, "leak check: %s", v)
			default:
				t.Logf("leak check: %s", v)
			}
		}
		t.Logf("%s: goroutines %.0f → %.0f, fds %.0f → %.0f, RSS %.1f → %.1f MiB (peak %.1f MiB)", name,
			b.goroutines, f.goroutines, b.fds, f.fds, b.rss/(1<<20), f.rss/(1<<20), peak(samples[name]["rss"])/(1<<20))
	}
}

func startPodsNamed(t *testing.T, c *cluster.Cluster, ns, name, node string) []*cluster.Pod {
	t.Helper()
	p, err := c.StartPod(testContext(t), cluster.PodConfig{Namespace: ns, Name: name, Node: node, Ports: []int{backendPort}})
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), ns, name) })
	return []*cluster.Pod{p}
}

// touchService changes a churned Service (an annotation): a Service event for every informer and kube-proxy.
func touchService(ctx context.Context, c *cluster.Cluster, ns, name string, i int) error {
	svc, err := c.Admin().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations["e2e.localtraffic.io/churn"] = fmt.Sprint(i)
	_, err = c.Admin().CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
	return err
}

// soakScrape is one Prometheus-like scrape of n's exporter. detail names the node, the time to the response
// headers and the exporter's own collector durations: where a slow scrape spent its time.
func soakScrape(ctx context.Context, client *http.Client, n *cluster.Node, self *soakSelfSamples) (time.Duration, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.MetricsURL(), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", soakScrapeHeader)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return time.Since(start), n.Name, fmt.Errorf("%s: %w", n.Name, err)
	}
	headers := time.Since(start)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	detail := fmt.Sprintf("%s: headers after %.2fs", n.Name, headers.Seconds())
	if m, perr := cluster.ParseMetrics(string(body)); perr == nil {
		if st, err := selfStatsOf(m, n.Name); err == nil {
			self.record(n.Name, st)
		}
		for _, s := range m.Series("localtraffic_scrape_collector_duration_seconds", cluster.Labels{"node": n.Name}) {
			for _, l := range s.GetLabel() {
				if l.GetName() == "collector" {
					detail += fmt.Sprintf(", %s %.2fs", l.GetValue(), s.GetGauge().GetValue())
				}
			}
		}
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		return took, detail, fmt.Errorf("%s: status %d, %v", n.Name, resp.StatusCode, err)
	}
	if !strings.Contains(string(body), `localtraffic_scrape_collector_success{collector="services",node="`+n.Name+`"} 1`) {
		return took, detail, fmt.Errorf("%s: the services collector failed", n.Name)
	}
	return took, detail, nil
}

// soakCheckpoint moves the checkpoint Service's endpoint to node only, then waits until, on every node, the
// exporter's verdict and a real request agree: node serves it locally and reports no blackhole; every other
// node drops it and reports a blackhole.
func soakCheckpoint(t *testing.T, c *cluster.Cluster, probe *corev1.Service, pods map[string]*cluster.Pod, node string) {
	t.Helper()
	ctx := testContext(t)
	eventually(t, converge, "checkpoint endpoints written", func() error {
		return c.SetEndpoints(ctx, probe.Namespace, probe.Name, ready(pods[node]))
	})
	for _, n := range c.Nodes() {
		eventually(t, converge, "checkpoint: verdict matches traffic on "+n.Name, func() error {
			r := c.Request(ctx, nodePortAddr(n, probe))
			want, verdict := 1.0, wantVerdict(r, cluster.Blackhole, n.Name)
			if n.Name == node {
				want, verdict = 0, wantServedLocally(r, n.Name)
			}
			return errors.Join(verdict, expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", svcLabels(probe, n.Name), want)))
		})
	}
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
