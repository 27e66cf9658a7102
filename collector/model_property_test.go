package collector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The node model decides again only the Services whose inputs changed or whose time came, and the exposition
// renders again only the Services whose result changed. TestModelEqualsFullRecomputation holds both to the
// full recomputation: two models read the same inputs on the same clock, one incremental, one deciding every
// Service at every step (DecideAll), and after every step of random events — kube-proxy's rules rewritten (the
// real rules of a kube-proxy v1.37.2, cut and recounted), EndpointSlices changed, the node relabelled, arrivals,
// health check and kube-proxy answers, addresses, time passing across every window — the incremental model's
// State (the exposure recorder's episodes among it) and its cached exposition equal the full one's, rendered
// afresh.

// world is the node as both models see it: what every fake input answers.
type world struct {
	mu       sync.Mutex
	now      time.Time
	manifest []manifestService
	// local is each Service's local endpoint count on this node (by name), lbIP whether its load balancer IP
	// is in its status; removed Services are absent from present.
	local    map[string]int
	present  map[string]bool
	excluded bool
	versions map[string]int // bumped at each change of a Service's state
	// rules is what the reader returns; hc the health check node ports' answers (local endpoints reported,
	// -1: no answer); kpUp kube-proxy's /healthz and /livez.
	rules    *kernelrules.Snapshot
	rulesErr error
	hcDown   map[int32]bool
	kpUp     bool
	addrs    []string
	counts   map[arrivals.Dest]arrivals.DestCount
	watched  arrivals.Watch
	activity uint64
}

// manifestService is one Service of the real kube-proxy fixtures' manifest.
type manifestService struct {
	Namespace       string         `json:"namespace"`
	Name            string         `json:"name"`
	Port            string         `json:"port"`
	Protocol        string         `json:"protocol"`
	ServicePort     int32          `json:"servicePort"`
	NodePort        int32          `json:"nodePort"`
	Type            string         `json:"type"`
	LoadBalancerIPs []string       `json:"loadBalancerIPs"`
	ExternalIPs     []string       `json:"externalIPs"`
	Endpoints       map[string]int `json:"endpoints"`
}

const fixtures = "../nodeprobe/kernelrules/testdata/"

func loadManifest(t *testing.T) []manifestService {
	t.Helper()
	b, err := os.ReadFile(fixtures + "real-v1.37.2-manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Services []manifestService `json:"services"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Services
}

// serviceState is a manifest Service as the API view shows it on node-2 (the fixtures' iptables node), with
// local endpoints on it.
func (w *world) serviceState(ms manifestService, i, local int) kubeview.ServiceState {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: ms.Name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceType(ms.Type), ClusterIP: "10.96.0.10", ExternalIPs: ms.ExternalIPs,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: ms.Port, Protocol: corev1.Protocol(ms.Protocol), Port: ms.ServicePort, NodePort: ms.NodePort}}},
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		svc.Spec.HealthCheckNodePort = 32000 + int32(i)
		for _, ip := range ms.LoadBalancerIPs {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: ms.Name + "-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: ms.Name}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(ms.Port), Protocol: ptr.To(corev1.Protocol(ms.Protocol)), Port: ptr.To[int32](8080)}}}
	for k := range local {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.2.%d", 10+i+k)},
			NodeName: ptr.To("node-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.1.%d", 10+i)},
		NodeName: ptr.To("node-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	slim, err := kubeview.TransformEndpointSlice("node-2")(slice)
	if err != nil {
		panic(err)
	}
	return kubeview.ServiceStateOf(svc, []*discoveryv1.EndpointSlice{slim.(*discoveryv1.EndpointSlice)})
}

// tracker is one model's API view of the world: it reports the Services whose version moved since it last
// looked.
type tracker struct {
	w    *world
	seen map[string]int
	keys []string
	st   map[string]kubeview.ServiceState
}

func (tr *tracker) Update(time.Time) ([]string, error) {
	w := tr.w
	w.mu.Lock()
	defer w.mu.Unlock()
	var changed []string
	for i, ms := range w.manifest {
		key := ms.Namespace + "/" + ms.Name
		v, had := tr.seen[key]
		switch {
		case !w.present[ms.Name] && had:
			delete(tr.seen, key)
			delete(tr.st, key)
			changed = append(changed, key)
		case w.present[ms.Name] && (!had || v != w.versions[ms.Name]):
			tr.seen[key] = w.versions[ms.Name]
			tr.st[key] = w.serviceState(ms, i, w.local[ms.Name])
			changed = append(changed, key)
		}
	}
	tr.keys = tr.keys[:0]
	for k := range tr.st {
		tr.keys = append(tr.keys, k)
	}
	slices.Sort(tr.keys)
	return changed, nil
}

func (tr *tracker) Keys() []string { return tr.keys }
func (tr *tracker) State(key string) (kubeview.ServiceState, bool) {
	st, ok := tr.st[key]
	return st, ok
}
func (tr *tracker) Node() kubeview.NodeState {
	tr.w.mu.Lock()
	defer tr.w.mu.Unlock()
	return kubeview.NodeState{Name: "node-2", Found: true, InternalIPs: []string{"10.250.0.12"}, Excluded: tr.w.excluded}
}
func (tr *tracker) Announcers() map[announce.Source]announce.SourceState { return nil }
func (tr *tracker) NextChange() time.Time                                { return time.Time{} }

// reader returns the world's rules.
type reader struct{ w *world }

func (r reader) Read(context.Context) (dataplane.Rules, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.w.rules == nil {
		return nil, r.w.rulesErr
	}
	// Every read is read now, as the real reader's: the counters' evidence is judged at the read's time.
	c := *r.w.rules
	c.ReadAt = r.w.now
	return &c, r.w.rulesErr
}

// meter is the world's arrivals meter.
type meter struct{ w *world }

func (m meter) Watch(wt arrivals.Watch) error {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if reflect.DeepEqual(wt, m.w.watched) {
		return nil // as the real meter: the same Watch again changes nothing
	}
	m.w.watched = wt
	for _, d := range wt.Dests {
		if _, ok := m.w.counts[d]; !ok {
			m.w.counts[d] = arrivals.DestCount{Dest: d, WatchedSince: m.w.now}
		}
	}
	m.w.activity++
	return nil
}

func (m meter) Snapshot() arrivals.Snapshot {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	s := arrivals.Snapshot{Status: arrivals.StatusOK, Since: time.Unix(1_800_000_000, 0), Taken: m.w.now,
		Families: []arrivals.FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}}
	dests := slices.Clone(m.w.watched.Dests)
	slices.SortFunc(dests, func(a, b arrivals.Dest) int {
		return cmpDest(a, b)
	})
	for _, d := range slices.Compact(dests) {
		s.Dests = append(s.Dests, m.w.counts[d])
	}
	return s
}

func cmpDest(a, b arrivals.Dest) int {
	if a.Protocol != b.Protocol {
		return int(a.Protocol) - int(b.Protocol)
	}
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

func (m meter) Activity() uint64 {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	return m.w.activity
}

// arrive counts one attempt at d now, as the meter counts it (a run restarts after the quiet period).
func (w *world) arrive(d arrivals.Dest, quiet time.Duration) {
	c, ok := w.counts[d]
	if !ok {
		return
	}
	if c.Attempts == 0 || w.now.Sub(c.LastSeen) >= quiet {
		c.ActiveSince = w.now
	}
	if c.Attempts == 0 {
		c.FirstSeen = w.now
	}
	c.Attempts++
	c.LastSeen = w.now
	w.counts[d] = c
	w.activity++
}

// addrs are the world's addresses.
type addrs struct{ w *world }

func (a addrs) LocalAddrs() ([]net.IP, error) {
	a.w.mu.Lock()
	defer a.w.mu.Unlock()
	var out []net.IP
	for _, s := range a.w.addrs {
		out = append(out, net.ParseIP(s))
	}
	return out, nil
}

// peers answers the health check node ports and kube-proxy's health server as kube-proxy would, in memory.
type peers struct{ w *world }

func (p peers) RoundTrip(req *http.Request) (*http.Response, error) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	port, _ := strconv.Atoi(req.URL.Port())
	resp := func(status int, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}
	}
	if port == 10256 {
		if !p.w.kpUp {
			return nil, errors.New("connection refused")
		}
		return resp(200, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true}`), nil
	}
	for i, ms := range p.w.manifest {
		if int32(port) != 32000+int32(i) {
			continue
		}
		if p.w.hcDown[int32(port)] {
			return nil, errors.New("connection refused")
		}
		local := p.w.local[ms.Name]
		status := 200
		if local == 0 {
			status = 503
		}
		return resp(status, fmt.Sprintf(`{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":true}`,
			ms.Namespace, ms.Name, local)), nil
	}
	return nil, errors.New("connection refused")
}

// fixtureRunner answers the reader's commands from the world's current iptables text (by table and family).
type fixtureRunner struct {
	tables map[string]string // "<family>/<table>" → iptables-save text of that table
}

func (f fixtureRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if strings.HasSuffix(name, "--version") || slices.Contains(args, "--version") {
		return []byte("iptables v1.8.9 (nf_tables)"), nil
	}
	fam := kernelrules.FamilyIPv4
	if strings.HasPrefix(name, "ip6") {
		fam = kernelrules.FamilyIPv6
	}
	table := ""
	for i, a := range args {
		if a == "-t" && i+1 < len(args) {
			table = args[i+1]
		}
	}
	return []byte(f.tables[fam+"/"+table]), nil
}

// splitTables cuts an iptables-save file into its tables.
func splitTables(text string) map[string]string {
	out := map[string]string{}
	var cur string
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "*") {
			cur = line[1:]
			b.Reset()
		}
		if cur != "" {
			b.WriteString(line + "\n")
		}
		if line == "COMMIT" && cur != "" {
			out[cur] = b.String()
			cur = ""
		}
	}
	return out
}

// rulesVariant is the real rules with some of their local endpoint jumps and drops cut and every drop's
// counter grown at random: what kube-proxy writes as endpoints come and go, and traffic is dropped.
func rulesVariant(t *testing.T, rng *rand.Rand, texts map[string]string, now time.Time) *kernelrules.Snapshot {
	t.Helper()
	tables := map[string]string{}
	for _, fam := range slices.Sorted(maps.Keys(texts)) {
		split := splitTables(texts[fam])
		for _, table := range slices.Sorted(maps.Keys(split)) {
			body := split[table]
			var out []string
			for _, line := range strings.Split(body, "\n") {
				cut := strings.Contains(line, "-A KUBE-SVL-") || strings.Contains(line, "has no local endpoints")
				if cut && rng.IntN(3) == 0 {
					continue
				}
				if strings.Contains(line, "has no local endpoints") {
					line = "[" + strconv.Itoa(rng.IntN(4)) + ":0]" + line[strings.IndexByte(line, ']')+1:]
				}
				out = append(out, line)
			}
			tables[fam+"/"+table] = strings.Join(out, "\n")
		}
	}
	r := kernelrules.NewReader(kernelrules.Options{Mode: kernelrules.ModeIPTables, Runner: fixtureRunner{tables: tables},
		LookPath: func(f string) (string, error) {
			if strings.Contains(f, "legacy") {
				return "", errors.New("not found")
			}
			return f, nil
		}, CacheTTL: -1, Now: func() time.Time { return now }})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatalf("reading the real rules: %v", err)
	}
	return snap
}

func TestModelEqualsFullRecomputation(t *testing.T) {
	manifest := loadManifest(t)
	texts := map[string]string{}
	for fam, file := range map[string]string{kernelrules.FamilyIPv4: "real-v1.37.2-iptables-ipv4.save", kernelrules.FamilyIPv6: "real-v1.37.2-iptables-ipv6.save"} {
		b, err := os.ReadFile(fixtures + file)
		if err != nil {
			t.Fatal(err)
		}
		texts[fam] = string(b)
	}
	const quiet, grace, lossHold = 2 * time.Minute, 2 * time.Minute, 15 * time.Minute
	episodes := uint64(0) // over every seed: the exposure recorder's equality is worth something only with episodes
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 38))
			w := &world{now: time.Unix(1_800_000_000, 0), manifest: manifest, local: map[string]int{}, present: map[string]bool{},
				versions: map[string]int{}, hcDown: map[int32]bool{}, kpUp: true, addrs: []string{"10.250.0.12"},
				counts: map[arrivals.Dest]arrivals.DestCount{}}
			for _, ms := range manifest {
				w.present[ms.Name], w.local[ms.Name] = true, ms.Endpoints["node-2"]
			}
			w.rules = rulesVariant(t, rng, texts, w.now)
			clock := func() time.Time {
				w.mu.Lock()
				defer w.mu.Unlock()
				return w.now
			}
			// The last seeds run without a meter: then kube-proxy's drop counters are the evidence of arrivals.
			var m scrape.ArrivalsMeter = meter{w}
			if seed >= 9 {
				m = nil
			}
			newModel := func(all bool) *scrape.Model {
				g := scrape.NewGatherer(scrape.GathererConfig{RuleReader: reader{w}, Addrs: addrs{w}, Meter: m,
					KubeProxyAddress:   func(kubeview.NodeState) (string, error) { return "127.0.0.1:10256", nil },
					HealthCheckAddress: "10.250.0.12", Client: &http.Client{Transport: peers{w}},
					ExternalIPWindow: 10 * time.Minute, Grace: grace, Quiet: quiet, LossHold: lossHold, Logger: discard()})
				return scrape.NewModel(g, scrape.ModelConfig{Tracker: &tracker{w: w, seen: map[string]int{}, st: map[string]kubeview.ServiceState{}},
					Now: clock, Synchronous: true, DecideAll: all,
					// No safety sweep: every time-driven change must come from its own timer.
					Resweep: 1000 * time.Hour, HealthCheckSweep: 1000 * time.Hour})
			}
			incremental, full := newModel(false), newModel(true)
			cached := NewExporter(discard(), latest{incremental}, everyCollector()...).WithNode("node-2")
			ctx := context.Background()
			decided := map[string]bool{}
			for step := range 150 {
				event := w.randomEvent(t, rng, texts, quiet)
				now := clock()
				incremental.Step(ctx, now)
				full.Step(ctx, now)
				a, b := incremental.Latest(), full.Latest()
				if msg := sameDecisions(a, b); msg != "" {
					t.Fatalf("step %d (%s): the incremental model differs from the full recomputation: %s", step, event, msg)
				}
				fresh := NewExporter(discard(), latest{full}, everyCollector()...).WithNode("node-2")
				got, want := exposition(t, cached), exposition(t, fresh)
				if got != want {
					t.Fatalf("step %d (%s): the cached exposition differs from the full recomputation's:\n%s", step, event, lineDiff(want, got))
				}
				for _, r := range b.Services {
					decided[string(r.Verdict.Reason)] = true
				}
			}
			t.Logf("reasons seen: %v; Service decisions: incremental %d, full %d; exposure %+v", decided, incremental.Decided(),
				full.Decided(), full.Latest().Exposure)
			for _, tot := range full.Latest().Exposure.Totals {
				episodes += tot.Episodes
			}
			// At rest: every destination has just seen an attempt, a Service has just come back (its destinations
			// newly watched) and the counters grew; then only time passes, past the quiet period, the grace
			// window and the loss hold. Nothing but the model's timers can decide again; both stay equal.
			w.mu.Lock()
			w.present["lbzero"], w.versions["lbzero"] = false, w.versions["lbzero"]+1
			w.mu.Unlock()
			stepBoth := func(what string) {
				now := clock()
				incremental.Step(ctx, now)
				full.Step(ctx, now)
				if msg := sameDecisions(incremental.Latest(), full.Latest()); msg != "" {
					t.Fatalf("at rest (%s): %s", what, msg)
				}
				fresh := NewExporter(discard(), latest{full}, everyCollector()...).WithNode("node-2")
				if got, want := exposition(t, cached), exposition(t, fresh); got != want {
					t.Fatalf("at rest (%s): the cached exposition differs from the full recomputation's:\n%s", what, lineDiff(want, got))
				}
			}
			stepBoth("a Service gone")
			w.mu.Lock()
			w.present["lbzero"], w.versions["lbzero"] = true, w.versions["lbzero"]+1
			w.now = w.now.Add(time.Second)
			w.mu.Unlock()
			stepBoth("the Service back")
			snap := rulesVariant(t, rng, texts, clock())
			w.mu.Lock()
			w.rules, w.rulesErr = snap, nil
			for d, c := range w.counts {
				if c.WatchedSince.Before(w.now.Add(-time.Second)) { // not the Service just back: it stays silent
					w.arrive(d, quiet)
				}
			}
			w.mu.Unlock()
			incremental.RulesChanged(true)
			full.RulesChanged(true)
			stepBoth("attempts everywhere but at the Service back, the counters grown")
			before, beforeFull := incremental.Decided(), full.Decided()
			for range 60 {
				w.mu.Lock()
				w.now = w.now.Add(20 * time.Second)
				w.mu.Unlock()
				stepBoth("time passing")
			}
			if incremental.Decided() >= full.Decided() {
				t.Errorf("the incremental model decided %d times, the full recomputation %d: nothing was spared", incremental.Decided(), full.Decided())
			}
			t.Logf("at rest: incremental %d decisions, full %d", incremental.Decided()-before, full.Decided()-beforeFull)
		})
	}
	if episodes == 0 {
		t.Error("no seed made an exposure episode: the recorder's equality went untested")
	}
}

// randomEvent changes the world once (or only lets time pass) and says what it did.
func (w *world) randomEvent(t *testing.T, rng *rand.Rand, texts map[string]string, quiet time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := w.manifest[rng.IntN(len(w.manifest))]
	what := "nothing but time"
	switch rng.IntN(20) {
	case 0, 1:
		w.local[ms.Name] = rng.IntN(3)
		w.versions[ms.Name]++
		what = fmt.Sprintf("%s has %d local endpoints", ms.Name, w.local[ms.Name])
	case 2:
		w.present[ms.Name] = !w.present[ms.Name]
		w.versions[ms.Name]++
		what = fmt.Sprintf("%s present %v", ms.Name, w.present[ms.Name])
	case 3:
		w.excluded = !w.excluded
		what = fmt.Sprintf("node excluded %v", w.excluded)
	case 4, 5:
		w.mu.Unlock()
		snap := rulesVariant(t, rng, texts, w.now)
		w.mu.Lock()
		w.rules, w.rulesErr = snap, nil
		if rng.IntN(8) == 0 {
			w.rulesErr = errors.New("iptables-nft-save: exit status 4")
		}
		what = "rules rewritten"
	case 6, 7, 8:
		var dests []arrivals.Dest
		for d := range w.counts {
			dests = append(dests, d)
		}
		slices.SortFunc(dests, cmpDest)
		if len(dests) > 0 {
			d := dests[rng.IntN(len(dests))]
			w.arrive(d, quiet)
			what = "an attempt at " + d.String()
			if rng.IntN(3) == 0 {
				// A client that keeps trying: a run longer than the grace window.
				for range 16 {
					w.now = w.now.Add(10 * time.Second)
					w.arrive(d, quiet)
				}
				what = "attempts for 160 s at " + d.String()
			}
		}
	case 9:
		port := int32(32000 + rng.IntN(len(w.manifest)))
		w.hcDown[port] = !w.hcDown[port]
		what = fmt.Sprintf("health check %d down %v", port, w.hcDown[port])
	case 10:
		w.kpUp = !w.kpUp
		what = fmt.Sprintf("kube-proxy up %v", w.kpUp)
	case 11:
		if len(w.addrs) == 1 {
			w.addrs = append(w.addrs, "192.0.2.31")
		} else {
			w.addrs = w.addrs[:1]
		}
		what = fmt.Sprintf("addresses %v", w.addrs)
	}
	// Time passes: a moment, a few seconds, or past a window (the quiet period, the grace window, the loss hold).
	advance := []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second, 20 * time.Second, 70 * time.Second, 3 * time.Minute, 16 * time.Minute}
	w.now = w.now.Add(advance[rng.IntN(len(advance))] + time.Duration(rng.IntN(1000))*time.Millisecond)
	return what
}

// latest is a StateSource of a model's latest State as published (no node-level reads at scrape time: the
// comparison is between two models' decisions).
type latest struct{ m *scrape.Model }

func (l latest) Gather(context.Context) *scrape.State { return l.m.Latest() }

// sameDecisions compares two models' States, their results without the model's revisions; "" when equal.
func sameDecisions(a, b *scrape.State) string {
	if !reflect.DeepEqual(a.Exposure, b.Exposure) {
		return fmt.Sprintf("exposure\n%+v\nwant\n%+v", a.Exposure, b.Exposure)
	}
	if len(a.Services) != len(b.Services) {
		return fmt.Sprintf("%d Services, want %d", len(a.Services), len(b.Services))
	}
	for i := range a.Services {
		x, y := *a.Services[i], *b.Services[i]
		x.Rev, y.Rev = 0, 0
		x.Checks, y.Checks = slices.Clone(x.Checks), slices.Clone(y.Checks)
		for _, c := range [][]scrape.FamilyCheck{x.Checks, y.Checks} {
			for j := range c {
				c[j].Duration = 0
			}
		}
		if !reflect.DeepEqual(x.Checks, y.Checks) {
			return fmt.Sprintf("%s/%s: checks\n%+v\nwant\n%+v", x.Service.Namespace, x.Service.Name, x.Checks, y.Checks)
		}
		if !reflect.DeepEqual(x.Verdict, y.Verdict) {
			detail := ""
			for f := range min(len(x.Verdict.Families), len(y.Verdict.Families)) {
				xe, ye := x.Verdict.Families[f].Entries, y.Verdict.Families[f].Entries
				for e := range min(len(xe), len(ye)) {
					if !reflect.DeepEqual(xe[e], ye[e]) {
						detail += fmt.Sprintf("\nentry %s:\n%#v\nwant\n%#v", xe[e].Destination, xe[e], ye[e])
					}
				}
			}
			return fmt.Sprintf("%s/%s: verdict\n%+v\nwant\n%+v%s", x.Service.Namespace, x.Service.Name, x.Verdict, y.Verdict, detail)
		}
		x.Checks, y.Checks = nil, nil
		if !reflect.DeepEqual(x, y) {
			return fmt.Sprintf("%s/%s: result\n%+v\nwant\n%+v", x.Service.Namespace, x.Service.Name, x, y)
		}
	}
	return ""
}

// exposition renders an exporter's scrape as text, without the series that time the scrape or a probe.
func exposition(t *testing.T, e *Exporter) string {
	t.Helper()
	var keep bytes.Buffer
	for _, line := range strings.Split(encode(t, gatherText(t, e)), "\n") {
		if strings.Contains(line, "_duration_seconds") {
			continue
		}
		keep.WriteString(line + "\n")
	}
	return keep.String()
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var out []string
	for l, n := range w {
		if g[l] < n {
			out = append(out, "- "+l)
		}
	}
	for l, n := range g {
		if w[l] < n {
			out = append(out, "+ "+l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
