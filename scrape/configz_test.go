package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
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

// gatherWithConfigz is one scrape's State with kube-proxy's /configz at configz.
func gatherWithConfigz(t *testing.T, view APIView, reader DataplaneReader, addrs scrapetest.Addrs, configz string) *State {
	t.Helper()
	g := NewGatherer(GathererConfig{View: view, RuleReader: reader, Addrs: addrs, ConfigzURL: configz,
		ProbeTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return g.Gather(context.Background())
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

	st := gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":"127.0.0.1:`+port+`"}`))
	if st.KubeProxy.Err != nil || !st.KubeProxy.Healthz.Up() || !st.KubeProxy.Livez.Up() {
		t.Errorf("where /configz says: %v, healthz %s, livez %s; want both ok", st.KubeProxy.Err, st.KubeProxy.Healthz.Result, st.KubeProxy.Livez.Result)
	}

	// Every address: the node's own, where this test's kube-proxy is not: refused.
	st = gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":"0.0.0.0:`+port+`"}`))
	if st.KubeProxy.Livez.Result != nodeprobe.ResultRefused {
		t.Errorf("every address: livez %s, want refused", st.KubeProxy.Livez.Result)
	}

	// No health server at all: nothing to probe, which the collectors take for no data, not a failure.
	st = gatherWithConfigz(t, view, nil, addrs, configzServer(t, `{"healthzBindAddress":""}`))
	if !errors.Is(st.KubeProxy.Err, nodeprobe.ErrHealthServerDisabled) || st.KubeProxy.Healthz.Result != "" || st.KubeProxy.Livez.Result != "" {
		t.Errorf("no health server: %v, healthz %q, livez %q; want it disabled and nothing probed", st.KubeProxy.Err,
			st.KubeProxy.Healthz.Result, st.KubeProxy.Livez.Result)
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

	for _, c := range []struct {
		configz              string
		inRotation, mismatch bool
	}{
		{`{"featureGates":{"AllowServiceExternalIPs":false}}`, false, false},
		{`{}`, true, true},
	} {
		r := resultOf(t, gatherWithConfigz(t, view, reader, addrs, configzServer(t, c.configz)), "checkout")
		if r.Verdict.Blackhole || r.Verdict.InRotation != c.inRotation || r.Mismatch != c.mismatch {
			t.Errorf("/configz %s: blackhole %v, in rotation %v, mismatch %v; want false, %v, %v", c.configz,
				r.Verdict.Blackhole, r.Verdict.InRotation, r.Mismatch, c.inRotation, c.mismatch)
		}
	}
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
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1", "127.0.0.2"}, ConfigzURL: configz.URL + "/configz",
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
