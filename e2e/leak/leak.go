// Package leak judges whether a process's resource (live heap, goroutines, open files) grows over a run, from
// many samples rather than two: a leak is growth that goes on, not a difference between two noisy readings.
//
// Two readings of a Go process's memory differ by whatever the garbage collector happened to be doing: with
// GOGC=25 a 30 MiB exporter moves several MiB between one second and the next. A leak, retained memory or a
// goroutine per scrape, grows with the work done, so it shows as a slope that is there in the first half of
// the run and again in the second. Judge tells the two apart with the Theil–Sen estimator (the median of the
// slopes between every pair of samples: a GC cycle, a relist after an apiserver restart or a burst of
// allocations moves a few pairs, not the median) fitted to each half on its own. A one-off step (a cache that
// grew once and stays) raises one half only and is not a leak.
package leak

import (
	"fmt"
	"sort"
	"time"
)

// Sample is one reading of a resource, At after the start of the run.
type Sample struct {
	At    time.Duration
	Value float64
}

// Bound is how much growth over the judged window is tolerated: the larger of Rel times the resource's
// median level and Abs (in the resource's unit). A window's growth is its fitted slope times its length.
type Bound struct {
	Rel float64
	Abs float64
}

// HeapBound, GoroutineBound and FDBound are the soak's bounds; TestJudgeRealProcess holds them to a real leak
// and to real noise. Heap is the Go runtime's heap goal (go_memstats_next_gc_bytes: the heap live at the last
// collection plus GOGC's margin), which follows what is retained, unlike the resident set, which keeps the
// high-water mark of garbage. Goroutines and open files under load include the scrapes and probes in flight
// (node-1's hostile peers hold some for their timeout): a quarter of the level is that, not growth.
func HeapBound() Bound      { return Bound{Rel: 0.10, Abs: 4 << 20} }
func GoroutineBound() Bound { return Bound{Rel: 0.25, Abs: 10} }
func FDBound() Bound        { return Bound{Rel: 0.25, Abs: 5} }

// HeapGOGC is the GOGC HeapBound is set for: the exporter's as the DaemonSet deploys it (the e2e suite's
// TestExporterRuntimeEnvIsTheDaemonSets holds the two equal). It sets how often the heap goal is renewed (a
// collection each time the heap grows by GOGC percent of what was live) and how much of the garbage a collection
// finds in flight the goal carries: a process measured against HeapBound runs with it.
const HeapGOGC = 25

// RSSBound is looser than HeapBound: the resident set also holds garbage not yet returned to the kernel.
func RSSBound() Bound { return Bound{Rel: 0.20, Abs: 8 << 20} }

// Verdict is what Judge decided about one resource.
type Verdict struct {
	Name string
	// Level is the median of every sample; Growth the fitted growth over the whole window; FirstHalf and
	// SecondHalf the fitted growth of each half, extrapolated to the whole window so the three compare.
	Level, Growth, FirstHalf, SecondHalf float64
	// Allowed is the bound's growth at Level.
	Allowed float64
	Window  time.Duration
	N       int
	// Leak: the whole window and each half grew by more than Allowed.
	Leak bool
}

func (v Verdict) String() string {
	word := "no leak"
	if v.Leak {
		word = "LEAK"
	}
	return fmt.Sprintf("%s: %s: %d samples over %s, level %.4g, fitted growth %.4g (halves %.4g, %.4g), allowed %.4g",
		v.Name, word, v.N, v.Window.Round(time.Second), v.Level, v.Growth, v.FirstHalf, v.SecondHalf, v.Allowed)
}

// MinSamples is the fewest samples Judge accepts: below that a fit is no better than two readings.
const MinSamples = 20

// Judge fits samples (in any order) and decides whether they show a leak under b. It returns an error when
// there are fewer than MinSamples or they span no time: a check that saw too little must not pass.
func Judge(name string, samples []Sample, b Bound) (Verdict, error) {
	if len(samples) < MinSamples {
		return Verdict{}, fmt.Errorf("%s: %d samples, want at least %d", name, len(samples), MinSamples)
	}
	s := append([]Sample(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i].At < s[j].At })
	window := s[len(s)-1].At - s[0].At
	if window <= 0 {
		return Verdict{}, fmt.Errorf("%s: %d samples span no time", name, len(s))
	}
	values := make([]float64, len(s))
	for i, x := range s {
		values[i] = x.Value
	}
	v := Verdict{Name: name, Level: median(values), Window: window, N: len(s)}
	s = thin(s, maxFit)
	v.Allowed = max(b.Rel*v.Level, b.Abs)
	secs := window.Seconds()
	half := len(s) / 2
	v.Growth = TheilSen(s) * secs
	v.FirstHalf = TheilSen(s[:half]) * secs
	v.SecondHalf = TheilSen(s[half:]) * secs
	v.Leak = v.Growth > v.Allowed && v.FirstHalf > v.Allowed && v.SecondHalf > v.Allowed
	return v, nil
}

// maxFit is the most samples a fit uses: Theil–Sen's cost is quadratic, and a 30-minute soak at four samples
// a second per resource would be 26 million pairs. More samples are thinned first.
const maxFit = 500

// thin returns s (sorted by time) when it holds at most n samples; else n samples, one per equal slice of
// the window: the slice's median value at its median time. Medians keep thinning as robust as the fit.
func thin(s []Sample, n int) []Sample {
	if len(s) <= n {
		return s
	}
	start, window := s[0].At, s[len(s)-1].At-s[0].At
	buckets := make([][]Sample, n)
	for _, x := range s {
		i := min(int(float64(x.At-start)/float64(window)*float64(n)), n-1)
		buckets[i] = append(buckets[i], x)
	}
	out := make([]Sample, 0, n)
	for _, b := range buckets {
		if len(b) == 0 {
			continue
		}
		values := make([]float64, len(b))
		for i, x := range b {
			values[i] = x.Value
		}
		out = append(out, Sample{At: b[len(b)/2].At, Value: median(values)})
	}
	return out
}

// TheilSen is the median of the slopes (per second) between every pair of samples at different times; 0 for
// fewer than two. Samples must be sorted by time. Its cost is quadratic: a few thousand samples at most.
func TheilSen(s []Sample) float64 {
	var slopes []float64
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if dt := (s[j].At - s[i].At).Seconds(); dt > 0 {
				slopes = append(slopes, (s[j].Value-s[i].Value)/dt)
			}
		}
	}
	if len(slopes) == 0 {
		return 0
	}
	return median(slopes)
}

func median(x []float64) float64 {
	c := append([]float64(nil), x...)
	sort.Float64s(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}
