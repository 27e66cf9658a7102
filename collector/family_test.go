package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
)

// hcAnswer is what one family's health check server says; status 0: nothing listens in that family.
type hcAnswer struct {
	status int
	local  int
}

// dualStackHealthCheck serves kube-proxy's health check answer for kubelings/checkout on 127.0.0.1 and ::1
// at the same port, one answer per family, as v1.37's per-family servers do (tcp4 and tcp6 sockets).
func dualStackHealthCheck(t *testing.T, a4, a6 hcAnswer) int32 {
	t.Helper()
	handler := func(a hcAnswer) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Load-Balancing-Endpoint-Weight", fmt.Sprint(a.local))
			w.WriteHeader(a.status)
			fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": \"kubelings\",\n\t\t\"name\": \"checkout\"\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}", a.local)
		})
	}
	for attempt := 0; attempt < 20; attempt++ {
		l4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port))
		if err != nil {
			l4.Close()
			continue // the port is taken in IPv6: try another
		}
		serve := func(l net.Listener, a hcAnswer) {
			if a.status == 0 {
				l.Close() // nothing listens: connections are refused
				return
			}
			srv := &http.Server{Handler: handler(a), ReadHeaderTimeout: time.Second}
			go srv.Serve(l)
			t.Cleanup(func() { srv.Close() })
		}
		serve(l4, a4)
		serve(l6, a6)
		return int32(port)
	}
	t.Fatal("no port free in both families")
	return 0
}

type scrapeSetup struct {
	view      scrape.APIView
	reader    kernelrules.Reader
	addrs     scrapetest.Addrs
	kubeProxy func(kubeview.NodeState) (string, error)
	dataplane scrape.DataplaneKind
	links     scrapetest.Links
	// kept: every scrape of the setup goes through one gatherer, so what a gatherer keeps across scrapes (drop
	// counters' baselines, kube-proxy seen, the /configz cache) carries over, as in the exporter; the setup's
	// addresses may change between scrapes. nil: a fresh gatherer per scrape.
	kept      *keptGatherer
	window    time.Duration
	selection *Selection // nil: every collector, every series
	configz   string     // kube-proxy's /configz URL; "": not read
}

// keptGatherer is a scrapeSetup's one gatherer and the addresses it reads (the setup's, as of each scrape).
type keptGatherer struct {
	g     *scrape.Gatherer
	addrs scrapetest.Addrs
}

func (k *keptGatherer) LocalAddrs() ([]net.IP, error) { return k.addrs.LocalAddrs() }

func (s scrapeSetup) scrape(t *testing.T) *prometheus.Registry {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if s.kubeProxy == nil {
		s.kubeProxy = scrapetest.NoAddress
	}
	if s.window == 0 {
		s.window = 10 * time.Minute
	}
	k := s.kept
	if k == nil {
		k = &keptGatherer{}
	}
	k.addrs = s.addrs
	if k.g == nil {
		k.g = scrape.NewGatherer(scrape.GathererConfig{View: s.view, RuleReader: s.reader, Addrs: k, KubeProxyAddress: s.kubeProxy,
			ProbeTimeout: 2 * time.Second, Dataplane: s.dataplane, Links: s.links, ExternalIPWindow: s.window, ConfigzURL: s.configz,
			Logger: logger})
	}
	g := k.g
	collectors := everyCollector()
	if s.selection != nil {
		var err error
		if collectors, err = s.selection.Collectors(); err != nil {
			t.Fatal(err)
		}
	}
	exp := NewExporter(logger, g, collectors...)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp.Bind(context.Background()))
	return reg
}

func dualStackLB(hcnp int32, local4, local6 int) kubeview.Snapshot {
	svc := scrapetest.LBService(scrapetest.Family(v4, local4, true), scrapetest.Family(v6, local6, true))
	svc.HealthCheckNodePort = hcnp
	return kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{svc}}
}

func expectSeries(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(want), "\n")
	sort.Strings(lines)
	if got, want := series(t, reg, names...), strings.Join(lines, "\n"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func expectContains(t *testing.T, reg *prometheus.Registry, name, line string) {
	t.Helper()
	if got := series(t, reg, name); !strings.Contains(got+"\n", line+"\n") {
		t.Errorf("missing %s in\n%s", line, got)
	}
}

// Each family's health check is probed on that family's address: IPv4 answers 200 (a local endpoint),
// IPv6 503 (none). The load balancer drains the node for IPv6 only, so its IPv6 drop is no blackhole; the
// per-Service health check series summarise both families (first failing family, smallest count).
func TestHealthCheckPerFamily(t *testing.T) {
	hcnp := dualStackHealthCheck(t, hcAnswer{200, 1}, hcAnswer{503, 0})
	reg := scrapeSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_health_check_local_endpoints{namespace="kubelings",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="empty",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="error",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="invalid",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="no_address",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="ok",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="refused",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="timeout",service="checkout"} 0
localtraffic_health_check_result{namespace="kubelings",result="unavailable",service="checkout"} 1
localtraffic_health_check_up{namespace="kubelings",service="checkout"} 0
localtraffic_in_rotation{namespace="kubelings",service="checkout"} 1
localtraffic_local_endpoints{namespace="kubelings",service="checkout"} 0
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 0
`, "localtraffic_blackhole", "localtraffic_in_rotation", "localtraffic_health_check_up", "localtraffic_health_check_result",
		"localtraffic_health_check_local_endpoints", "localtraffic_local_endpoints", "localtraffic_rules_mismatch")
}

// The IPv6 health check answers 200 while the API has no IPv6 endpoint here (kube-proxy's IPv6 proxier
// disagrees): the load balancer keeps sending IPv6 traffic, and the API view says it drops: a blackhole, and
// without rules the health check's own count reports the mismatch.
func TestHealthCheckFamilyDisagrees(t *testing.T) {
	hcnp := dualStackHealthCheck(t, hcAnswer{200, 1}, hcAnswer{200, 1})
	reg := scrapeSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_health_check_up{namespace="kubelings",service="checkout"} 1
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 1
`, "localtraffic_blackhole", "localtraffic_health_check_up", "localtraffic_rules_mismatch")
}

// kube-proxy stopped: the health check port refuses in both families while the (stale) API view says the
// node drops. A load balancer that checks the port has drained the node: no blackhole page.
func TestHealthCheckRefusedDrains(t *testing.T) {
	hcnp := dualStackHealthCheck(t, hcAnswer{}, hcAnswer{})
	reg := scrapeSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 0, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_in_rotation{namespace="kubelings",service="checkout"} 0
`, "localtraffic_blackhole", "localtraffic_in_rotation")
	expectContains(t, reg, "localtraffic_health_check_result", `localtraffic_health_check_result{namespace="kubelings",result="refused",service="checkout"} 1`)
	if s := series(t, reg, "localtraffic_health_check_result"); strings.Count(s, "} 1") != 1 {
		t.Errorf("one-hot broken:\n%s", s)
	}
}

// A node without an IPv6 address kube-proxy serves: the IPv6 family is not probed, the result says
// no_address, and that family is out of load balancer rotation.
func TestHealthCheckNoAddress(t *testing.T) {
	hcnp := dualStackHealthCheck(t, hcAnswer{200, 1}, hcAnswer{200, 1})
	snap := dualStackLB(hcnp, 1, 0)
	snap.Node.InternalIPs = []string{"127.0.0.1"}
	reg := scrapeSetup{view: &scrapetest.View{Snap: snap}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_in_rotation{namespace="kubelings",service="checkout"} 1
`, "localtraffic_blackhole", "localtraffic_in_rotation")
	expectContains(t, reg, "localtraffic_health_check_result", `localtraffic_health_check_result{namespace="kubelings",result="no_address",service="checkout"} 1`)
}

// Dual-stack rules: the families agree on one Service and disagree on another. Per-port series carry
// ip_family; the mismatch is judged per family, so agreeing dual-stack Services show none.
func TestRulesPerFamily(t *testing.T) {
	agree := scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 1, true))
	agree.Name = "agree"
	v6missing := scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true))
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{agree, v6missing}}}
	port := func(name string) kernelrules.ServicePort {
		return kernelrules.ServicePort{Namespace: "kubelings", Name: name, Port: "http", Protocol: "TCP"}
	}
	snap := kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000, 0), map[string]map[kernelrules.ServicePort]kernelrules.PortState{
		kernelrules.FamilyIPv4: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, LocalEndpoints: 1}},
		kernelrules.FamilyIPv6: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, Drop: true, DropPackets: 7,
			Drops: []kernelrules.DropRule{{Port: 30090, Packets: 7, Counted: true}}}},
	})
	// A scrape before this one saw the IPv6 drop rule with 0 packets (a counter's first value is a baseline).
	before := kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000-30, 0), map[string]map[kernelrules.ServicePort]kernelrules.PortState{
		kernelrules.FamilyIPv4: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, LocalEndpoints: 1}},
		kernelrules.FamilyIPv6: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, Drop: true,
			Drops: []kernelrules.DropRule{{Port: 30090, Counted: true}}}},
	})
	reader := &scrapetest.Reader{Snap: before}
	setup := scrapeSetup{view: view, reader: reader, kept: &keptGatherer{}}
	if _, err := setup.scrape(t).Gather(); err != nil {
		t.Fatal(err)
	}
	reader.Snap = snap
	reg := setup.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="agree"} 0
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_rules_drop{ip_family="IPv4",namespace="kubelings",port="http",service="agree"} 0
localtraffic_rules_drop{ip_family="IPv4",namespace="kubelings",port="http",service="checkout"} 0
localtraffic_rules_drop{ip_family="IPv6",namespace="kubelings",port="http",service="agree"} 0
localtraffic_rules_drop{ip_family="IPv6",namespace="kubelings",port="http",service="checkout"} 1
localtraffic_rules_dropped_packets_total{ip_family="IPv4",namespace="kubelings",port="http",service="agree"} 0
localtraffic_rules_dropped_packets_total{ip_family="IPv4",namespace="kubelings",port="http",service="checkout"} 0
localtraffic_rules_dropped_packets_total{ip_family="IPv6",namespace="kubelings",port="http",service="agree"} 0
localtraffic_rules_dropped_packets_total{ip_family="IPv6",namespace="kubelings",port="http",service="checkout"} 7
localtraffic_rules_mismatch{namespace="kubelings",service="agree"} 0
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 0
`, "localtraffic_blackhole", "localtraffic_rules_drop", "localtraffic_rules_dropped_packets_total", "localtraffic_rules_mismatch")
}

// everyCollectorOK: no collector failed (a source that does not exist on the node is no failure).
const everyCollectorOK = `localtraffic_scrape_collector_success{collector="announcers"} 1
localtraffic_scrape_collector_success{collector="arrivals"} 1
localtraffic_scrape_collector_success{collector="dataplane"} 1
localtraffic_scrape_collector_success{collector="exposure"} 1
localtraffic_scrape_collector_success{collector="informers"} 1
localtraffic_scrape_collector_success{collector="kube_proxy"} 1
localtraffic_scrape_collector_success{collector="node"} 1
localtraffic_scrape_collector_success{collector="rules"} 1
localtraffic_scrape_collector_success{collector="service_arrivals"} 1
localtraffic_scrape_collector_success{collector="service_details"} 1
localtraffic_scrape_collector_success{collector="services"} 1
localtraffic_scrape_collector_success{collector="state_file"} 1
`

// The series that tell a node's dataplane and kube-proxy's state.
var dataplaneSeries = []string{"localtraffic_blackhole", "localtraffic_blackhole_source_info", "localtraffic_dataplane_info",
	"localtraffic_scrape_collector_success", "localtraffic_kube_proxy_up", "localtraffic_kube_proxy_healthy",
	"localtraffic_kube_proxy_programmed", "localtraffic_rules_read_success", "localtraffic_rules_supported", "localtraffic_rules_mismatch"}

// A node with a kube-proxy replacement's link (Cilium's cilium_host), no kube-proxy rule and nothing on
// kube-proxy's health port. It says so, exports no kube-proxy series and no failed collector, and judges from
// the API view.
func TestReplacementDetected(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Err: kernelrules.ErrNoRules}
	reg := scrapeSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), links: scrapetest.Links{"lo", "eth0", "cilium_host", "cilium_net"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_blackhole_source_info{source="api"} 1
localtraffic_dataplane_info{dataplane="replacement"} 1
`+everyCollectorOK, dataplaneSeries...)
}

// A node where kube-proxy has not been seen yet and nothing replaces it (a reboot whose kube-proxy image pull
// fails, a crash before its health server starts): silence is not a replacement. kube-proxy is missing: its
// series say so (its alerts fire), the node is not programmed, and nothing drops there, so nothing pages as a
// blackhole: a NodePort without rules is refused, not blackholed.
func TestKubeProxyNeverSeenIsMissing(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Err: fmt.Errorf("reading: %w", kernelrules.ErrNoRules)}
	reg := scrapeSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), links: scrapetest.Links{"lo", "eth0", "flannel.1"}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_blackhole_source_info{source="rules"} 1
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_healthy 0
localtraffic_kube_proxy_programmed 0
localtraffic_kube_proxy_up{endpoint="healthz"} 0
localtraffic_kube_proxy_up{endpoint="livez"} 0
localtraffic_rules_read_success 1
`+everyCollectorOK, dataplaneSeries...)
}

// Before kube-proxy's first sync its health server answers 200 (nothing queued, nothing synced: healthy) while
// no rule exists yet. The node is not programmed: no blackhole, no mismatch, a clear state.
func TestKubeProxyNotProgrammed(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0), scrapetest.NodePortService(1)}}}
	view.Snap.Services[1].Name = "web"
	reader := &scrapetest.Reader{Err: kernelrules.ErrNoRules}
	// kube-proxy v1.37.2 before its first sync: 200 (its sync loop marked it updated at start, nothing is queued
	// until its informers have listed), lastUpdated rewritten to now as on every 200.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true}}}`)
	}))
	t.Cleanup(srv.Close)
	kp := func(kubeview.NodeState) (string, error) { return srv.Listener.Addr().String(), nil }
	reg := scrapeSetup{view: view, reader: reader, kubeProxy: kp}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_blackhole{namespace="kubelings",service="web"} 0
localtraffic_blackhole_source_info{source="rules"} 1
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_healthy 1
localtraffic_kube_proxy_programmed 0
localtraffic_kube_proxy_up{endpoint="healthz"} 1
localtraffic_kube_proxy_up{endpoint="livez"} 1
localtraffic_rules_read_success 1
`+everyCollectorOK, dataplaneSeries...)
	// Once kube-proxy syncs, its rules decide again and the node is programmed.
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	reader.Err, reader.Snap = nil, kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, Drops: []kernelrules.DropRule{{Port: 30090, Counted: true}}}})
	expectSeries(t, scrapeSetup{view: view, reader: reader, kubeProxy: kp}.scrape(t), `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_blackhole{namespace="kubelings",service="web"} 0
localtraffic_kube_proxy_programmed 1
`, "localtraffic_blackhole", "localtraffic_kube_proxy_programmed")
}

// A node where kube-proxy was seen and then vanished (rules flushed, health port closed) is a kube-proxy
// node whose kube-proxy is down: its alerts must fire, so it is not taken for a replacement, even beside a
// replacement's link (Cilium running beside kube-proxy).
func TestKubeProxyGoneIsNotAReplacement(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, nil, time.Unix(1700000000, 0), nil)}
	setup := scrapeSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), kept: &keptGatherer{}, links: scrapetest.Links{"cilium_host"}}
	expectSeries(t, setup.scrape(t), `
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_programmed 1
`, "localtraffic_dataplane_info", "localtraffic_kube_proxy_programmed")
	reader.Snap, reader.Err = nil, kernelrules.ErrNoRules
	reg := setup.scrape(t)
	expectSeries(t, reg, `
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_programmed 0
localtraffic_kube_proxy_up{endpoint="healthz"} 0
localtraffic_kube_proxy_up{endpoint="livez"} 0
localtraffic_rules_read_success 1
`, "localtraffic_dataplane_info", "localtraffic_kube_proxy_programmed", "localtraffic_kube_proxy_up", "localtraffic_rules_read_success")
}

// After a reboot kube-proxy may be up, its /configz answering, before its first sync writes any rule, and its
// health server not (yet) where the exporter looks. kube-proxy was seen: that node is not a replacement, even
// beside a replacement's link, and stays a kube-proxy node once /configz goes quiet too.
func TestKubeProxySeenByItsConfigzIsNotAReplacement(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Err: kernelrules.ErrNoRules}
	configz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"kubeproxy.config.k8s.io":{"mode":"iptables"}}`)
	}))
	t.Cleanup(configz.Close)
	setup := scrapeSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), kept: &keptGatherer{},
		links: scrapetest.Links{"cilium_host"}, configz: configz.URL + "/configz"}
	expectSeries(t, setup.scrape(t), `localtraffic_dataplane_info{dataplane="kube-proxy"} 1`, "localtraffic_dataplane_info")
	configz.Close() // quiet from now on
	expectSeries(t, setup.scrape(t), `localtraffic_dataplane_info{dataplane="kube-proxy"} 1`, "localtraffic_dataplane_info")
	// Control: never seen (a fresh gatherer, /configz quiet), the same node is a replacement.
	setup.kept = nil
	expectSeries(t, setup.scrape(t), `localtraffic_dataplane_info{dataplane="replacement"} 1`, "localtraffic_dataplane_info")
}

// --dataplane=replacement says so without detection; IPVS is reported as ipvs.
func TestDataplaneFlagAndIPVS(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reg := scrapeSetup{view: view, dataplane: scrape.DataplaneReplacement}.scrape(t)
	expectSeries(t, reg, `localtraffic_dataplane_info{dataplane="replacement"} 1`, "localtraffic_dataplane_info", "localtraffic_kube_proxy_up")
	ipvs := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPVS, "", nil, time.Unix(1700000000, 0), nil),
		Err: fmt.Errorf("reading: %w", kernelrules.ErrUnsupported)}
	reg = scrapeSetup{view: view, reader: ipvs}.scrape(t)
	expectSeries(t, reg, `
localtraffic_blackhole_source_info{source="api"} 1
localtraffic_dataplane_info{dataplane="ipvs"} 1
localtraffic_rules_supported 0
`, "localtraffic_blackhole_source_info", "localtraffic_dataplane_info", "localtraffic_rules_supported")
}

// externalIPs: a node is in rotation for one only with evidence. Scrape 1: the drop rule has counted nothing
// and the address is not here: no page. Scrape 2: its counter grew: traffic arrives and is dropped: page.
// Scrape 3, past the window without growth: no page. Then the address is assigned to the node: page.
func TestExternalIPEvidence(t *testing.T) {
	svc := scrapetest.NodePortService(0)
	svc.Type = corev1.ServiceTypeClusterIP
	svc.Families[0].Ports[0].NodePort = 0
	svc.ExternalIPs = []string{"198.51.100.7"}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{svc}}}
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	at := time.Unix(1700000000, 0)
	snapAt := func(packets uint64, t time.Time) *kernelrules.Snapshot {
		return kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, t,
			map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, DropPackets: packets,
				Drops: []kernelrules.DropRule{{Address: "198.51.100.7", Port: 80, Packets: packets, Counted: true}}}})
	}
	reader := &scrapetest.Reader{Snap: snapAt(0, at)}
	setup := scrapeSetup{view: view, reader: reader, kept: &keptGatherer{}, window: time.Minute, addrs: scrapetest.Addrs{"127.0.0.1"}}
	steps := []struct {
		packets uint64
		after   time.Duration
		addrs   scrapetest.Addrs
		want    string
	}{
		{0, 0, nil, "0"},
		{5, 30 * time.Second, nil, "1"},
		{5, 60 * time.Second, nil, "1"},  // grew 30 s ago: within the window
		{5, 120 * time.Second, nil, "0"}, // 90 s without growth
		{2, 150 * time.Second, nil, "1"}, // kube-proxy rewrote the rule and it counted 2 new packets
		{2, 300 * time.Second, scrapetest.Addrs{"127.0.0.1", "198.51.100.7"}, "1"},
	}
	for i, s := range steps {
		reader.Snap = snapAt(s.packets, at.Add(s.after))
		setup.addrs = append(scrapetest.Addrs{"127.0.0.1"}, s.addrs...)
		reg := setup.scrape(t)
		got := series(t, reg, "localtraffic_blackhole")
		if want := `localtraffic_blackhole{namespace="kubelings",service="checkout"} ` + s.want; got != want {
			t.Errorf("step %d: %s, want %s", i, got, want)
		}
	}
}

// The gatherer takes the probe address of each family from kube-proxy's --nodeport-addresses when known.
func TestNodePortAddressesChooseTheProbeAddress(t *testing.T) {
	hcnp := dualStackHealthCheck(t, hcAnswer{200, 1}, hcAnswer{200, 0})
	snap := dualStackLB(hcnp, 1, 1)
	snap.Node.InternalIPs = []string{"192.0.2.1", "2001:db8::1"} // not local: only the CIDRs find ::1 and 127.0.0.1
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: snap}, Addrs: scrapetest.Addrs{"127.0.0.1", "::1", "192.0.2.1"},
		KubeProxyAddress: scrapetest.NoAddress, NodePortAddresses: []string{"127.0.0.0/8", "::1/128"}, Logger: logger})
	st := g.Gather(context.Background())
	if st.APIErr != nil {
		t.Fatal(st.APIErr)
	}
	got := map[corev1.IPFamily]string{}
	for _, c := range st.Services[0].Checks {
		got[c.Family] = c.Address + " " + string(c.Result)
	}
	if got[v4] != "127.0.0.1 ok" || got[v6] != "::1 ok" {
		t.Errorf("probes: %v", got)
	}
	if errors.Is(st.KubeProxyConfigErr, context.Canceled) {
		t.Error(st.KubeProxyConfigErr)
	}
}

// kube-proxy's /configz is read once per configzTTL, and a metrics port that hangs costs the health check
// probes at most configzTimeout: they still answer within the scrape.
func TestConfigzCachedAndBounded(t *testing.T) {
	var reads atomic.Int32
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		fmt.Fprint(w, `{"kubeproxy.config.k8s.io":{"nodePortAddresses":["127.0.0.0/8"]}}`)
	})}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode()}}, KubeProxyAddress: scrapetest.NoAddress,
		ConfigzURL: "http://" + l.Addr().String() + "/configz", Logger: logger})
	for range 3 {
		if st := g.Gather(context.Background()); !slices.Equal(st.KubeProxyConfig.NodePortAddresses, []string{"127.0.0.0/8"}) {
			t.Fatalf("nodePortAddresses %v (%v)", st.KubeProxyConfig.NodePortAddresses, st.KubeProxyConfigErr)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("/configz read %d times in 3 scrapes, want 1", n)
	}

	hang, err := net.Listen("tcp4", "127.0.0.1:0")
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
			t.Cleanup(func() { c.Close() })
		}
	}()
	hcnp := dualStackHealthCheck(t, hcAnswer{200, 1}, hcAnswer{200, 1})
	g = scrape.NewGatherer(scrape.GathererConfig{View: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 1)}, Addrs: scrapetest.Addrs{"127.0.0.1", "::1"},
		KubeProxyAddress: scrapetest.NoAddress, ConfigzURL: "http://" + hang.Addr().String() + "/configz", ProbeTimeout: 5 * time.Second, Logger: logger})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st := g.Gather(ctx)
	if st.KubeProxyConfigErr == nil {
		t.Error("a hanging /configz read succeeded")
	}
	// Had the /configz read taken the scrape's 3 s, the probes would have timed out.
	for _, c := range st.Services[0].Checks {
		if c.Result != "ok" {
			t.Errorf("%s: %s after a hanging /configz (%v)", c.Family, c.Result, c.Err)
		}
	}
}
