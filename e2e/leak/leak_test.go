package leak

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// series builds n samples one second apart from f(i).
func series(n int, f func(i int) float64) []Sample {
	s := make([]Sample, n)
	for i := range s {
		s[i] = Sample{At: time.Duration(i) * time.Second, Value: f(i)}
	}
	return s
}

// heapNoise is what a steady exporter's heap goal looks like: a 30 MiB level, the GC's sawtooth, uniform
// jitter of several MiB and rare spikes (a scrape in flight at the mark).
func heapNoise(r *rand.Rand) func(i int) float64 {
	return func(i int) float64 {
		v := 30e6 + float64(i%7)*0.8e6 + (r.Float64()-0.5)*6e6
		if r.IntN(20) == 0 {
			v += 12e6
		}
		return v
	}
}

func TestJudgeSynthetic(t *testing.T) {
	cases := []struct {
		name string
		f    func(r *rand.Rand) func(int) float64
		b    Bound
		leak bool
	}{
		{"noise", heapNoise, HeapBound(), false},
		{"the old failure: 12.9 % between two samples", func(r *rand.Rand) func(int) float64 {
			return func(i int) float64 {
				if i == 149 {
					return 34.4 * (1 << 20)
				}
				return 30.4*(1<<20) + (r.Float64()-0.5)*4e6
			}
		}, HeapBound(), false},
		{"one step up that stays (a relist)", func(r *rand.Rand) func(int) float64 {
			noise := heapNoise(r)
			return func(i int) float64 {
				if i > 60 {
					return noise(i) + 8e6
				}
				return noise(i)
			}
		}, HeapBound(), false},
		{"a step down (a cache emptied)", func(r *rand.Rand) func(int) float64 {
			noise := heapNoise(r)
			return func(i int) float64 {
				if i > 100 {
					return noise(i) - 10e6
				}
				return noise(i)
			}
		}, HeapBound(), false},
		{"32 KiB retained per scrape, 4 scrapes a second", func(r *rand.Rand) func(int) float64 {
			noise := heapNoise(r)
			return func(i int) float64 { return noise(i) + float64(i)*4*32*1024 }
		}, HeapBound(), true},
		{"goroutines steady with watch churn", func(r *rand.Rand) func(int) float64 {
			return func(int) float64 { return float64(40 + r.IntN(6)) }
		}, GoroutineBound(), false},
		{"one goroutine per scrape", func(r *rand.Rand) func(int) float64 {
			return func(i int) float64 { return float64(40+r.IntN(6)) + float64(i)*4 }
		}, GoroutineBound(), true},
		{"one goroutine every 10 scrapes", func(r *rand.Rand) func(int) float64 {
			return func(i int) float64 { return float64(40+r.IntN(6)) + float64(i*4/10) }
		}, GoroutineBound(), true},
		{"fds steady", func(r *rand.Rand) func(int) float64 {
			return func(int) float64 { return float64(12 + r.IntN(3)) }
		}, FDBound(), false},
		{"one fd every 10 scrapes", func(r *rand.Rand) func(int) float64 {
			return func(i int) float64 { return float64(12+r.IntN(3)) + float64(i*4/10) }
		}, FDBound(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Many seeds: the verdict must not depend on which noise the run drew.
			for seed := range uint64(50) {
				v, err := Judge(c.name, series(150, c.f(rand.New(rand.NewPCG(seed, 1)))), c.b)
				if err != nil {
					t.Fatal(err)
				}
				if v.Leak != c.leak {
					t.Fatalf("seed %d: %s; want leak %v", seed, v, c.leak)
				}
			}
		})
	}
}

// A long soak's samples are thinned before the fit: the verdicts stay, and so does the leak.
func TestJudgeThinsLongRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	n := 4 * 1800 // four samples a second for 30 minutes
	noise := heapNoise(r)
	flat := make([]Sample, n)
	leaky := make([]Sample, n)
	for i := range n {
		at := time.Duration(i) * time.Second / 4
		flat[i] = Sample{At: at, Value: noise(i)}
		leaky[i] = Sample{At: at, Value: noise(i) + float64(i)*8*1024} // 8 KiB per scrape
	}
	if v, err := Judge("flat", flat, HeapBound()); err != nil || v.Leak || v.N != n {
		t.Errorf("30 minutes of noise: %v, %v", v, err)
	}
	if v, err := Judge("leaky", leaky, HeapBound()); err != nil || !v.Leak {
		t.Errorf("30 minutes of 8 KiB per scrape: %v, %v", v, err)
	}
	if got := len(thin(flat, maxFit)); got > maxFit {
		t.Errorf("thinned to %d samples, want at most %d", got, maxFit)
	}
}

func TestJudgeRefusesTooLittle(t *testing.T) {
	if _, err := Judge("rss", series(MinSamples-1, func(int) float64 { return 1 }), HeapBound()); err == nil {
		t.Fatal("judged from too few samples")
	}
	same := make([]Sample, MinSamples)
	if _, err := Judge("rss", same, HeapBound()); err == nil {
		t.Fatal("judged samples that span no time")
	}
}

func TestTheilSen(t *testing.T) {
	s := series(50, func(i int) float64 { return 3 + 2*float64(i) })
	s[10].Value, s[20].Value = 1e9, -1e9 // outliers move a few pairs, not the median
	if got := TheilSen(s); math.Abs(got-2) > 1e-9 {
		t.Fatalf("slope %v, want 2", got)
	}
	if got := TheilSen(s[:1]); got != 0 {
		t.Fatalf("one sample: slope %v", got)
	}
}

// TestJudgeRealProcess runs the soak's measurement on this test process: a /metrics endpoint with the same
// Go and process collectors as the exporter, scraped 300 times while a workload churns a cache and makes
// per-scrape garbage, with the exporter's GOGC (HeapGOGC). Each scrape is one second of the soak (four scrapers a
// second are four scrapes here, so the injected leaks are a quarter of the per-scrape size they would need in the
// soak). Without a leak the heap goal, goroutines and fds must pass; with a buffer, a goroutine or a file retained
// per scrape, fail. The small buffer is the smallest heap leak the bound is for: 7 MiB retained over the run, which
// the heap goal shows as about 9 MiB, twice HeapBound's 4 MiB.
func TestJudgeRealProcess(t *testing.T) {
	for _, c := range []struct {
		name string
		leak func(*leaker)
		want string // the resource that must be judged a leak; "" for none
	}{
		{"no leak", nil, ""},
		{"buffer retained per scrape", func(l *leaker) { l.bufs = append(l.bufs, make([]byte, 64<<10)) }, "heap"},
		{"small buffer retained per scrape", func(l *leaker) { l.bufs = append(l.bufs, make([]byte, 24<<10)) }, "heap"},
		{"goroutine per scrape", func(l *leaker) {
			l.wg.Add(1)
			go func() { defer l.wg.Done(); <-l.stop }()
		}, "goroutines"},
		{"file per scrape", func(l *leaker) {
			f, err := os.Open(os.DevNull)
			if err == nil {
				l.files = append(l.files, f)
			}
		}, "fds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			verdicts := measure(t, c.leak)
			for _, v := range verdicts {
				t.Log(v)
				if v.Leak != (v.Name == c.want) {
					t.Errorf("%s: leak %v, want %v", v.Name, v.Leak, v.Name == c.want)
				}
			}
		})
	}
}

type leaker struct {
	bufs  [][]byte
	files []*os.File
	stop  chan struct{}
	wg    sync.WaitGroup
}

func measure(t *testing.T, leak func(*leaker)) []Verdict {
	t.Helper()
	l := &leaker{stop: make(chan struct{})}
	t.Cleanup(func() {
		close(l.stop)
		l.wg.Wait()
		for _, f := range l.files {
			f.Close()
		}
	})
	r := rand.New(rand.NewPCG(1, 2))
	cache := make([][]byte, 200) // an informer cache whose objects change size
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exposition := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		for range 20 {
			cache[r.IntN(len(cache))] = make([]byte, 1+r.IntN(64<<10))
		}
		var render []string // a scrape's garbage
		for i := range 2000 {
			render = append(render, fmt.Sprintf("localtraffic_blackhole{service=\"svc-%d\"} %d", i, r.IntN(2)))
		}
		_ = strings.Join(render, "\n")
		if leak != nil {
			leak(l)
		}
		mu.Unlock()
		exposition.ServeHTTP(w, req)
	}))
	defer srv.Close()
	// HeapBound is set for the exporter's GOGC, and at Go's default of 100 the heap goal is a different
	// measurement: a collection only every seven scrapes or so here, about 40 goals in 300 samples, each twice a
	// live heap that includes whatever garbage the mark found in flight (more of it when the process is starved of
	// CPU and the mark stretches over more of a scrape): the fitted growth of a process that does not leak then
	// spread by 1 to 2 MiB (standard deviation) and each half's by 3 to 4 MiB, against a 4 MiB bound. At the
	// exporter's GOGC there are about 250 goals, and the spread is a quarter of a MiB.
	defer debug.SetGCPercent(debug.SetGCPercent(HeapGOGC))
	// Collect the previous case's leak, then warm up (the soak's warm-up: caches fill, the heap finds its level)
	// through collections the runtime paces itself: a goal set by a forced collection counts no garbage in
	// flight, so measuring right after one starts the series below the level every later goal has, a rise the
	// fit reads as growth.
	runtime.GC()
	before := gcCycles()
	for range 50 {
		scrape(t, srv.URL)
	}
	if n := gcCycles() - before; n < 3 {
		t.Fatalf("the warm-up saw %d collections of its own, want at least 3: its heap goal is not yet paced", n)
	}
	var heap, goroutines, fds []Sample
	for i := range 300 {
		m := scrape(t, srv.URL)
		at := time.Duration(i) * time.Second
		heap = append(heap, Sample{At: at, Value: m["go_memstats_next_gc_bytes"]})
		goroutines = append(goroutines, Sample{At: at, Value: m["go_goroutines"]})
		fds = append(fds, Sample{At: at, Value: m["process_open_fds"]})
	}
	var out []Verdict
	for _, j := range []struct {
		name string
		s    []Sample
		b    Bound
	}{{"heap", heap, HeapBound()}, {"goroutines", goroutines, GoroutineBound()}, {"fds", fds, FDBound()}} {
		v, err := Judge(j.name, j.s, j.b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// gcCycles is how many collections the runtime has started on its own (not forced).
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/automatic:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// scrape reads the unlabelled gauges of one exposition.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range families {
		if m := f.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
			out[name] = m[0].GetGauge().GetValue()
		}
	}
	return out
}
