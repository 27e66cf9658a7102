package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// loopbackAddrs pretends the node's InternalIP 127.0.0.1 is this host's only address.
type loopbackAddrs struct{}

func (loopbackAddrs) LocalAddrs() ([]net.IP, error) { return []net.IP{net.ParseIP("127.0.0.1")}, nil }

// LinkNames: the host has no link of a kube-proxy replacement.
func (loopbackAddrs) LinkNames() ([]string, error) { return []string{"lo"}, nil }

// fixedRules is a dataplane reader (scrape.DataplaneReader) that returns one snapshot of kube-proxy's rules.
type fixedRules struct{ snap *kernelrules.Snapshot }

func (f fixedRules) Read(context.Context) (dataplane.Rules, error) { return f.snap, nil }

// kube-proxy v1.37.2's exact health server and health check bodies (kube-proxy's pkg/proxy/healthcheck: service_health.go and proxy_health.go).
const kubeProxyHealthyBody = `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true}}}`

func healthCheckBody(ns, name string, local int) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}", ns, name, local)
}

// healthCheckServer answers like kube-proxy's health check node port for ns/name with local endpoints.
func healthCheckServer(t *testing.T, ns, name string, local int) int32 {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		status := http.StatusOK
		if local == 0 {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(local))
		w.WriteHeader(status)
		io.WriteString(w, healthCheckBody(ns, name, local))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return int32(p)
}

func kubeProxyServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, kubeProxyHealthyBody)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func svc(ns, name string, typ corev1.ServiceType, policy corev1.ServiceExternalTrafficPolicy, hcnp int32, nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: "10.96.0.20", ExternalTrafficPolicy: policy, HealthCheckNodePort: hcnp,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: nodePort}}},
	}
}

func endpoints(ns, name string, nodes ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, n := range nodes {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i, i+10)},
			NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// scrapeAPI runs the exporter's /metrics handler over a fake API holding objs and returns the body.
func scrapeAPI(t *testing.T, ruleReader scrape.DataplaneReader, kubeProxy string, objs ...runtime.Object) string {
	t.Helper()
	return scrapeWithTimeout(t, "5", ruleReader, kubeProxy, objs...)
}

// everySeries turns on the collectors and series the defaults leave out: the scrape tests cover every metric.
func everySeries() []string {
	return []string{"--collector.service_details", "--collector.rules.per-port"}
}

// scrapeWithTimeout is scrapeAPI with Prometheus' scrape timeout header set to timeout (seconds).
func scrapeWithTimeout(t *testing.T, timeout string, ruleReader scrape.DataplaneReader, kubeProxy string, objs ...runtime.Object) string {
	t.Helper()
	return scrapeWithFlags(t, timeout, everySeries(), ruleReader, kubeProxy, objs...)
}

// scrapeWithFlags is scrapeWithTimeout with the exporter's collector flags given.
func scrapeWithFlags(t *testing.T, timeout string, flags []string, ruleReader scrape.DataplaneReader, kubeProxy string, objs ...runtime.Object) string {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	client := fake.NewClientset(append(objs, node)...)
	args := append([]string{"--node-name=node-1", "--kube-proxy.healthz-address=" + kubeProxy}, flags...)
	opts, err := parseOptions(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	view := kubeview.New(kubeviewtest.NewAPI(client), "node-1", kubeview.WithIgnoreSelector(opts.kube.IgnoreSelector))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view.Start(ctx)
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := newMetricsHandler(mustExporter(t)(newExporter(opts, view, loopbackAddrs{}, ruleReader, logger)), opts, logger)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
		h.ServeHTTP(rec, req)
		body := rec.Body.String()
		// The informers fill asynchronously after the first sync of an empty watch; wait for the node.
		if rec.Code == http.StatusOK && strings.Contains(body, `localtraffic_node_found{node="node-1"} 1`) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrape never complete: status %d\n%s", rec.Code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// normalize keeps the exporter's own series and masks what changes from run to run (durations, timestamps,
// ports of the loopback servers), so a golden file can hold the rest exactly.
func normalize(body string, hcnps map[int32]string) string {
	// The informers' watch counts too: a watch may open just before or after the scrape.
	volatile := regexp.MustCompile(`^(localtraffic_[a-z_]*(duration_seconds|timestamp_seconds|informer_watch_total)\{[^}]*\}) .*$`)
	var keep []string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "localtraffic_") && !strings.HasPrefix(line, "# HELP localtraffic_") && !strings.HasPrefix(line, "# TYPE localtraffic_") {
			continue
		}
		if strings.Contains(line, "localtraffic_build_info") {
			continue // carries the Go version
		}
		line = volatile.ReplaceAllString(line, "$1 <volatile>")
		for port, name := range hcnps {
			line = strings.ReplaceAll(line, `health_check_node_port="`+strconv.Itoa(int(port))+`"`, `health_check_node_port="<`+name+`>"`)
		}
		keep = append(keep, line)
	}
	// The exposition was sorted before the masking; sort each family's samples again so the order does not
	// depend on the loopback servers' random ports.
	for i := 0; i < len(keep); {
		j := i
		for j < len(keep) && !strings.HasPrefix(keep[j], "#") {
			j++
		}
		sort.Strings(keep[i:j])
		i = j + 1
	}
	return strings.Join(keep, "\n") + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("/metrics differs from %s (go test -update rewrites it):\n%s", path, lineDiff(string(want), got))
	}
}

func lineDiff(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var out []string
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Scenario 1, the drill as the API sees it: checkout's replicas all on node-2, so node-1 blackholes its NodePort.
// Beside it a LoadBalancer Service with no endpoint here whose health check answers 503 (drained: no blackhole),
// one with a local endpoint answering 200, and a Cluster-policy Service that is never reported. Rules are not read.
func TestGoldenDrillAPIView(t *testing.T) {
	webHC := healthCheckServer(t, "shop", "web", 0)
	apiHC := healthCheckServer(t, "shop", "api", 1)
	objs := []runtime.Object{
		svc("kubelings", "checkout", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30090),
		endpoints("kubelings", "checkout", "node-2", "node-2", "node-2"),
		svc("shop", "web", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, webHC, 30100),
		endpoints("shop", "web", "node-2"),
		svc("shop", "api", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, apiHC, 30101),
		endpoints("shop", "api", "node-1", "node-3"),
		svc("shop", "cluster", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyCluster, 0, 30102),
		endpoints("shop", "cluster", "node-2"),
	}
	ports := map[int32]string{webHC: "web-hcnp", apiHC: "api-hcnp"}
	body := scrapeAPI(t, nil, kubeProxyServer(t), objs...)
	golden(t, "drill-api.prom", normalize(body, ports))
	promlintCheck(t, body)
	// The defaults: the series budget's subset of the same scrape (docs/metrics.md, "Series budget").
	body = scrapeWithFlags(t, "5", nil, nil, kubeProxyServer(t), objs...)
	golden(t, "drill-api-defaults.prom", normalize(body, ports))
	promlintCheck(t, body)
}

// Scenario 2, rules read: kube-proxy's rules disagree with the API (a wrong --hostname-override makes every
// endpoint remote): the API says checkout has a local endpoint, the rules drop. Rules decide the verdict.
func TestGoldenRulesMismatch(t *testing.T) {
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	snap := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, DropPackets: 42}})
	body := scrapeAPI(t, fixedRules{snap}, kubeProxyServer(t),
		svc("kubelings", "checkout", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30090),
		endpoints("kubelings", "checkout", "node-1", "node-2"),
	)
	golden(t, "rules-mismatch.prom", normalize(body, nil))
	promlintCheck(t, body)
}

// promlintCheck lints the exposition with client_golang's promlint, the linter `promtool check metrics` runs,
// in-process: nothing to install, nothing to skip.
func promlintCheck(t *testing.T, body string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// Hostile peers end up as metric states within the scrape's deadline: a health check node port that accepts and
// never answers, and a kube-proxy health server answering garbage. The scrape itself succeeds.
func TestScrapeWithHostilePeers(t *testing.T) {
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // hold the connection open, say nothing
		}
	}()
	_, portStr, _ := net.SplitHostPort(hang.Addr().String())
	port, _ := strconv.Atoi(portStr)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "<html>not kube-proxy</html>")
	}))
	t.Cleanup(garbage.Close)

	done := make(chan string, 1)
	go func() {
		done <- scrapeWithTimeout(t, "2", nil, garbage.Listener.Addr().String(),
			svc("shop", "web", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, int32(port), 30100),
			endpoints("shop", "web", "node-2"))
	}()
	var body string
	select {
	case body = <-done:
	case <-time.After(30 * time.Second): // a hang guard only: the scrape's own deadline is 1.5 s
		t.Fatal("scrape did not return")
	}
	for _, want := range []string{
		`localtraffic_health_check_result{namespace="shop",node="node-1",result="timeout",service="web"} 1`,
		`localtraffic_health_check_up{namespace="shop",node="node-1",service="web"} 0`,
		// A health check that times out drains the node, as a 503 does: out of rotation, no blackhole.
		`localtraffic_in_rotation{namespace="shop",node="node-1",service="web"} 0`,
		`localtraffic_blackhole{namespace="shop",node="node-1",service="web"} 0`,
		`localtraffic_kube_proxy_result{endpoint="healthz",node="node-1",result="invalid"} 1`,
		`localtraffic_kube_proxy_up{endpoint="healthz",node="node-1"} 0`,
		`localtraffic_kube_proxy_healthy{node="node-1"} 0`,
		`localtraffic_scrape_collector_success{collector="services",node="node-1"} 1`,
		`localtraffic_scrape_collector_success{collector="kube_proxy",node="node-1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
}

// countingRunner answers kube-proxy's nftables listing slowly and counts how many of each command run at once.
type countingRunner struct {
	mu       sync.Mutex
	ipv4     []byte
	inFlight map[string]int
	maxSeen  map[string]int
	calls    map[string]int
}

func (r *countingRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	key := name + " " + strings.Join(args, " ")
	r.mu.Lock()
	r.calls[key]++
	r.inFlight[key]++
	r.maxSeen[key] = max(r.maxSeen[key], r.inFlight[key])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight[key]--
		r.mu.Unlock()
	}()
	select { // long enough for every concurrent scrape to arrive while the read is in flight
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch key {
	case "nft -j list table ip kube-proxy":
		return r.ipv4, nil
	case "nft -j list table ip6 kube-proxy":
		return nil, &kernelrules.CommandError{Cmd: key, Err: errors.New("exit status 1"), Stderr: "Error: No such file or directory"}
	}
	return nil, &kernelrules.CommandError{Cmd: key, Err: errors.New("exit status 1"), Stderr: "unexpected command"}
}

// 50 scrapes at once share one read of kube-proxy's rules: at most one listing per table in flight, and with
// the cache, one in all. Every scrape gets the rules' verdict.
func TestConcurrentScrapesShareOneRuleRead(t *testing.T) {
	ipv4, err := os.ReadFile("../../nodeprobe/kernelrules/testdata/nft-ipv4.json")
	if err != nil {
		t.Fatal(err)
	}
	runner := &countingRunner{ipv4: ipv4, inFlight: map[string]int{}, maxSeen: map[string]int{}, calls: map[string]int{}}
	reader := kernelrules.NewDataplane(kernelrules.Options{Mode: kernelrules.ModeNFTables, Runner: runner, CacheTTL: time.Minute,
		LookPath: func(f string) (string, error) { return "/usr/sbin/" + f, nil }})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	client := fake.NewClientset(node,
		svc("kubelings", "checkout", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30090),
		endpoints("kubelings", "checkout", "node-2"))
	view := kubeview.New(kubeviewtest.NewAPI(client), "node-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view.Start(ctx)
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	opts, err := parseOptions([]string{"--node-name=node-1", "--kube-proxy.healthz-address=" + kubeProxyServer(t),
		"--web.max-requests=60"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(newMetricsHandler(mustExporter(t)(newExporter(opts, view, loopbackAddrs{}, reader, logger)), opts, logger))
	defer srv.Close()

	const scrapes = 50
	bodies := make([]string, scrapes)
	errs := make([]error, scrapes)
	var wg sync.WaitGroup
	for i := range scrapes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			bodies[i], errs[i] = string(b), err
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("status %s", resp.Status)
			}
		}()
	}
	wg.Wait()
	for i := range scrapes {
		if errs[i] != nil {
			t.Fatalf("scrape %d: %v", i, errs[i])
		}
		if !strings.Contains(bodies[i], `localtraffic_blackhole_source_info{node="node-1",source="rules"} 1`) ||
			!strings.Contains(bodies[i], `localtraffic_rules_read_success{node="node-1"} 1`) {
			t.Fatalf("scrape %d did not get the rules:\n%s", i, bodies[i])
		}
	}
	runner.mu.Lock()
	defer runner.mu.Unlock()
	for key, n := range runner.maxSeen {
		if n > 1 {
			t.Errorf("%d runs of %q in flight at once, want at most 1", n, key)
		}
	}
	for key, n := range runner.calls {
		if n != 1 {
			t.Errorf("%q ran %d times for %d scrapes within the cache window, want 1", key, n, scrapes)
		}
	}
	if len(runner.calls) != 2 {
		t.Errorf("commands run: %v", runner.calls)
	}
}

// --rules.mode=none beside the rules: for NodePort Services whose rules agree with the API, both give the same
// verdicts (the API view decides one, the rules the other).
func TestAPIOnlyModeAgreesWithRules(t *testing.T) {
	objs := []runtime.Object{
		svc("kubelings", "checkout", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30090),
		endpoints("kubelings", "checkout", "node-2"),
		svc("shop", "api", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30091),
		endpoints("shop", "api", "node-1"),
	}
	port := func(ns, name string) kernelrules.ServicePort {
		return kernelrules.ServicePort{Namespace: ns, Name: name, Port: "http", Protocol: "TCP"}
	}
	snap := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{
			port("kubelings", "checkout"): {Programmed: true, Drop: true, Drops: []kernelrules.DropRule{{Port: 30090, Counted: true}}},
			port("shop", "api"):           {Programmed: true, LocalEndpoints: 1},
		})
	verdicts := func(body string) []string {
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "localtraffic_blackhole{") || strings.HasPrefix(l, "localtraffic_in_rotation{") {
				out = append(out, l)
			}
		}
		sort.Strings(out)
		return out
	}
	kp := kubeProxyServer(t)
	apiOnly, withRules := verdicts(scrapeAPI(t, nil, kp, objs...)), verdicts(scrapeAPI(t, fixedRules{snap}, kp, objs...))
	want := []string{
		`localtraffic_blackhole{namespace="kubelings",node="node-1",service="checkout"} 1`,
		`localtraffic_blackhole{namespace="shop",node="node-1",service="api"} 0`,
		`localtraffic_in_rotation{namespace="kubelings",node="node-1",service="checkout"} 1`,
		`localtraffic_in_rotation{namespace="shop",node="node-1",service="api"} 1`,
	}
	if !reflect.DeepEqual(apiOnly, want) || !reflect.DeepEqual(withRules, want) {
		t.Errorf("API-only:\n%s\nwith rules:\n%s\nwant:\n%s", strings.Join(apiOnly, "\n"), strings.Join(withRules, "\n"), strings.Join(want, "\n"))
	}
}

// mustExporter unwraps newExporter's or exporterFor's result, failing t on an error.
func mustExporter(t testing.TB) func(*collector.Exporter, error) *collector.Exporter {
	return func(e *collector.Exporter, err error) *collector.Exporter {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// TestScrapeIgnoredServices: a Service annotated localtraffic.io/intentional-placement, and one the
// --services.ignore-selector flag selects, are still measured (their blackhole is exported as for any other) and
// exported as ignored with the reason; a plain Service is not.
func TestScrapeIgnoredServices(t *testing.T) {
	pinned := svc("shop", "pinned", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30100)
	pinned.Annotations = map[string]string{kubeview.AnnotationIntentionalPlacement: "licensed on node-2 only"}
	legacy := svc("shop", "legacy", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30101)
	legacy.Labels = map[string]string{"team": "legacy"}
	plain := svc("shop", "plain", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, 0, 30102)
	body := scrapeWithFlags(t, "5", []string{"--services.ignore-selector=team=legacy", "--rules.mode=none"}, nil, kubeProxyServer(t),
		pinned, legacy, plain, endpoints("shop", "pinned", "node-2"), endpoints("shop", "legacy", "node-2"), endpoints("shop", "plain", "node-2"))
	for _, want := range []string{
		`localtraffic_blackhole{namespace="shop",node="node-1",service="pinned"} 1`,
		`localtraffic_blackhole{namespace="shop",node="node-1",service="legacy"} 1`,
		`localtraffic_blackhole{namespace="shop",node="node-1",service="plain"} 1`,
		`localtraffic_service_ignored_info{namespace="shop",node="node-1",reason="licensed on node-2 only",service="pinned"} 1`,
		`localtraffic_service_ignored_info{namespace="shop",node="node-1",reason="ignore selector team=legacy",service="legacy"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %s", want)
		}
	}
	if regexp.MustCompile(`localtraffic_service_ignored_info\{[^}]*service="plain"`).MatchString(body) {
		t.Error("the plain Service is exported as ignored")
	}
}
