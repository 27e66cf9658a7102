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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// gatherSetup is a gatherer's inputs for the tests of what it decides.
type gatherSetup struct {
	view      APIView
	reader    DataplaneReader
	addrs     scrapetest.Addrs
	kubeProxy func(kubeview.NodeState) (string, error)
	dataplane DataplaneKind
	links     scrapetest.Links
	// kept: every gather of the setup goes through one gatherer, so what a gatherer keeps across scrapes (drop
	// counters' baselines, kube-proxy seen, the /configz cache) carries over, as in the exporter; the setup's
	// addresses may change between gathers. nil: a fresh gatherer per gather.
	kept    *keptGatherer
	window  time.Duration
	configz string // kube-proxy's /configz URL; "": not read
}

// keptGatherer is a gatherSetup's one gatherer and the addresses it reads (the setup's, as of each gather).
type keptGatherer struct {
	g     *Gatherer
	addrs scrapetest.Addrs
}

func (k *keptGatherer) LocalAddrs() ([]net.IP, error) { return k.addrs.LocalAddrs() }

// gather is one scrape's State.
func (s gatherSetup) gather(t *testing.T) *State {
	t.Helper()
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
		k.g = NewGatherer(GathererConfig{View: s.view, RuleReader: s.reader, Addrs: k, KubeProxyAddress: s.kubeProxy,
			ProbeTimeout: 2 * time.Second, Dataplane: s.dataplane, Links: s.links, ExternalIPWindow: s.window, ConfigzURL: s.configz,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	return k.g.Gather(context.Background())
}

// resultOf is the State's result of kubelings/name.
func resultOf(t *testing.T, st *State, name string) *ServiceResult {
	t.Helper()
	if st.APIErr != nil {
		t.Fatal(st.APIErr)
	}
	for _, r := range st.Services {
		if r.Service.Namespace == "kubelings" && r.Service.Name == name {
			return r
		}
	}
	t.Fatalf("no result for kubelings/%s", name)
	return nil
}

// checksOf is each family's probe as "address result localEndpoints".
func checksOf(r *ServiceResult) map[corev1.IPFamily]string {
	out := map[corev1.IPFamily]string{}
	for _, c := range r.Checks {
		out[c.Family] = fmt.Sprintf("%s %s %d", c.Address, c.Result, c.LocalEndpoints)
	}
	return out
}

// familyRotation is each family's verdict as "in rotation, dropped".
func familyRotation(v verdict.Verdict) map[corev1.IPFamily]string {
	out := map[corev1.IPFamily]string{}
	for _, f := range v.Families {
		out[f.Family] = fmt.Sprintf("in=%v drops=%v blackhole=%v", f.InRotation, f.Drops, f.Blackhole)
	}
	return out
}

func dualStackLB(hcnp int32, local4, local6 int) kubeview.Snapshot {
	svc := scrapetest.LBService(scrapetest.Family(v4, local4, true), scrapetest.Family(v6, local6, true))
	svc.HealthCheckNodePort = hcnp
	return kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{svc}}
}

// Each family's health check is probed on that family's address: IPv4 answers 200 (a local endpoint),
// IPv6 503 (none). The load balancer drains the node for IPv6 only, so its IPv6 drop is no blackhole.
// (collector's TestHealthCheckSeries renders such a result: one series per Service over both families.)
func TestHealthCheckPerFamily(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 503, Local: 0})
	r := resultOf(t, gatherSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.gather(t), "checkout")
	if got := checksOf(r); got[v4] != "127.0.0.1 ok 1" || got[v6] != "::1 unavailable 0" {
		t.Errorf("probes %v", got)
	}
	if got := familyRotation(r.Verdict); got[v4] != "in=true drops=false blackhole=false" || got[v6] != "in=false drops=true blackhole=false" {
		t.Errorf("families %v", got)
	}
	if !r.Verdict.InRotation || r.Verdict.Blackhole || r.Mismatch {
		t.Errorf("in rotation %v, blackhole %v, mismatch %v; want true, false, false", r.Verdict.InRotation, r.Verdict.Blackhole, r.Mismatch)
	}
}

// The IPv6 health check answers 200 while the API has no IPv6 endpoint here (kube-proxy's IPv6 proxier
// disagrees): the load balancer keeps sending IPv6 traffic, and the API view says it drops: a blackhole, and
// without rules the health check's own count reports the mismatch.
func TestHealthCheckFamilyDisagrees(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 200, Local: 1})
	r := resultOf(t, gatherSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.gather(t), "checkout")
	if got := checksOf(r); got[v4] != "127.0.0.1 ok 1" || got[v6] != "::1 ok 1" {
		t.Errorf("probes %v", got)
	}
	if !r.Verdict.Blackhole || !r.Mismatch || !r.MismatchKnown {
		t.Errorf("blackhole %v, mismatch %v (known %v); want all true", r.Verdict.Blackhole, r.Mismatch, r.MismatchKnown)
	}
}

// kube-proxy stopped: the health check port refuses in both families while the (stale) API view says the
// node drops. A load balancer that checks the port has drained the node: no blackhole page.
func TestHealthCheckRefusedDrains(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{}, scrapetest.HealthAnswer{})
	r := resultOf(t, gatherSetup{view: &scrapetest.View{Snap: dualStackLB(hcnp, 0, 0)}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.gather(t), "checkout")
	for _, c := range r.Checks {
		if c.Result != nodeprobe.ResultRefused {
			t.Errorf("%s: %s, want refused", c.Family, c.Result)
		}
	}
	if len(r.Checks) != 2 {
		t.Errorf("%d probes, want one per family", len(r.Checks))
	}
	if r.Verdict.Blackhole || r.Verdict.InRotation {
		t.Errorf("blackhole %v, in rotation %v; want neither", r.Verdict.Blackhole, r.Verdict.InRotation)
	}
}

// A node without an IPv6 address kube-proxy serves: the IPv6 family is not probed, the result says
// no_address, and that family is out of load balancer rotation.
func TestHealthCheckNoAddress(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 200, Local: 1})
	snap := dualStackLB(hcnp, 1, 0)
	snap.Node.InternalIPs = []string{"127.0.0.1"}
	r := resultOf(t, gatherSetup{view: &scrapetest.View{Snap: snap}, addrs: scrapetest.Addrs{"127.0.0.1", "::1"}}.gather(t), "checkout")
	if got := checksOf(r); got[v4] != "127.0.0.1 ok 1" || !strings.HasPrefix(got[v6], " no_address ") {
		t.Errorf("probes %v", got)
	}
	if got := familyRotation(r.Verdict); got[v6] != "in=false drops=true blackhole=false" {
		t.Errorf("IPv6 %s, want out of rotation", got[v6])
	}
	if r.Verdict.Blackhole || !r.Verdict.InRotation {
		t.Errorf("blackhole %v, in rotation %v; want false, true", r.Verdict.Blackhole, r.Verdict.InRotation)
	}
}

// Dual-stack rules: the families agree on one Service and disagree on another. The mismatch is judged per
// family, so agreeing dual-stack Services show none; each family's port keeps its own rules and counter.
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
	// A gather before this one saw the IPv6 drop rule with 0 packets (a counter's first value is a baseline).
	before := kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Unix(1700000000-30, 0), map[string]map[kernelrules.ServicePort]kernelrules.PortState{
		kernelrules.FamilyIPv4: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, LocalEndpoints: 1}},
		kernelrules.FamilyIPv6: {port("agree"): {Programmed: true, LocalEndpoints: 1}, port("checkout"): {Programmed: true, Drop: true,
			Drops: []kernelrules.DropRule{{Port: 30090, Counted: true}}}},
	})
	reader := &scrapetest.Reader{Snap: before}
	setup := gatherSetup{view: view, reader: reader, kept: &keptGatherer{}}
	setup.gather(t)
	reader.Snap = snap
	st := setup.gather(t)
	for _, c := range []struct {
		service   string
		blackhole bool
		ports     string // per family: drop, dropped packets
	}{
		{"agree", false, "IPv4 http drop=false 0; IPv6 http drop=false 0"},
		{"checkout", true, "IPv4 http drop=false 0; IPv6 http drop=true 7"},
	} {
		r := resultOf(t, st, c.service)
		var ports []string
		for _, p := range r.Ports {
			ports = append(ports, fmt.Sprintf("%s %s drop=%v %d", p.Family, p.Label, p.Rules.Drop, p.DroppedPackets))
			if p.Mismatch {
				t.Errorf("%s %s %s: a mismatch", c.service, p.Family, p.Label)
			}
		}
		slices.Sort(ports)
		if got := strings.Join(ports, "; "); got != c.ports {
			t.Errorf("%s ports %s, want %s", c.service, got, c.ports)
		}
		if r.Verdict.Blackhole != c.blackhole || r.Mismatch || r.Verdict.Source != verdict.SourceRules {
			t.Errorf("%s: blackhole %v (want %v), mismatch %v, source %s", c.service, r.Verdict.Blackhole, c.blackhole, r.Mismatch, r.Verdict.Source)
		}
	}
}

// dataplaneOf is what a State says of the node's dataplane and kube-proxy.
func dataplaneOf(st *State) string {
	return fmt.Sprintf("dataplane=%s source=%s not_programmed=%v rules_err=%v", st.Dataplane, st.Source, st.NotProgrammed, st.RulesErr != nil)
}

// A node with a kube-proxy replacement's link (Cilium's cilium_host), no kube-proxy rule and nothing on
// kube-proxy's health port. It says so, and judges from the API view. (collector's TestDataplaneSeries
// renders such a State: no kube-proxy series, no failed collector.)
func TestReplacementDetected(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Err: kernelrules.ErrNoRules}
	st := gatherSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), links: scrapetest.Links{"lo", "eth0", "cilium_host", "cilium_net"}}.gather(t)
	if got, want := dataplaneOf(st), "dataplane=replacement source=api not_programmed=false rules_err=true"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if !strings.Contains(st.Replacement, "cilium_host") {
		t.Errorf("replacement %q does not name the link that showed it", st.Replacement)
	}
	if r := resultOf(t, st, "checkout"); !r.Verdict.Blackhole || r.Verdict.Source != verdict.SourceAPI {
		t.Errorf("blackhole %v from %s, want a blackhole from the API view", r.Verdict.Blackhole, r.Verdict.Source)
	}
}

// A node where kube-proxy has not been seen yet and nothing replaces it (a reboot whose kube-proxy image pull
// fails, a crash before its health server starts): silence is not a replacement. kube-proxy is missing: its
// probes say so (its alerts fire), the node is not programmed, and nothing drops there, so nothing pages as a
// blackhole: a NodePort without rules is refused, not blackholed.
func TestKubeProxyNeverSeenIsMissing(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Err: fmt.Errorf("reading: %w", kernelrules.ErrNoRules)}
	st := gatherSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), links: scrapetest.Links{"lo", "eth0", "flannel.1"}}.gather(t)
	if got, want := dataplaneOf(st), "dataplane=kube-proxy source=rules not_programmed=true rules_err=true"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if st.Replacement != "" || st.KubeProxy.Err != nil || st.KubeProxy.Healthz.Up() || st.KubeProxy.Livez.Up() {
		t.Errorf("replacement %q, kube-proxy probed %v: healthz up %v, livez up %v; want its probes refused", st.Replacement,
			st.KubeProxy.Err, st.KubeProxy.Healthz.Up(), st.KubeProxy.Livez.Up())
	}
	if r := resultOf(t, st, "checkout"); r.Verdict.Blackhole {
		t.Error("a blackhole on a node kube-proxy has not programmed")
	}
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
	st := gatherSetup{view: view, reader: reader, kubeProxy: kp}.gather(t)
	if got, want := dataplaneOf(st), "dataplane=kube-proxy source=rules not_programmed=true rules_err=true"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if !st.KubeProxy.Healthz.Up() || !st.KubeProxy.Livez.Up() {
		t.Errorf("kube-proxy healthz up %v, livez up %v; want both", st.KubeProxy.Healthz.Up(), st.KubeProxy.Livez.Up())
	}
	for _, name := range []string{"checkout", "web"} {
		if r := resultOf(t, st, name); r.Verdict.Blackhole || r.Mismatch {
			t.Errorf("%s: blackhole %v, mismatch %v before kube-proxy's first sync", name, r.Verdict.Blackhole, r.Mismatch)
		}
	}
	// Once kube-proxy syncs, its rules decide again and the node is programmed.
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	reader.Err, reader.Snap = nil, kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
		map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, Drops: []kernelrules.DropRule{{Port: 30090, Counted: true}}}})
	st = gatherSetup{view: view, reader: reader, kubeProxy: kp}.gather(t)
	if st.NotProgrammed {
		t.Error("not programmed after kube-proxy's first sync")
	}
	if !resultOf(t, st, "checkout").Verdict.Blackhole || resultOf(t, st, "web").Verdict.Blackhole {
		t.Error("after the sync: want checkout a blackhole, web not")
	}
}

// A node where kube-proxy was seen and then vanished (rules flushed, health port closed) is a kube-proxy
// node whose kube-proxy is down: its alerts must fire, so it is not taken for a replacement, even beside a
// replacement's link (Cilium running beside kube-proxy).
func TestKubeProxyGoneIsNotAReplacement(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	reader := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, nil, time.Unix(1700000000, 0), nil)}
	setup := gatherSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), kept: &keptGatherer{}, links: scrapetest.Links{"cilium_host"}}
	if st := setup.gather(t); st.Dataplane != DataplaneKubeProxy || st.NotProgrammed {
		t.Errorf("rules read: dataplane %s, not programmed %v; want a programmed kube-proxy", st.Dataplane, st.NotProgrammed)
	}
	reader.Snap, reader.Err = nil, kernelrules.ErrNoRules
	st := setup.gather(t)
	if got, want := dataplaneOf(st), "dataplane=kube-proxy source=rules not_programmed=true rules_err=true"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if st.KubeProxy.Err != nil || st.KubeProxy.Healthz.Up() || st.KubeProxy.Livez.Up() {
		t.Errorf("kube-proxy probed %v: healthz up %v, livez up %v; want its probes refused", st.KubeProxy.Err, st.KubeProxy.Healthz.Up(), st.KubeProxy.Livez.Up())
	}
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
	setup := gatherSetup{view: view, reader: reader, kubeProxy: scrapetest.RefusedKubeProxy(t), kept: &keptGatherer{},
		links: scrapetest.Links{"cilium_host"}, configz: configz.URL + "/configz"}
	if st := setup.gather(t); st.Dataplane != DataplaneKubeProxy {
		t.Errorf("/configz answering: %s, want kube-proxy", st.Dataplane)
	}
	configz.Close() // quiet from now on
	if st := setup.gather(t); st.Dataplane != DataplaneKubeProxy {
		t.Errorf("/configz quiet after it answered: %s, want kube-proxy", st.Dataplane)
	}
	// Control: never seen (a fresh gatherer, /configz quiet), the same node is a replacement.
	setup.kept = nil
	if st := setup.gather(t); st.Dataplane != DataplaneReplacement {
		t.Errorf("never seen: %s, want replacement", st.Dataplane)
	}
}

// --dataplane=replacement says so without detection; IPVS is reported as ipvs, its rules unsupported.
func TestDataplaneFlagAndIPVS(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	if st := (gatherSetup{view: view, dataplane: DataplaneReplacement}).gather(t); st.Dataplane != DataplaneReplacement || st.Replacement != "" {
		t.Errorf("the flag: dataplane %s, replacement %q; want replacement, none detected", st.Dataplane, st.Replacement)
	}
	ipvs := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeIPVS, "", nil, time.Unix(1700000000, 0), nil),
		Err: fmt.Errorf("reading: %w", kernelrules.ErrUnsupported)}
	st := gatherSetup{view: view, reader: ipvs}.gather(t)
	if got, want := dataplaneOf(st), "dataplane=ipvs source=api not_programmed=false rules_err=true"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if !errors.Is(st.RulesErr, kernelrules.ErrUnsupported) {
		t.Errorf("rules error %v, want unsupported", st.RulesErr)
	}
}

// externalIPs: a node is in rotation for one only with evidence. Gather 1: the drop rule has counted nothing
// and the address is not here: no blackhole. Gather 2: its counter grew: traffic arrives and is dropped.
// Gather 3, past the window without growth: none. Then the address is assigned to the node: a blackhole.
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
	setup := gatherSetup{view: view, reader: reader, kept: &keptGatherer{}, window: time.Minute, addrs: scrapetest.Addrs{"127.0.0.1"}}
	steps := []struct {
		packets uint64
		after   time.Duration
		addrs   scrapetest.Addrs
		want    bool
	}{
		{0, 0, nil, false},
		{5, 30 * time.Second, nil, true},
		{5, 60 * time.Second, nil, true},   // grew 30 s ago: within the window
		{5, 120 * time.Second, nil, false}, // 90 s without growth
		{2, 150 * time.Second, nil, true},  // kube-proxy rewrote the rule and it counted 2 new packets
		{2, 300 * time.Second, scrapetest.Addrs{"127.0.0.1", "198.51.100.7"}, true},
	}
	for i, s := range steps {
		reader.Snap = snapAt(s.packets, at.Add(s.after))
		setup.addrs = append(scrapetest.Addrs{"127.0.0.1"}, s.addrs...)
		if got := resultOf(t, setup.gather(t), "checkout").Verdict.Blackhole; got != s.want {
			t.Errorf("step %d: blackhole %v, want %v", i, got, s.want)
		}
	}
}

// The gatherer takes the probe address of each family from kube-proxy's --nodeport-addresses when known.
func TestNodePortAddressesChooseTheProbeAddress(t *testing.T) {
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 200, Local: 0})
	snap := dualStackLB(hcnp, 1, 1)
	snap.Node.InternalIPs = []string{"192.0.2.1", "2001:db8::1"} // not local: only the CIDRs find ::1 and 127.0.0.1
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := NewGatherer(GathererConfig{View: &scrapetest.View{Snap: snap}, Addrs: scrapetest.Addrs{"127.0.0.1", "::1", "192.0.2.1"},
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
	g := NewGatherer(GathererConfig{View: &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode()}}, KubeProxyAddress: scrapetest.NoAddress,
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
	hcnp := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 200, Local: 1})
	g = NewGatherer(GathererConfig{View: &scrapetest.View{Snap: dualStackLB(hcnp, 1, 1)}, Addrs: scrapetest.Addrs{"127.0.0.1", "::1"},
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
