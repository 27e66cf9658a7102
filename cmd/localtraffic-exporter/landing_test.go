package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/html"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// countingSource counts the States asked of the real gatherer.
type countingSource struct {
	source collector.StateSource
	n      atomic.Int64
}

func (c *countingSource) Gather(ctx context.Context) *scrape.State {
	c.n.Add(1)
	return c.source.Gather(ctx)
}

// landingFixture is the drill as node-1 sees it through the API (see TestGoldenDrillAPIView): checkout's
// endpoints are all on node-2 (blackhole here), shop/web's health check answers 503 (out of rotation), shop/api
// has a local endpoint and its health check answers 200 (serving).
func landingFixture(t *testing.T) (*landingPage, http.Handler, *countingSource) {
	t.Helper()
	webHC := healthCheckServer(t, "shop", "web", 0)
	apiHC := healthCheckServer(t, "shop", "api", 1)
	objs := []runtime.Object{
		svc("kubelings", "checkout", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30090),
		endpoints("kubelings", "checkout", "node-2", "node-2", "node-2"),
		svc("shop", "web", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, webHC, 30100),
		endpoints("shop", "web", "node-2"),
		svc("shop", "api", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, apiHC, 30101),
		endpoints("shop", "api", "node-1", "node-3"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}},
	}
	view := kubeview.New(kubeviewtest.NewAPI(fake.NewClientset(objs...)), "node-1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view.Start(ctx)
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	opts, err := parseOptions([]string{"--node-name=node-1", "--kube-proxy.healthz-address=" + kubeProxyServer(t), "--rules.mode=none"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	counting := &countingSource{source: newGatherer(opts, view, loopbackAddrs{}, nil, nil, logger)}
	states := &lastState{source: counting}
	page := &landingPage{node: "node-1", metricsPath: "/metrics", states: states, gatherTimeout: 5 * time.Second, now: time.Now}
	return page, newMetricsHandler(mustExporter(t)(exporterFor(opts, states, logger)), opts, logger), counting
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// tableRows parses the page as a browser would and returns the cells of table#id, header row first.
func tableRows(t *testing.T, page, id string) [][]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the page is not HTML: %v", err)
	}
	var table *html.Node
	var find func(*html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" {
			for _, a := range n.Attr {
				if a.Key == "id" && a.Val == id {
					table = n
				}
			}
		}
		for c := n.FirstChild; c != nil && table == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if table == nil {
		t.Fatalf("no table#%s in the page:\n%s", id, page)
	}
	var rows [][]string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" {
			var row []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
					row = append(row, text(c))
				}
			}
			rows = append(rows, row)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(table)
	return rows
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

// TestLandingPageShowsTheVerdicts: the table says, per Local Service, what the collectors say: checkout
// blackholes on node-1, shop/web is out of rotation (503), shop/api serves; with the API's local endpoint count,
// the health check's answer and how long it took; kube-proxy's health above; links to /metrics.
func TestLandingPageShowsTheVerdicts(t *testing.T) {
	page, _, _ := landingFixture(t)
	code, body := get(t, page, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	if !strings.Contains(body, `<a href="/metrics">Metrics</a>`) || !strings.Contains(body, "Version: ") {
		t.Errorf("no link to /metrics or no version:\n%s", body)
	}
	rows := tableRows(t, body, "services")
	if len(rows) != 4 {
		t.Fatalf("services table has %d rows, want a header and 3 Services: %q", len(rows), rows)
	}
	want := map[string]struct{ verdict, rotation, endpoints, check string }{
		"kubelings/checkout": {"BLACKHOLE", "yes", "IPv4 0", "no health check node port"},
		"shop/web":           {"out of rotation", "no", "IPv4 0", "IPv4 unavailable (503), localEndpoints 0"},
		"shop/api":           {"serving", "yes", "IPv4 1", "IPv4 ok (200), localEndpoints 1"},
	}
	for _, r := range rows[1:] {
		w, ok := want[r[0]]
		if !ok {
			t.Errorf("unexpected row %q", r)
			continue
		}
		if r[1] != w.verdict || r[2] != w.rotation || r[4] != w.endpoints || r[6] != w.check {
			t.Errorf("row %q: want verdict %q, in rotation %q, API endpoints %q, health check %q", r, w.verdict, w.rotation, w.endpoints, w.check)
		}
		if r[3] == "" {
			t.Errorf("row %q says nothing about why", r)
		}
		// A blackhole says what its page rests on: no meter in this test, so declared, not observed.
		if w.verdict == "BLACKHOLE" && !strings.HasPrefix(r[3], "blackhole reason not_observed (warning") {
			t.Errorf("row %q: the blackhole's reason is not first in why", r)
		}
		if strings.HasPrefix(r[6], "IPv4") {
			if d, err := time.ParseDuration(r[7]); err != nil || d <= 0 {
				t.Errorf("row %q: took %q, want a duration", r, r[7])
			}
		}
	}
	kp := tableRows(t, body, "kube-proxy")
	if len(kp) != 3 || kp[1][0] != "/healthz" || kp[1][1] != "ok (200)" || kp[2][0] != "/livez" {
		t.Errorf("kube-proxy table %q", kp)
	}
	if code, _ := get(t, page, "/nothing-here"); code != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", code)
	}
}

// TestLandingPageIsTheLastScrape: after a scrape the page renders that scrape's State without probing again
// (the same State the collectors rendered); before any scrape it gathers once.
func TestLandingPageIsTheLastScrape(t *testing.T) {
	page, metrics, counting := landingFixture(t)
	get(t, page, "/")
	if n := counting.n.Load(); n != 1 {
		t.Fatalf("first GET / gathered %d times, want 1", n)
	}
	code, body := get(t, metrics, "/metrics")
	if code != http.StatusOK || !strings.Contains(body, `localtraffic_blackhole{namespace="kubelings",node="node-1",service="checkout"} 1`) {
		t.Fatalf("scrape: %d\n%s", code, body)
	}
	_, scrapedAt := page.states.latest()
	for i := 0; i < 3; i++ {
		_, body = get(t, page, "/")
	}
	if n := counting.n.Load(); n != 2 {
		t.Errorf("gathers: %d, want 2 (the first page view, the scrape; later views reuse the scrape)", n)
	}
	if !strings.Contains(body, scrapedAt.UTC().Format(time.RFC3339)) {
		t.Errorf("the page does not show the scrape's time %s", scrapedAt.UTC().Format(time.RFC3339))
	}
}

// TestLandingPageEscapes: text from peers (an error from a hostile health check server, names) is escaped.
func TestLandingPageEscapes(t *testing.T) {
	evil := `<script>alert("x")</script>`
	st := &scrape.State{
		Source: scrape.SourceAPI, Dataplane: scrape.DataplaneKubeProxy, RulesErr: errors.New(evil), RulesConfigured: true,
		KubeProxy: scrape.KubeProxyState{Err: errors.New(evil)},
		Services: []*scrape.ServiceResult{{
			Service: kubeview.ServiceState{Namespace: "ns", Name: "svc", Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol}}},
			Checks: []scrape.FamilyCheck{{Family: corev1.IPv4Protocol, HealthCheck: nodeprobe.HealthCheck{
				Result: nodeprobe.ResultInvalid, StatusCode: 200, LocalEndpoints: -1, Err: errors.New(evil)}}},
		}},
	}
	states := &lastState{source: fixedState{st}}
	states.Gather(context.Background())
	page := &landingPage{node: "node-1", metricsPath: "/metrics", states: states, gatherTimeout: time.Second, now: time.Now}
	_, body := get(t, page, "/")
	if strings.Contains(body, "<script>") {
		t.Fatalf("unescaped markup in the page:\n%s", body)
	}
	rows := tableRows(t, body, "services")
	if len(rows) != 2 || rows[1][8] != evil {
		t.Errorf("the error cell should read the text %q: %q", evil, rows)
	}
}

type fixedState struct{ st *scrape.State }

func (f fixedState) Gather(context.Context) *scrape.State { return f.st }

// BenchmarkLandingPage renders the page for 1000 Local Services (the view and the template; no gathering).
func BenchmarkLandingPage(b *testing.B) {
	st := &scrape.State{Source: scrape.SourceRules, Dataplane: scrape.DataplaneKubeProxy, RulesConfigured: true}
	for i := 0; i < 1000; i++ {
		st.Services = append(st.Services, &scrape.ServiceResult{
			Service: kubeview.ServiceState{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol, LocalEndpoints: 1}}},
			Checks: []scrape.FamilyCheck{{Family: corev1.IPv4Protocol, HealthCheck: nodeprobe.HealthCheck{
				Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 1, Duration: time.Millisecond}}},
			Verdict: verdict.Verdict{InRotation: true},
		})
	}
	states := &lastState{source: fixedState{st}}
	states.Gather(context.Background())
	page := &landingPage{node: "node-1", metricsPath: "/metrics", states: states, gatherTimeout: time.Second, now: time.Now}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// A port whose rules still DNAT to a pod the API no longer has says which address, on the page.
func TestLandingStaleEndpoints(t *testing.T) {
	row := serviceView(&scrape.ServiceResult{
		Service: kubeview.ServiceState{Namespace: "kubelings", Name: "checkout"},
		Ports: []scrape.PortResult{{Family: corev1.IPv4Protocol, Label: "http", GoneEndpoints: 1,
			Rules: kernelrules.PortState{Programmed: true, LocalEndpoints: 1,
				Endpoints: []kernelrules.Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:8080")}}}}},
	})
	if want := "IPv4 http: 1 local endpoints (1 no longer in the API: 10.244.1.5:8080)"; row.Rules != want {
		t.Errorf("rules column %q, want %q", row.Rules, want)
	}
}
