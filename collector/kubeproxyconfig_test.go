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

// configzServer serves kube-proxy's /configz with the given configuration object (JSON).
func configzServer(t *testing.T, object string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":%s}`, object)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/configz"
}

func gatherWithConfigz(t *testing.T, view scrape.APIView, reader scrape.DataplaneReader, addrs scrapetest.Addrs, configz string) *prometheus.Registry {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, RuleReader: reader, Addrs: addrs, ConfigzURL: configz,
		ProbeTimeout: 2 * time.Second, Logger: logger})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(logger, g, everyCollector()...).Bind(context.Background()))
	return reg
}

// kube-proxy's health server where its /configz says it listens: k3s and RKE2 bind it to 127.0.0.1, where the
// node's InternalIP is refused. Without /configz the exporter assumes kube-proxy's default (every address,
// port 10256) and probes the node's own address.
func TestKubeProxyHealthzBindAddressFromConfigz(t *testing.T) {
	kp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true}`)
	}))
	t.Cleanup(kp.Close)
	_, port, _ := net.SplitHostPort(kp.Listener.Addr().String())
	// The node's InternalIP is local, but nothing of kube-proxy's listens there.
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.2"}}}}
	addrs := scrapetest.Addrs{"127.0.0.1", "127.0.0.2"}

	reg := gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":"127.0.0.1:`+port+`"}`))
	expectSeries(t, reg, `
localtraffic_kube_proxy_up{endpoint="healthz"} 1
localtraffic_kube_proxy_up{endpoint="livez"} 1
`, "localtraffic_kube_proxy_up")

	// Every address: the node's own, where this test's kube-proxy is not: refused.
	reg = gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":"0.0.0.0:`+port+`"}`))
	expectContains(t, reg, "localtraffic_kube_proxy_result", `localtraffic_kube_proxy_result{endpoint="livez",result="refused"} 1`)

	// No health server at all: nothing to probe, and no failed collector.
	reg = gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":""}`))
	expectContains(t, reg, "localtraffic_scrape_collector_success", `localtraffic_scrape_collector_success{collector="kube_proxy"} 1`)
	if got := series(t, reg, "localtraffic_kube_proxy_up"); got != "" {
		t.Errorf("kube_proxy_up without a health server: %s", got)
	}
}

// With the AllowServiceExternalIPs feature gate off kube-proxy writes no rule for an externalIP: a Local
// ClusterIP Service with one and no local endpoint is then neither a drop nor a mismatch. With the gate on,
// the same rules (no drop for the address) disagree with the API.
func TestAllowServiceExternalIPsOff(t *testing.T) {
	svc := scrapetest.NodePortService(0)
	svc.Type, svc.Ports[0].NodePort, svc.Families[0].Ports[0].NodePort = corev1.ServiceTypeClusterIP, 0, 0
	svc.ExternalIPs = []string{"198.51.100.7"}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{svc}}}
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	// What kube-proxy programs with the gate off: the Service's chains, no externalIP drop.
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true}})}
	addrs := scrapetest.Addrs{"127.0.0.1", "198.51.100.7"} // the address is even held here: still nothing drops it

	reg := gatherWithConfigz(t, view, reader, addrs, configzServer(t, `{"featureGates":{"AllowServiceExternalIPs":false}}`))
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_in_rotation{namespace="kubelings",service="checkout"} 0
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 0
`, "localtraffic_blackhole", "localtraffic_in_rotation", "localtraffic_rules_mismatch")

	reg = gatherWithConfigz(t, view, reader, addrs, configzServer(t, `{}`))
	expectSeries(t, reg, `
localtraffic_blackhole{namespace="kubelings",service="checkout"} 0
localtraffic_in_rotation{namespace="kubelings",service="checkout"} 1
localtraffic_rules_mismatch{namespace="kubelings",service="checkout"} 1
`, "localtraffic_blackhole", "localtraffic_in_rotation", "localtraffic_rules_mismatch")
}

// kube-proxy restarted with its health server moved (to loopback): the cached /configz still says every address,
// the probe there is refused, so the next scrape reads /configz again instead of waiting out its 5 minutes.
func TestConfigzReadAgainWhenKubeProxyMoves(t *testing.T) {
	kp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true}`)
	}))
	t.Cleanup(kp.Close)
	_, port, _ := net.SplitHostPort(kp.Listener.Addr().String())
	var bind atomic.Value
	bind.Store("0.0.0.0:" + port)
	var reads atomic.Int32
	configz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"healthzBindAddress":%q}}`, bind.Load())
	}))
	t.Cleanup(configz.Close)
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.2"}}}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := scrape.NewGatherer(scrape.GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1", "127.0.0.2"}, ConfigzURL: configz.URL + "/configz",
		ProbeTimeout: 2 * time.Second, Logger: logger})
	up := func() bool { return g.Gather(context.Background()).KubeProxy.Livez.Up() }
	if up() {
		t.Fatal("kube-proxy found on the node's address, where it does not listen")
	}
	bind.Store("127.0.0.1:" + port) // kube-proxy restarted with --healthz-bind-address=127.0.0.1
	if !up() {
		t.Errorf("kube-proxy not found where its new configuration says (/configz read %d times)", reads.Load())
	}
	if up(); reads.Load() != 2 {
		t.Errorf("/configz read %d times in 3 scrapes, want 2: once, then again after the failed probe only", reads.Load())
	}
}

// Where the exporter's view of kube-proxy's configuration comes from is exported, one-hot (the scrape package's
// tests decide it: TestKubeProxyConfigState there).
func TestKubeProxyConfigStateOneHot(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, state := range scrape.ConfigStates {
		st := &scrape.State{KubeProxyConfigState: state, KubeProxy: scrape.KubeProxyState{Err: errors.New("no address to probe in this test")}}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewExporter(logger, fixedState{st}, NewKubeProxy()).Bind(context.Background()))
		var want strings.Builder
		for _, s := range scrape.ConfigStates {
			fmt.Fprintf(&want, "localtraffic_kube_proxy_config_state{state=%q} %d\n", s, map[bool]int{true: 1}[s == state])
		}
		expectSeries(t, reg, want.String(), "localtraffic_kube_proxy_config_state")
	}
}
