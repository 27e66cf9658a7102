package collector

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The rendering of States as the gatherer decides them (scrape's tests hold the decisions: the State each test
// here starts from is one of theirs): every collector renders the fixed State, nothing is read.

// fixedState is a gatherer that hands every scrape the same State.
type fixedState struct{ st *scrape.State }

func (f fixedState) Gather(context.Context) *scrape.State { return f.st }

// render registers every collector over the fixed State st.
func render(st *scrape.State) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(slog.New(slog.DiscardHandler), fixedState{st}, everyCollector()...).Bind(context.Background()))
	return reg
}

// checkoutResult is the result of svc with its verdict and probes.
func checkoutResult(svc kubeview.ServiceState, v verdict.Verdict, checks ...scrape.FamilyCheck) *scrape.ServiceResult {
	return &scrape.ServiceResult{Service: svc, Verdict: v, Checks: checks}
}

func familyCheck(f corev1.IPFamily, addr string, r nodeprobe.Result, status, local int) scrape.FamilyCheck {
	return scrape.FamilyCheck{Family: f, Address: addr, HealthCheck: nodeprobe.HealthCheck{Result: r, StatusCode: status, LocalEndpoints: local}}
}

// The per-Service health check series summarise the families (scrape's TestHealthCheckPerFamily,
// TestHealthCheckRefusedDrains, TestHealthCheckNoAddress decide them): up only when every family answered 200,
// the result of the first family that did not (one-hot), the smallest count a family reported.
func TestHealthCheckSeries(t *testing.T) {
	lb := scrapetest.LBService(scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true))
	st := &scrape.State{Node: scrapetest.DualStackNode(), Source: verdict.SourceAPI, Dataplane: scrape.DataplaneKubeProxy,
		KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK)}
	st.Services = []*scrape.ServiceResult{checkoutResult(lb, verdict.Verdict{InRotation: true, Drops: true, Source: verdict.SourceAPI},
		familyCheck(v4, "127.0.0.1", nodeprobe.ResultOK, 200, 1), familyCheck(v6, "::1", nodeprobe.ResultUnavailable, 503, 0))}
	st.Services[0].MismatchKnown = true
	expectSeries(t, render(st), `
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

	for _, c := range []struct {
		name   string
		checks []scrape.FamilyCheck
		want   nodeprobe.Result
	}{
		{"refused in both families", []scrape.FamilyCheck{familyCheck(v4, "127.0.0.1", nodeprobe.ResultRefused, 0, -1),
			familyCheck(v6, "::1", nodeprobe.ResultRefused, 0, -1)}, nodeprobe.ResultRefused},
		{"no IPv6 address", []scrape.FamilyCheck{familyCheck(v4, "127.0.0.1", nodeprobe.ResultOK, 200, 1),
			familyCheck(v6, "", nodeprobe.ResultNoAddress, 0, -1)}, nodeprobe.ResultNoAddress},
	} {
		st.Services = []*scrape.ServiceResult{checkoutResult(lb, verdict.Verdict{Source: verdict.SourceAPI}, c.checks...)}
		got := series(t, render(st), "localtraffic_health_check_result")
		if want := fmt.Sprintf(`localtraffic_health_check_result{namespace="kubelings",result=%q,service="checkout"} 1`, c.want); !strings.Contains(got, want) ||
			strings.Count(got, "} 1") != 1 {
			t.Errorf("%s: want %s alone at 1 in\n%s", c.name, want, got)
		}
	}
}

// Each family's port has its own rule series, labelled ip_family (scrape's TestRulesPerFamily decides them).
func TestRulesSeries(t *testing.T) {
	agree := scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 1, true))
	agree.Name = "agree"
	checkout := scrapetest.NodePortService(0, scrapetest.Family(v4, 1, true), scrapetest.Family(v6, 0, true))
	ports := func(svc kubeview.ServiceState, v6drop bool, v6packets uint64) []scrape.PortResult {
		return []scrape.PortResult{
			{Family: v4, Port: svc.Families[0].Ports[0], Label: "http", Rules: kernelrules.PortState{Programmed: true, LocalEndpoints: 1}},
			{Family: v6, Port: svc.Families[1].Ports[0], Label: "http", Rules: kernelrules.PortState{Programmed: true, Drop: v6drop,
				LocalEndpoints: map[bool]int{false: 1}[v6drop]}, DroppedPackets: v6packets},
		}
	}
	rules := kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000, 0), nil)
	st := &scrape.State{Node: scrapetest.DualStackNode(), Source: verdict.SourceRules, Dataplane: scrape.DataplaneKubeProxy,
		KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK), Rules: rules, RulesConfigured: true, Services: []*scrape.ServiceResult{
			{Service: agree, Ports: ports(agree, false, 0), MismatchKnown: true, Verdict: verdict.Verdict{Source: verdict.SourceRules}},
			{Service: checkout, Ports: ports(checkout, true, 7), MismatchKnown: true,
				Verdict: verdict.Verdict{InRotation: true, Drops: true, Blackhole: true, Source: verdict.SourceRules, Reason: verdict.ReasonNotObserved}},
		}}
	expectSeries(t, render(st), `
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
localtraffic_scrape_collector_success{collector="service_exposure"} 1
localtraffic_scrape_collector_success{collector="services"} 1
localtraffic_scrape_collector_success{collector="state_file"} 1
`

// The series that tell a node's dataplane and kube-proxy's state.
var dataplaneSeries = []string{"localtraffic_blackhole", "localtraffic_blackhole_source_info", "localtraffic_dataplane_info",
	"localtraffic_scrape_collector_success", "localtraffic_kube_proxy_up", "localtraffic_kube_proxy_healthy",
	"localtraffic_kube_proxy_programmed", "localtraffic_rules_read_success", "localtraffic_rules_supported", "localtraffic_rules_mismatch"}

// kubeProxyAnswer is both of kube-proxy's endpoints answering r (200 for ok).
func kubeProxyAnswer(r nodeprobe.Result) scrape.KubeProxyState {
	status := map[nodeprobe.Result]int{nodeprobe.ResultOK: 200}[r]
	return scrape.KubeProxyState{Healthz: nodeprobe.KubeProxyHealth{Endpoint: nodeprobe.PathHealthz, Result: r, StatusCode: status},
		Livez: nodeprobe.KubeProxyHealth{Endpoint: nodeprobe.PathLivez, Result: r, StatusCode: status}}
}

// The dataplane and kube-proxy series of each dataplane scrape's detection tells apart (TestReplacementDetected,
// TestKubeProxyNeverSeenIsMissing, TestKubeProxyNotProgrammed, TestDataplaneFlagAndIPVS there): a replacement
// has no kube-proxy series and no failed collector; a kube-proxy not programmed says so, and no collector fails.
func TestDataplaneSeries(t *testing.T) {
	node := scrapetest.DualStackNode()
	programmed := kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0), nil)
	ipvs := kernelrules.NewSnapshot(kernelrules.ModeIPVS, "", nil, time.Unix(1700000000, 0), nil)
	for _, c := range []struct {
		name  string
		st    scrape.State
		v     verdict.Verdict
		names []string // nil: dataplaneSeries
		want  string
	}{
		{"a replacement", scrape.State{Dataplane: scrape.DataplaneReplacement, Replacement: "cilium (link cilium_host)", Source: verdict.SourceAPI,
			RulesConfigured: true, RulesErr: kernelrules.ErrNoRules, KubeProxy: kubeProxyAnswer(nodeprobe.ResultRefused)},
			verdict.Verdict{InRotation: true, Drops: true, Blackhole: true, Source: verdict.SourceAPI, Reason: verdict.ReasonNotObserved}, nil, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_blackhole_source_info{source="api"} 1
localtraffic_dataplane_info{dataplane="replacement"} 1
` + everyCollectorOK},
		{"kube-proxy never seen", scrape.State{Dataplane: scrape.DataplaneKubeProxy, NotProgrammed: true, Source: verdict.SourceRules,
			RulesConfigured: true, RulesErr: fmt.Errorf("reading: %w", kernelrules.ErrNoRules), KubeProxy: kubeProxyAnswer(nodeprobe.ResultRefused)},
			verdict.Verdict{Source: verdict.SourceRules}, nil, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_blackhole_source_info{source="rules"} 1
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_healthy 0
localtraffic_kube_proxy_programmed 0
localtraffic_kube_proxy_up{endpoint="healthz"} 0
localtraffic_kube_proxy_up{endpoint="livez"} 0
localtraffic_rules_read_success 1
` + everyCollectorOK},
		{"kube-proxy before its first sync", scrape.State{Dataplane: scrape.DataplaneKubeProxy, NotProgrammed: true, Source: verdict.SourceRules,
			RulesConfigured: true, RulesErr: kernelrules.ErrNoRules, KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK)},
			verdict.Verdict{Source: verdict.SourceRules}, nil, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_blackhole_source_info{source="rules"} 1
localtraffic_dataplane_info{dataplane="kube-proxy"} 1
localtraffic_kube_proxy_healthy 1
localtraffic_kube_proxy_programmed 0
localtraffic_kube_proxy_up{endpoint="healthz"} 1
localtraffic_kube_proxy_up{endpoint="livez"} 1
localtraffic_rules_read_success 1
` + everyCollectorOK},
		{"kube-proxy programmed", scrape.State{Dataplane: scrape.DataplaneKubeProxy, Source: verdict.SourceRules, Rules: programmed,
			RulesConfigured: true, KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK)},
			verdict.Verdict{InRotation: true, Drops: true, Blackhole: true, Source: verdict.SourceRules, Reason: verdict.ReasonNotObserved},
			[]string{"localtraffic_blackhole", "localtraffic_kube_proxy_programmed"}, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 1
localtraffic_kube_proxy_programmed 1
`},
		{"IPVS", scrape.State{Dataplane: scrape.DataplaneIPVS, Source: verdict.SourceAPI, Rules: ipvs, RulesConfigured: true,
			RulesErr: fmt.Errorf("reading: %w", kernelrules.ErrUnsupported), KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK)},
			verdict.Verdict{Source: verdict.SourceAPI}, []string{"localtraffic_blackhole_source_info", "localtraffic_dataplane_info", "localtraffic_rules_supported"}, `
localtraffic_blackhole_source_info{source="api"} 1
localtraffic_dataplane_info{dataplane="ipvs"} 1
localtraffic_rules_supported 0
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			st.Node = node
			st.Services = []*scrape.ServiceResult{checkoutResult(scrapetest.NodePortService(0), c.v)}
			names := c.names
			if names == nil {
				names = dataplaneSeries
			}
			expectSeries(t, render(&st), c.want, names...)
		})
	}
}

// kube-proxy's probes are rendered per endpoint, one-hot over the result; a kube-proxy without a health server
// (scrape's TestKubeProxyHealthzBindAddressFromConfigz) has no series and fails no collector.
func TestKubeProxySeries(t *testing.T) {
	st := &scrape.State{Node: scrapetest.DualStackNode(), Dataplane: scrape.DataplaneKubeProxy, KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK)}
	st.KubeProxy.Livez.Result = nodeprobe.ResultRefused
	reg := render(st)
	expectSeries(t, reg, `
localtraffic_kube_proxy_up{endpoint="healthz"} 1
localtraffic_kube_proxy_up{endpoint="livez"} 0
`, "localtraffic_kube_proxy_up")
	expectContains(t, reg, "localtraffic_kube_proxy_result", `localtraffic_kube_proxy_result{endpoint="livez",result="refused"} 1`)
	if got := series(t, reg, "localtraffic_kube_proxy_result"); strings.Count(got, "} 1") != 2 {
		t.Errorf("not one-hot per endpoint:\n%s", got)
	}

	st = &scrape.State{Node: scrapetest.DualStackNode(), Dataplane: scrape.DataplaneKubeProxy,
		KubeProxy: scrape.KubeProxyState{Err: fmt.Errorf("probing: %w", nodeprobe.ErrHealthServerDisabled)}}
	reg = render(st)
	expectContains(t, reg, "localtraffic_scrape_collector_success", `localtraffic_scrape_collector_success{collector="kube_proxy"} 1`)
	if got := series(t, reg, "localtraffic_kube_proxy_up"); got != "" {
		t.Errorf("kube_proxy_up without a health server: %s", got)
	}
}

// The meter's series (scrape's TestArrivalsPutANodeInRotation, TestBlindMeterSaysSo and
// TestHealthCheckProbesWatchedOnLoadBalancerIPs decide the States): its state one-hot, what it missed per
// family and cause, the node's totals per kind and family, and the Services whose health check node port a
// load balancer is known to probe. A meter that cannot see exports no arrival count (never "none arrived").
func TestArrivalSeries(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	snap := func(s arrivals.Status) *arrivals.Snapshot {
		return &arrivals.Snapshot{Status: s, Since: t0.Add(-time.Hour), Taken: t0,
			Families: []arrivals.FamilyStats{{Family: "IPv4", Dropped: 3}, {Family: "IPv6"}}}
	}
	lost := verdict.Verdict{InRotation: true, Drops: true, Blackhole: true, Source: verdict.SourceAPI, Reason: verdict.ReasonTrafficLost}
	st := &scrape.State{Node: kubeview.NodeState{Name: "node-1", Found: true}, Source: verdict.SourceAPI,
		KubeProxy: kubeProxyAnswer(nodeprobe.ResultOK), Services: []*scrape.ServiceResult{checkoutResult(scrapetest.NodePortService(0), lost)},
		Arrivals: scrape.ArrivalsState{Enabled: true, Snapshot: snap(arrivals.StatusOK),
			Totals: map[scrape.ArrivalKey]uint64{{Kind: verdict.NodePort, Family: "IPv4"}: 680}}}
	expectSeries(t, render(st), `
localtraffic_arrivals_meter_state{state="closed"} 0
localtraffic_arrivals_meter_state{state="disabled"} 0
localtraffic_arrivals_meter_state{state="failed"} 0
localtraffic_arrivals_meter_state{state="ok"} 1
localtraffic_arrivals_meter_state{state="permission_denied"} 0
localtraffic_arrivals_missed_total{cause="rate_limit",ip_family="IPv4"} 0
localtraffic_arrivals_missed_total{cause="rate_limit",ip_family="IPv6"} 0
localtraffic_arrivals_missed_total{cause="ring_full",ip_family="IPv4"} 3
localtraffic_arrivals_missed_total{cause="ring_full",ip_family="IPv6"} 0
localtraffic_arrivals_missed_total{cause="sampled",ip_family="IPv4"} 0
localtraffic_arrivals_missed_total{cause="sampled",ip_family="IPv6"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="external_ip"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="health_check"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="load_balancer_ip"} 0
localtraffic_arrivals_total{ip_family="IPv4",kind="node_port"} 680
localtraffic_arrivals_total{ip_family="IPv6",kind="external_ip"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="health_check"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="load_balancer_ip"} 0
localtraffic_arrivals_total{ip_family="IPv6",kind="node_port"} 0
localtraffic_blackhole_reason{namespace="kubelings",reason="traffic_lost",service="checkout"} 1
`, "localtraffic_arrivals_meter_state", "localtraffic_arrivals_missed_total", "localtraffic_arrivals_total", "localtraffic_blackhole_reason")

	blind := verdict.Verdict{InRotation: true, Drops: true, Blackhole: true, Source: verdict.SourceAPI, Reason: verdict.ReasonNotObserved}
	st.Services = []*scrape.ServiceResult{checkoutResult(scrapetest.NodePortService(0), blind)}
	st.Arrivals = scrape.ArrivalsState{Enabled: true, Snapshot: snap(arrivals.StatusPermissionDenied)}
	expectSeries(t, render(st), `
localtraffic_arrivals_meter_state{state="closed"} 0
localtraffic_arrivals_meter_state{state="disabled"} 0
localtraffic_arrivals_meter_state{state="failed"} 0
localtraffic_arrivals_meter_state{state="ok"} 0
localtraffic_arrivals_meter_state{state="permission_denied"} 1
localtraffic_blackhole_reason{namespace="kubelings",reason="not_observed",service="checkout"} 1
`, "localtraffic_arrivals_meter_state", "localtraffic_arrivals_total", "localtraffic_blackhole_reason")

	lb := scrapetest.LBService()
	lb.LoadBalancerIPs = []string{"192.0.2.50"}
	np := scrapetest.NodePortService(0)
	np.Name = "web"
	st.Services = []*scrape.ServiceResult{checkoutResult(lb, verdict.Verdict{}), checkoutResult(np, verdict.Verdict{})}
	st.Arrivals = scrape.ArrivalsState{Enabled: true, Snapshot: snap(arrivals.StatusOK)}
	expectSeries(t, render(st), `localtraffic_health_check_expected_services 1`, "localtraffic_health_check_expected_services")
}
