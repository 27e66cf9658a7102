package eventwriter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// fakePeer is an exporter's /episodes over a ring it is handed.
type fakePeer struct {
	mu       sync.Mutex
	node     string
	instance string
	eps      []exposure.Finished
	oldest   uint64
	asked    []string
	srv      *httptest.Server
}

func newPeer(t *testing.T, node, instance string) *fakePeer {
	p := &fakePeer{node: node, instance: instance}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.asked = append(p.asked, r.URL.RawQuery)
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		pg := exposure.Page{Instance: p.instance, Node: p.node, Oldest: p.oldest, Episodes: []exposure.Finished{}}
		for _, f := range p.eps {
			pg.Last = f.Seq
			if pg.Oldest == 0 {
				pg.Oldest = f.Seq
			}
			if f.Seq > after {
				pg.Episodes = append(pg.Episodes, f)
			}
		}
		_ = json.NewEncoder(w).Encode(pg)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// add ends an episode at the peer: at destination port of Service shop/web, n attempts lost.
func (p *fakePeer) add(port int32, n uint64) exposure.Finished {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := uint64(len(p.eps)) + 1
	if len(p.eps) > 0 {
		seq = p.eps[len(p.eps)-1].Seq + 1
	}
	start := t0.Add(time.Duration(seq) * time.Minute)
	f := exposure.Finished{Seq: seq, Key: exposure.Key{Namespace: "shop", Service: "web", Port: "http", Protocol: "TCP",
		Family: "IPv4", Kind: "node_port", DestPort: port}, Cause: exposure.CauseRollout, Start: start,
		End: start.Add(20 * time.Second), AttemptsCounted: true, Attempts: n, Seconds: 14}
	p.eps = append(p.eps, f)
	return f
}

// restart is the peer's process started again: a new instance, its numbers from 1, its ring empty.
func (p *fakePeer) restart(instance string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instance, p.eps = instance, nil
}

// slice is an EndpointSlice of the exporters' Service listing the peer at its test server's address.
func (p *fakePeer) slice(t *testing.T) *discoveryv1.EndpointSlice {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(p.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "exporters-" + p.node, Namespace: "lt", Labels: map[string]string{discoveryv1.LabelServiceName: "exporters"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, NodeName: &p.node}},
		Ports:       []discoveryv1.EndpointPort{{Port: new(int32(n))}},
	}
}

var web = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"}}

func testConfig() Config {
	return Config{Enabled: true, LeaseNamespace: "lt", LeaseName: "events", Identity: "writer-a", PeersNamespace: "lt",
		PeersService: "exporters", PeersScheme: "http", Poll: 20 * time.Millisecond, PeerTimeout: 300 * time.Millisecond,
		Rate: 1000, Burst: 1000}
}

// clientsOf serves Clients from client-go's typed fake, whose tracker and recorded actions the tests read
// (TestDynamicClients holds DynamicClients, what the exporter runs, to the same calls).
func clientsOf(cs *fake.Clientset) Clients {
	return Clients{Events: typedEvents{cs}, Leases: typedLeases{cs}, Slices: typedSlices{cs}, Services: typedServices{cs},
		Pods: typedPods{cs}, ReplicaSets: typedReplicaSets{cs}}
}

type typedEvents struct{ cs *fake.Clientset }

func (c typedEvents) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return c.cs.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}

type typedLeases struct{ cs *fake.Clientset }

func (c typedLeases) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return c.cs.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c typedLeases) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.cs.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{})
}

func (c typedLeases) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.cs.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}

type typedSlices struct{ cs *fake.Clientset }

func (c typedSlices) List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]discoveryv1.EndpointSlice, error) {
	l, err := c.cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

type typedServices struct{ cs *fake.Clientset }

func (c typedServices) List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]corev1.Service, error) {
	l, err := c.cs.CoreV1().Services(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

type typedPods struct{ cs *fake.Clientset }

func (c typedPods) List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]corev1.Pod, error) {
	l, err := c.cs.CoreV1().Pods(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

type typedReplicaSets struct{ cs *fake.Clientset }

func (c typedReplicaSets) Get(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error) {
	return c.cs.AppsV1().ReplicaSets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func newWriter(t *testing.T, cfg Config, cs *fake.Clientset) *Writer {
	w, err := New(cfg, clientsOf(cs), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func events(t *testing.T, cs *fake.Clientset) []eventsv1.Event {
	t.Helper()
	l, err := cs.EventsV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// creates counts the Event creates the writers sent (AlreadyExists ones too).
func creates(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			n++
		}
	}
	return n
}

// Off, the writer touches nothing: no Lease, no list, no poll, no write.
func TestOffWritesNothing(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	p.add(30090, 3)
	cs := fake.NewClientset(web, p.slice(t))
	cfg := testConfig()
	cfg.Enabled = false
	w := newWriter(t, cfg, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Run(ctx) // returns at once when off: a hang here fails the test by its timeout
	if ctx.Err() != nil {
		t.Fatal("Run waited for its context while off")
	}
	for _, a := range cs.Actions() {
		t.Errorf("off, the writer called the API: %s %s", a.GetVerb(), a.GetResource().Resource)
	}
	if len(p.asked) != 0 {
		t.Errorf("off, the writer asked a peer: %v", p.asked)
	}
	if testutil.ToFloat64(w.m.leader) != 0 {
		t.Error("off, the writer says it leads")
	}
}

// The leader writes one Event per episode, regarding the Service with its UID, Warning when attempts were lost
// and Normal when none were, its note naming the node, the attempts and the preStop to set.
func TestLeaderWritesOneEventPerEpisode(t *testing.T) {
	p := newPeer(t, "node-b", "i1")
	f := p.add(30090, 37)
	drain := 22.0
	p.mu.Lock()
	p.eps[0].LBDrainSeconds, p.eps[0].RecommendedPreStopSeconds = &drain, 27
	p.mu.Unlock()
	p.add(30091, 0)
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	cursors := map[string]Cursor{}
	w.poll(context.Background(), cursors)
	evs := events(t, cs)
	if len(evs) != 2 {
		t.Fatalf("%d Events, want 2", len(evs))
	}
	byName := map[string]eventsv1.Event{}
	for _, e := range evs {
		byName[e.Name] = e
	}
	e, ok := byName[EventName("node-b", f)]
	if !ok {
		t.Fatalf("no Event named %s: %v", EventName("node-b", f), byName)
	}
	wantNote := "rollout: node-b dropped 37 connection attempts at NodePort 30090/TCP (IPv4) over 14 s; the load balancer took 22 s to stop sending; set the pods' preStop to at least 27 s"
	if e.Type != corev1.EventTypeWarning || e.Note != wantNote || e.Regarding.UID != "uid-web" || e.Regarding.Kind != "Service" ||
		e.Regarding.Name != "web" || e.ReportingController != ReportingController || e.ReportingInstance != "writer-a" ||
		e.Reason != "ExposedDuringRollout" || e.Action != Action || e.Related == nil || e.Related.Name != "node-b" || e.Series != nil ||
		!e.EventTime.Time.Equal(f.End) {
		t.Errorf("Event = %+v\nnote %q", e, e.Note)
	}
	for _, e := range evs {
		if e.Name != EventName("node-b", f) && e.Type != corev1.EventTypeNormal {
			t.Errorf("the lossless episode's Event is %s, want Normal", e.Type)
		}
	}
	if cursors["node-b"] != (Cursor{Instance: "i1", Seq: 2}) {
		t.Errorf("cursor = %+v", cursors["node-b"])
	}
	if got := testutil.ToFloat64(w.m.events.WithLabelValues(ResultWritten)); got != 2 {
		t.Errorf("written = %v", got)
	}
	// Polled again, nothing new: nothing written, and the peer asked only after its cursor.
	w.poll(context.Background(), cursors)
	if n := creates(cs); n != 2 {
		t.Errorf("%d creates after a second poll, want 2", n)
	}
	if last := p.asked[len(p.asked)-1]; last != "after=2" {
		t.Errorf("second poll asked %q, want after=2", last)
	}
}

// An episode whose Event exists already (a writer before found it) is skipped, not written twice.
func TestExistingEventIsSkipped(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	p.add(30090, 3)
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	w.poll(context.Background(), map[string]Cursor{})
	w.poll(context.Background(), map[string]Cursor{}) // a leader without the cursor
	if len(events(t, cs)) != 1 {
		t.Fatalf("%d Events, want 1", len(events(t, cs)))
	}
	if got := testutil.ToFloat64(w.m.events.WithLabelValues(ResultSkipped)); got != 1 {
		t.Errorf("skipped = %v, want 1", got)
	}
}

// A peer that restarted has a new instance and numbers from 1 again: its episodes are read from its start,
// not after the old cursor.
func TestPeerRestartIsReadFromItsStart(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	p.add(30090, 1)
	p.add(30091, 2)
	p.add(30092, 3)
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	cursors := map[string]Cursor{}
	w.poll(context.Background(), cursors)
	p.restart("i2")
	p.add(30093, 4) // seq 1 of the new process: below the old cursor 3
	w.poll(context.Background(), cursors)
	if n := len(events(t, cs)); n != 4 {
		t.Fatalf("%d Events, want 4 (3 before the restart, 1 after)", n)
	}
	if cursors["node-a"] != (Cursor{Instance: "i2", Seq: 1}) {
		t.Errorf("cursor = %+v", cursors["node-a"])
	}
	if got := p.asked[len(p.asked)-2:]; got[0] != "after=3" || got[1] != "after=0" {
		t.Errorf("after the restart asked %v, want after=3 then after=0", got)
	}
}

// A peer answering garbage, one that hangs and one refusing are unreachable, counted and logged; the poll ends
// (the per-peer timeout) and the good peer's episode is written.
func TestBadPeersDoNotStallThePoll(t *testing.T) {
	good := newPeer(t, "node-good", "i1")
	good.add(30090, 5)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "<html>not json") }))
	defer garbage.Close()
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()
	objs := []runtime.Object{web, good.slice(t)}
	for i, u := range []string{garbage.URL, hanging.URL, refusedURL} {
		bp := &fakePeer{node: "node-bad" + strconv.Itoa(i), srv: &httptest.Server{URL: u}}
		objs = append(objs, bp.slice(t))
	}
	cs := fake.NewClientset(objs...)
	w := newWriter(t, testConfig(), cs)
	w.poll(context.Background(), map[string]Cursor{})
	if got := testutil.ToFloat64(w.m.unreachable); got != 3 {
		t.Errorf("unreachable = %v, want 3", got)
	}
	if n := len(events(t, cs)); n != 1 {
		t.Errorf("%d Events, want the good peer's 1", n)
	}
}

// Writes pass the token bucket: what it holds back waits for the next poll, from the cursor, and is written
// once tokens are back.
func TestRateLimitHoldsEpisodesBack(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	for i := range 5 {
		p.add(30090+int32(i), 1)
	}
	cs := fake.NewClientset(web, p.slice(t))
	cfg := testConfig()
	cfg.Rate, cfg.Burst = 1, 2
	w := newWriter(t, cfg, cs)
	now := t0
	w.now = func() time.Time { return now }
	w.limiter.AllowN(now, 0) // the bucket starts full at now
	cursors := map[string]Cursor{}
	w.poll(context.Background(), cursors)
	if n := len(events(t, cs)); n != 2 || cursors["node-a"].Seq != 2 {
		t.Fatalf("%d Events and cursor %d, want the burst of 2", n, cursors["node-a"].Seq)
	}
	now = now.Add(time.Second)
	w.poll(context.Background(), cursors)
	if n := len(events(t, cs)); n != 3 || cursors["node-a"].Seq != 3 {
		t.Fatalf("%d Events and cursor %d a second later, want one more", n, cursors["node-a"].Seq)
	}
	now = now.Add(time.Minute)
	w.poll(context.Background(), cursors)
	if n := len(events(t, cs)); n != 5 {
		t.Fatalf("%d Events once the bucket refilled, want 5", n)
	}
}

// Repeats at one destination that waited together become one Event with a series.
func TestRepeatsMergeIntoASeries(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	first := p.add(30090, 1)
	p.add(30090, 2)
	last := p.add(30090, 3)
	p.add(30091, 1)
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	w.poll(context.Background(), map[string]Cursor{})
	evs := events(t, cs)
	if len(evs) != 2 {
		t.Fatalf("%d Events, want the series and the other destination's", len(evs))
	}
	for _, e := range evs {
		if e.Name != EventName("node-a", first) {
			continue
		}
		if e.Series == nil || e.Series.Count != 3 || !e.Series.LastObservedTime.Time.Equal(last.End) ||
			!strings.Contains(e.Note, "3 connection attempts") || !strings.Contains(e.Note, "latest of 3") {
			t.Errorf("series Event = %+v, note %q", e.Series, e.Note)
		}
		return
	}
	t.Errorf("no Event named for the first repeat")
}

// A peer whose ring overran the cursor: what it no longer keeps is counted missed, the rest written.
func TestOverrunRingCountsMissed(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	for i := range 6 {
		p.add(30090+int32(i), 1)
	}
	p.mu.Lock()
	p.eps, p.oldest = p.eps[4:], 5
	p.mu.Unlock()
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	cursors := map[string]Cursor{"node-a": {Instance: "i1", Seq: 1}}
	w.poll(context.Background(), cursors)
	if got := testutil.ToFloat64(w.m.missed); got != 3 {
		t.Errorf("missed = %v, want 3 (2, 3, 4)", got)
	}
	if n := len(events(t, cs)); n != 2 || cursors["node-a"].Seq != 6 {
		t.Errorf("%d Events, cursor %d", n, cursors["node-a"].Seq)
	}
}

// The cursors ride on the Lease: when the leader stops, the next one takes the Lease and goes on from there,
// writing what ended since and nothing twice.
func TestCursorSurvivesLeaderChange(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	p.add(30090, 1)
	p.add(30091, 2)
	cs := fake.NewClientset(web, p.slice(t))
	fast := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond}
	a := newWriter(t, testConfig(), cs)
	a.timing = fast
	cfgB := testConfig()
	cfgB.Identity = "writer-b"
	b := newWriter(t, cfgB, cs)
	b.timing = fast

	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() { defer close(doneA); a.Run(ctxA) }()
	waitFor(t, "writer-a to write both Events and keep its cursor on the Lease", func() bool {
		return len(events(t, cs)) == 2 && leaseCursor(t, cs)["node-a"].Seq == 2
	})
	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan struct{})
	go func() { defer close(doneB); b.Run(ctxB) }()
	defer func() { stopB(); <-doneB }()
	stopA() // the leader's exporter stops: it hands the Lease back
	<-doneA
	p.add(30092, 3)
	waitFor(t, "writer-b to lead and write the new episode", func() bool {
		return holder(t, cs) == "writer-b" && len(events(t, cs)) == 3
	})
	if n := creates(cs); n != 3 {
		t.Errorf("%d Event creates, want 3: the new leader wrote an episode again", n)
	}
	if got := testutil.ToFloat64(a.m.leader) + testutil.ToFloat64(b.m.leader); got != 1 ||
		testutil.ToFloat64(b.m.leader) != 1 {
		t.Errorf("leader gauges a=%v b=%v", testutil.ToFloat64(a.m.leader), testutil.ToFloat64(b.m.leader))
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

func lease(t *testing.T, cs *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("lt").Get(context.Background(), "events", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

func leaseCursor(t *testing.T, cs *fake.Clientset) map[string]Cursor {
	out := map[string]Cursor{}
	if l := lease(t, cs); l != nil {
		_ = json.Unmarshal([]byte(l.Annotations[CursorsAnnotation]), &out)
	}
	return out
}

func holder(t *testing.T, cs *fake.Clientset) string {
	if l := lease(t, cs); l != nil && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}

// A peer whose kube-rbac-proxy refuses the leader's token is counted unreachable at every poll but logged once,
// as forbidden and naming the grant; its recovery is logged once, and what it kept meanwhile is then written.
func TestForbiddenPeerLoggedOnce(t *testing.T) {
	p := newPeer(t, "node-a", "i1")
	p.add(30090, 3)
	var forbid sync.Mutex
	refusing := true
	inner := p.srv.Config.Handler
	p.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forbid.Lock()
		no := refusing
		forbid.Unlock()
		if no {
			http.Error(w, "Forbidden (user=system:serviceaccount:lt:exporter, verb=get, resource=, subresource=)", http.StatusForbidden)
			return
		}
		inner.ServeHTTP(w, r)
	})
	cs := fake.NewClientset(web, p.slice(t))
	w := newWriter(t, testConfig(), cs)
	var logs lockedLog
	w.log = slog.New(slog.NewTextHandler(&logs, nil))
	cursors := map[string]Cursor{}
	for range 3 {
		w.poll(context.Background(), cursors)
	}
	if got := testutil.ToFloat64(w.m.unreachable); got != 1 {
		t.Errorf("unreachable = %v, want 1", got)
	}
	if n := len(events(t, cs)); n != 0 {
		t.Errorf("%d Events from a peer that refused, want 0", n)
	}
	out := logs.String()
	if strings.Count(out, "peer did not answer usably") != 1 || !strings.Contains(out, "forbidden: HTTP 403") ||
		!strings.Contains(out, "nonResourceURLs [/episodes]") {
		t.Errorf("want one line saying the peer forbids /episodes, got:\n%s", out)
	}
	forbid.Lock()
	refusing = false
	forbid.Unlock()
	w.poll(context.Background(), cursors)
	w.poll(context.Background(), cursors)
	if got := testutil.ToFloat64(w.m.unreachable); got != 0 {
		t.Errorf("unreachable = %v once the peer answers, want 0", got)
	}
	if n := len(events(t, cs)); n != 1 {
		t.Errorf("%d Events once the peer answers, want 1", n)
	}
	if out := logs.String(); strings.Count(out, "peer answers again") != 1 || strings.Count(out, "peer did not answer usably") != 1 {
		t.Errorf("want one line for the recovery, got:\n%s", out)
	}
}

// lockedLog collects a logger's lines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
