package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The exporter's memory at scale: the real exporter binary, started as the harness starts it, on a
// cluster of its own holding N Local Services with one EndpointSlice of 100 endpoints each, none on the
// exporter's node. The exporter runs in API-only mode (--rules.mode=none): the rule reader's memory is the rule
// benchmarks' business (nodeprobe/kernelrules), and without kube-proxy on the node — stopped, so that 200,000
// endpoints' worth of iptables rules do not eat the two cores the measurement shares — there are no rules to
// read anyway. What is measured is what grows with the cluster: the informers.

// memoryBudget is the target: RSS at most 40 MiB with 2,000 Services and 200,000 endpoints.
const memoryBudget = 40 << 20

// memoryFlatSlack is how much RSS may grow from no Service to memoryCIServices Services (20,000 endpoints)
// in the CI variant: the transform keeps a slice at about 1.3 kB (docs/performance.md), so 200 slices and
// Services are well under 1 MiB; the rest is allocator and GC slack on a second measurement.
const memoryFlatSlack = 6 << 20

// memoryCIServices is the CI variant's population (make e2e): 200 Services, 20,000 endpoints.
const memoryCIServices = 200

// scaleNamespace holds the scale Services.
const scaleNamespace = "mem-scale"

// memorySample is one exporter's memory once it has synced and shows every Service.
type memorySample struct {
	rss, hwm, anon, file                int64   // /proc/<pid>/status VmRSS, VmHWM, RssAnon, RssFile
	heapInuse, heapAlloc, goSys, nextGC float64 // the exporter's own go_memstats_* gauges
	syncTime                            time.Duration
}

func (m memorySample) String() string {
	out := fmt.Sprintf("RSS %.1f MiB (anon %.1f, file %.1f), HWM %.1f MiB, synced in %s",
		mib(m.rss), mib(m.anon), mib(m.file), mib(m.hwm), m.syncTime.Round(10*time.Millisecond))
	if m.goSys > 0 { // read from a scrape: the view-only sample has none
		out += fmt.Sprintf("; heap in use %.1f MiB, heap alloc %.1f MiB, Go sys %.1f MiB, next GC %.1f MiB",
			m.heapInuse/(1<<20), m.heapAlloc/(1<<20), m.goSys/(1<<20), m.nextGC/(1<<20))
	}
	return out
}

func mib[T int64 | float64](v T) float64 { return float64(v) / (1 << 20) }

// scaleCluster starts a one-node cluster of its own (namespaces lte2e-<pid>-mem-*) with kube-proxy stopped
// and no exporter, closed at the end of tb.
func scaleCluster(tb testing.TB) *cluster.Cluster {
	tb.Helper()
	requireRoot(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Config{Name: "mem", Nodes: cluster.DefaultNodes(1), Log: os.Stderr})
	if err != nil {
		fatalf(tb, "scale cluster: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	c.Nodes()[0].StopKubeProxy()
	return c
}

// growScale creates scale Services until the namespace holds n of them.
func growScale(tb testing.TB, c *cluster.Cluster, have *int, n int) {
	tb.Helper()
	if n <= *have {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	if err := c.CreateBulk(ctx, cluster.Population{Namespace: scaleNamespace}.Bulk(), *have, n); err != nil {
		fatalln(tb, err)
	}
	tb.Logf("created Services %d..%d with 100 endpoints each in %s", *have, n-1, time.Since(start).Round(time.Second))
	*have = n
}

// settleScrapes is how many scrapes, one a second, a sample waits after the exporter first shows every
// Service: Prometheus scrapes it from then on, and the memory it runs at is the one after a few scrapes.
const settleScrapes = 10

// measureExporter starts the node's exporter in API-only mode, samples it (sampleExporter) and stops it.
func measureExporter(tb testing.TB, c *cluster.Cluster, want int) (view, scraped memorySample) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := c.Nodes()[0]
	start := time.Now()
	if err := n.StartExporter(ctx, "--rules.mode=none"); err != nil {
		fatalln(tb, err)
	}
	defer n.StopExporter()
	return sampleExporter(tb, c, want, start)
}

// sampleExporter waits until the running exporter (started at start) has synced — /readyz, which scrapes
// nothing — samples its memory then (the view alone: no scrape has run yet; the median of procReadings
// readings), checks that a scrape shows want Services, and samples again over settleScrapes scrapes (the
// median reading of the second half).
func sampleExporter(tb testing.TB, c *cluster.Cluster, want int, start time.Time) (view, scraped memorySample) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := c.Nodes()[0]
	client := &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	readyz := fmt.Sprintf("http://%s:%d/readyz", n.IP, cluster.ExporterPort)
	err := cluster.Eventually(ctx, 5*time.Minute, 100*time.Millisecond, func() error {
		if _, err := n.ExporterPID(); err != nil {
			return err
		}
		resp, err := client.Get(readyz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		fatalf(tb, "exporter with %d Services never ready: %v\n%s", want, err, c.LogTail("exporter-"+n.Name, 2000))
	}
	view.syncTime = time.Since(start)
	// The view alone: the median of several readings over a few seconds (the exporter frees the initial lists'
	// garbage right after the sync, and one reading of a Go process's RSS is as noisy as its GC's last cycle).
	var readings []memorySample
	for i := range procReadings {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		var r memorySample
		readProc(tb, n, &r)
		readings = append(readings, r)
	}
	view = medianRSS(readings, view)
	err = cluster.Eventually(ctx, time.Minute, 500*time.Millisecond, func() error { return showsServices(ctx, c, n.Name, want) })
	if err != nil {
		fatalf(tb, "exporter with %d Services: %v\n%s", want, err, c.LogTail("exporter-"+n.Name, 2000))
	}
	// After the settling scrapes: the median reading of the second half of them.
	var m cluster.Metrics
	readings = readings[:0]
	for i := range settleScrapes {
		if i > 0 {
			time.Sleep(time.Second)
		}
		if m, err = c.Metrics(ctx, n.Name); err != nil {
			fatalln(tb, err)
		}
		if i >= settleScrapes/2 {
			var r memorySample
			readProc(tb, n, &r)
			readings = append(readings, r)
		}
	}
	scraped = medianRSS(readings, memorySample{syncTime: view.syncTime})
	for name, dst := range map[string]*float64{
		"go_memstats_heap_inuse_bytes": &scraped.heapInuse, "go_memstats_heap_alloc_bytes": &scraped.heapAlloc,
		"go_memstats_sys_bytes": &scraped.goSys, "go_memstats_next_gc_bytes": &scraped.nextGC,
	} {
		v, ok, err := m.Value(name, nil)
		if err != nil || !ok {
			fatalf(tb, "exporter metrics: %s: %v (present %v)", name, err, ok)
		}
		*dst = v
	}
	return view, scraped
}

// showsServices is nil once a scrape of node's exporter shows want Services (localtraffic_local_endpoints is
// one of the default series of every Local Service).
func showsServices(ctx context.Context, c *cluster.Cluster, node string, want int) error {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return err
	}
	if got := len(m.Series("localtraffic_local_endpoints", nil)); got != want {
		return fmt.Errorf("scrape shows %d Services, want %d", got, want)
	}
	return nil
}

// procReadings is how many /proc readings, half a second apart, make the view's sample.
const procReadings = 7

// medianRSS returns into's copy with the /proc figures of the reading whose RSS is the median of readings:
// what the sample asserts on is then not one GC cycle's accident.
func medianRSS(readings []memorySample, into memorySample) memorySample {
	sorted := append([]memorySample(nil), readings...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].rss < sorted[j].rss })
	m := sorted[len(sorted)/2]
	into.rss, into.hwm, into.anon, into.file = m.rss, m.hwm, m.anon, m.file
	return into
}

// readProc fills s from the exporter's /proc/<pid>/status.
func readProc(tb testing.TB, n *cluster.Node, s *memorySample) {
	tb.Helper()
	pid, err := n.ExporterPID()
	if err != nil {
		fatalln(tb, err)
	}
	st, err := cluster.ReadProcStatus(pid)
	if err != nil {
		fatalln(tb, err)
	}
	s.rss, s.hwm, s.anon, s.file = st.VmRSS, st.VmHWM, st.RssAnon, st.RssFile
}

// report reports the sample after the settling scrapes, and view's RSS (before the first scrape).
func (m memorySample) report(b *testing.B, view memorySample) {
	b.ReportMetric(mib(m.rss), "RSS-MiB")
	b.ReportMetric(mib(m.hwm), "HWM-MiB")
	b.ReportMetric(mib(m.anon), "anon-MiB")
	b.ReportMetric(mib(m.file), "file-MiB")
	b.ReportMetric(m.heapInuse/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(m.goSys/(1<<20), "go-sys-MiB")
	b.ReportMetric(mib(view.rss), "RSS-before-scrapes-MiB")
	b.ReportMetric(m.syncTime.Seconds(), "sync-s")
}

// BenchmarkExporterMemory is the exporter's memory with no Service, then 200, 1,000 and 2,000 Local Services
// of 100 remote endpoints each (20k, 100k, 200k endpoints), one fresh exporter per iteration: once synced
// before any scrape (RSS-before-scrapes-MiB: the view alone), and after settleScrapes scrapes (the other
// figures). The population grows between sub-benchmarks and stays: run them in this order, with -benchtime 1x
// (make scale-memory).
//
//	cd e2e && go test -run '^$' -bench ExporterMemory -benchtime 1x -timeout 60m
func BenchmarkExporterMemory(b *testing.B) {
	c := scaleCluster(b)
	have := 0
	for _, services := range []int{0, 200, 1000, 2000} {
		b.Run("services="+strconv.Itoa(services), func(b *testing.B) {
			growScale(b, c, &have, services)
			var view, scraped memorySample
			for range b.N {
				view, scraped = measureExporter(b, c, services)
				b.Logf("%d Services, %d endpoints: synced, before any scrape: %s", services, services*100, view)
				b.Logf("%d Services, %d endpoints: after %d scrapes: %s", services, services*100, settleScrapes, scraped)
			}
			scraped.report(b, view)
		})
	}
}

// TestScaleMemory is the short variant make e2e runs, with 200 Services of 100 remote endpoints (20,000
// endpoints): the exporter stays within the 40 MiB budget after settleScrapes scrapes, and the view's own
// memory (synced, before any scrape) grows by at most memoryFlatSlack over no Service at all. RSS is a size,
// not a time: asserting on it is as deterministic as the Go runtime's pacing.
func TestScaleMemory(t *testing.T) {
	c := scaleCluster(t)
	emptyView, empty := measureExporter(t, c, 0)
	t.Logf("no Service: before any scrape %s\n  after %d scrapes %s", emptyView, settleScrapes, empty)
	have := 0
	growScale(t, c, &have, memoryCIServices)
	fullView, full := measureExporter(t, c, memoryCIServices)
	t.Logf("%d Services, %d endpoints: before any scrape %s\n  after %d scrapes %s", memoryCIServices, memoryCIServices*100, fullView, settleScrapes, full)
	if full.rss > memoryBudget {
		errorf(t, "RSS %.1f MiB with %d Services, budget %.0f MiB", mib(full.rss), memoryCIServices, mib(int64(memoryBudget)))
	}
	if growth := fullView.rss - emptyView.rss; growth > memoryFlatSlack {
		errorf(t, "the view's RSS grew %.1f MiB from no Service to %d Services (%d endpoints), allowed %.0f MiB: not flat",
			mib(growth), memoryCIServices, memoryCIServices*100, mib(int64(memoryFlatSlack)))
	}
}
