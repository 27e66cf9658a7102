package kernelrules

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// bigCluster is 10,000 Services as one node sees them: half ClusterIP with two
// endpoints, a quarter NodePort/Local with a local endpoint, a quarter
// NodePort/Local without one (the DROP case). About 107,000 rules in iptables mode.
func bigCluster(ipv6 bool) []genService { return clusterOf(10000, ipv6) }

// clusterOf is n Services of bigCluster's shape.
func clusterOf(n int, ipv6 bool) []genService {
	svcs := make([]genService, 0, n)
	for i := range n {
		ip := func(net string, n int) string {
			if ipv6 {
				return fmt.Sprintf("fd00:%s::%x", net, n+1)
			}
			return fmt.Sprintf("10.%s.%d.%d", map[string]string{"96": "96", "244": "244"}[net], (n+1)/250, (n+1)%250+1)
		}
		s := genService{
			ns: fmt.Sprintf("ns%d", i%200), name: fmt.Sprintf("svc%d", i), port: "http", proto: "tcp",
			clusterIP: ip("96", i), svcPort: 80,
			eps: []genEndpoint{{ip: ip("244", 2*i), port: 8080}, {ip: ip("244", 2*i+1), port: 8080}},
		}
		switch i % 4 {
		case 2:
			s.nodePort, s.etpLocal = 30000+i%2768, true
			s.eps[0].local = true
		case 3:
			s.nodePort, s.etpLocal = 30000+i%2768, true
		}
		svcs = append(svcs, s)
	}
	return svcs
}

var bigOnce sync.Once
var bigRules string

func bigIPTables() string {
	bigOnce.Do(func() { bigRules = genRules(layout125, false, bigCluster(false)) })
	return bigRules
}

// BenchmarkParseIPTables: parse cost of nat+filter for 10,000 Services.
func BenchmarkParseIPTables(b *testing.B) {
	data := []byte(bigIPTables())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var rules int
	for b.Loop() {
		res := newIPTablesResult()
		if err := parseIPTablesSave(data, res); err != nil {
			b.Fatal(err)
		}
		rules = res.rules
	}
	b.ReportMetric(float64(rules), "rules")
}

func TestBigClusterShape(t *testing.T) {
	res := newIPTablesResult()
	if err := parseIPTablesSave([]byte(bigIPTables()), res); err != nil {
		t.Fatal(err)
	}
	if res.rules < 90000 || res.rules > 130000 {
		t.Errorf("%d rules, want about 100,000", res.rules)
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv4, res.ports)
	drops := 0
	for _, s := range bigCluster(false) {
		st := snap.Port(s.servicePort())
		if !st.Programmed {
			t.Fatalf("%s not programmed", s.portName())
		}
		if st.Drop {
			drops++
		}
	}
	if drops != 2500 {
		t.Errorf("%d drops, want 2500", drops)
	}
}

// BenchmarkReadVsSave loads the 10,000-Service ruleset into a namespace (root)
// and compares, in the same run, a whole Read (detection warm, cache off) with
// the bare saves of the same tables the Read runs.
func BenchmarkReadVsSave(b *testing.B) {
	requireRoot(b)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		ns := newNetns(b)
		nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, backend, "restore"), "-c")
		nsRun(b, ns, []byte(kubeletMangle), xtablesCmd(false, backend, "restore"), "--noflush")
		runner := NetnsRunner{Namespace: ns}
		b.Run(string(backend)+"/bare-save", func(b *testing.B) {
			for b.Loop() {
				for _, f := range ipFamilies {
					if backend == BackendLegacy {
						// The reader lists legacy tables first; the bare side
						// saves only those too, so both save the same tables.
						names, _ := runner.Run(context.Background(), "cat", legacyNamesFile(f.ipv6))
						if len(strings.TrimSpace(string(names))) == 0 {
							continue
						}
					}
					for _, t := range []string{"nat", "filter"} {
						if _, err := runner.Run(context.Background(), saveCommand(f, backend), "-c", "-t", t); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
		b.Run(string(backend)+"/read", func(b *testing.B) {
			r := NewReader(Options{Runner: runner, CacheTTL: -1})
			if _, err := r.Read(context.Background()); err != nil { // warm detection
				b.Fatal(err)
			}
			for b.Loop() {
				snap, err := r.Read(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if snap.Backend != backend || snap.Len() < 10000 {
					b.Fatalf("backend %s, %d ports", snap.Backend, snap.Len())
				}
			}
		})
	}
}

// BenchmarkSnapshotLookup: what a scrape pays per Service port to look up the
// rules, per family and merged, on a dual-stack snapshot of 10,000 Services.
func BenchmarkSnapshotLookup(b *testing.B) {
	snap := parseBothFamilies(b, func(v6 bool) string { return genRules(layout125, v6, bigCluster(v6)) })
	svcs := bigCluster(false)
	sps := make([]ServicePort, len(svcs))
	for i, s := range svcs {
		sps[i] = s.servicePort()
	}
	for _, c := range []struct {
		name string
		get  func(ServicePort) PortState
	}{
		{"family", func(sp ServicePort) PortState { return snap.Family(sp, FamilyIPv6) }},
		{"merged", snap.Port},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			drops := 0
			for b.Loop() {
				drops = 0
				for _, sp := range sps {
					if c.get(sp).Drop {
						drops++
					}
				}
			}
			if drops != 2500 {
				b.Fatalf("%d drops, want 2500", drops)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(sps)), "ns/port")
		})
	}
}

// hideSignals is a Runner without change signals: every read saves every table
// (the reader before steady-state reads).
type hideSignals struct{ Runner }

// Stream passes the inner Runner's Stream through (the full read streams too).
func (h hideSignals) Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error {
	if s, ok := h.Runner.(Streamer); ok {
		return s.Stream(ctx, fn, name, args...)
	}
	out, err := h.Runner.Run(ctx, name, args...)
	if err != nil {
		return err
	}
	return fn(bytes.NewReader(out))
}

// BenchmarkSteadyState loads the 10,000-Service ruleset into a namespace (root)
// and times, interleaved in the same loop so both see the same machine, one
// bare save of nat + filter and one steady-state Read (nothing changed since
// the last read: filter saved, nat vouched for by its change signal), for the
// legacy and nft backends. steady/save is the ratio of their total times;
// full/save the same for a Read that saves everything (no change signal);
// exact/save (legacy) for a Read re-reading nat every time (LegacyVerify < 0);
// every30s/save for the default reader on the shipped 30 s scrape interval
// (its clock moves 30 s per read: legacy's LegacyVerify re-read of nat every
// 5 minutes, one read in 10). Run it with -benchtime 20x or more so that
// average holds whole cycles.
func BenchmarkSteadyState(b *testing.B) {
	requireRoot(b)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		b.Run(string(backend), func(b *testing.B) {
			ns := newNetns(b)
			nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, backend, "restore"), "-c")
			nsRun(b, ns, []byte(kubeletMangle), xtablesCmd(false, backend, "restore"), "--noflush")
			runner := NetnsRunner{Namespace: ns}
			ctx := context.Background()
			steady := NewReader(Options{Mode: ModeIPTables, Runner: runner, CacheTTL: -1})
			full := NewReader(Options{Mode: ModeIPTables, Runner: hideSignals{runner}, CacheTTL: -1})
			// exact: legacy nat compared in full every read (LegacyVerify < 0).
			exact := NewReader(Options{Mode: ModeIPTables, Runner: runner, CacheTTL: -1, LegacyVerify: -1})
			// every30s: the default reader scraped every 30 s (a clock moved 30 s
			// per read), so legacy's 5-minute re-read of nat runs every 10th read.
			var clock time.Time
			every30s := NewReader(Options{Mode: ModeIPTables, Runner: runner, CacheTTL: -1, Now: func() time.Time { return clock }})
			for _, r := range []Reader{steady, full, exact, every30s} { // warm detection and the kept nat
				if _, err := r.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			f := ipFamilies[0]
			var bare, st, fu, ex, ev time.Duration
			for b.Loop() {
				t0 := time.Now()
				for _, t := range []string{"nat", "filter"} {
					if _, err := runner.Run(ctx, saveCommand(f, backend), "-c", "-t", t); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				snap, err := steady.Read(ctx)
				if err != nil || snap.Backend != backend || snap.Len() < 10000 {
					b.Fatalf("steady read: %v, %d ports", err, snap.Len())
				}
				t2 := time.Now()
				if _, err := full.Read(ctx); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				if backend == BackendLegacy {
					if _, err := exact.Read(ctx); err != nil {
						b.Fatal(err)
					}
				}
				t4 := time.Now()
				clock = clock.Add(30 * time.Second)
				if _, err := every30s.Read(ctx); err != nil {
					b.Fatal(err)
				}
				bare, st, fu, ex, ev = bare+t1.Sub(t0), st+t2.Sub(t1), fu+t3.Sub(t2), ex+t4.Sub(t3), ev+time.Since(t4)
			}
			b.ReportMetric(float64(ev.Milliseconds())/float64(b.N), "every30s-ms")
			b.ReportMetric(float64(ev)/float64(bare), "every30s/save")
			if backend == BackendLegacy {
				b.ReportMetric(float64(ex.Milliseconds())/float64(b.N), "exact-ms")
				b.ReportMetric(float64(ex)/float64(bare), "exact/save")
			}
			b.ReportMetric(float64(bare.Milliseconds())/float64(b.N), "save-ms")
			b.ReportMetric(float64(st.Milliseconds())/float64(b.N), "steady-ms")
			b.ReportMetric(float64(fu.Milliseconds())/float64(b.N), "full-ms")
			b.ReportMetric(float64(st)/float64(bare), "steady/save")
			b.ReportMetric(float64(fu)/float64(bare), "full/save")
		})
	}
}
