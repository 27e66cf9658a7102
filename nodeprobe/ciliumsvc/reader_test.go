package ciliumsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// agent serves a fake Cilium agent's API on a unix socket: /v1/healthz says kpr, /v1/service answers
// serviceList (a fixture's bytes) through handler when set.
type agent struct {
	kpr         string
	serviceList []byte
	handler     http.HandlerFunc // replaces /v1/service when set
	gets        []string
}

func (a *agent) serve(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		a.gets = append(a.gets, r.URL.Path)
		fmt.Fprintf(w, `{"kube-proxy-replacement":{"mode":%q,"features":{}},"cilium":{"state":"Ok"}}`, a.kpr)
	})
	mux.HandleFunc("GET /v1/service", func(w http.ResponseWriter, r *http.Request) {
		a.gets = append(a.gets, r.URL.Path)
		if a.handler != nil {
			a.handler(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.serviceList)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func fixture(t *testing.T, world string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixturePath(world))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The seam's words, as nodeprobe/kernelrules' fixture table says them (seamSays there): what a port's state
// says its destinations get.
type seamDest struct {
	address string
	port    int32
}

func (d seamDest) String() string {
	if d.address == "" {
		return fmt.Sprintf("NodePort %d", d.port)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(d.address), uint16(d.port)).String()
}

func seamSays(st dataplane.PortState, dests []seamDest) string {
	if !st.Programmed {
		return "absent"
	}
	var says []string
	if st.Reject {
		says = append(says, "reject")
	}
	var dropped []string
	for _, d := range dests {
		if st.DropsTo(d.address, d.port) {
			dropped = append(dropped, d.String())
		}
	}
	if st.Drop || len(dropped) > 0 {
		says = append(says, "drop "+strings.Join(dropped, ", "))
	}
	if st.LocalEndpoints > 0 || len(says) == 0 {
		eps := make([]string, len(st.Endpoints))
		for i, e := range st.Endpoints {
			eps[i] = e.String()
		}
		says = append(says, fmt.Sprintf("forward to %d local [%s]", st.LocalEndpoints, strings.Join(eps, " ")))
	}
	return strings.Join(says, "; ")
}

// destinations are the external destinations of a world's Service port (by its Service port number).
func destinations(world string, sp dataplane.ServicePort, svcPort uint16, v6 bool) []seamDest {
	var out []seamDest
	for _, s := range worlds[world](v6) {
		if s.ns != sp.Namespace || s.name != sp.Name || s.proto != sp.Protocol || svcPort != 0 && s.svcPort != svcPort {
			continue
		}
		if s.nodePort != 0 {
			out = append(out, seamDest{port: int32(s.nodePort)})
		}
		for _, a := range slices.Concat(s.lbIPs, s.externalIPs) {
			out = append(out, seamDest{address: a, port: int32(s.svcPort)})
		}
	}
	return out
}

// seamTable: the rows of nodeprobe/kernelrules' TestSeamFixtureTable (same Services, same words), then the
// states only Cilium reports.
var seamTable = []struct {
	state   string
	world   string
	sp      dataplane.ServicePort
	svcPort uint16            // which port's destinations to ask about; 0: the Service's only one
	want    map[string]string // family -> seamSays
}{
	{"forwarding to local endpoints", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 2 local [10.244.1.5:8080 10.244.1.6:8080]",
		dataplane.FamilyIPv6: "forward to 2 local [[fd00:10:244:1::5]:8080 [fd00:10:244:1::6]:8080]",
	}},
	{"no local endpoint: every destination dropped", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "drop NodePort 30090, 192.0.2.10:80, 192.0.2.20:80",
		dataplane.FamilyIPv6: "drop NodePort 30090, [2001:db8::10]:80, [2001:db8::20]:80",
	}},
	{"no endpoint anywhere: rejected (unnamed port)", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "gone", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "reject",
		dataplane.FamilyIPv6: "reject",
	}},
	{"session affinity, one local endpoint", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "sticky", Port: "https", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 1 local [10.244.1.8:8443]",
		dataplane.FamilyIPv6: "forward to 1 local [[fd00:10:244:1::8]:8443]",
	}},
	{"SCTP, one local endpoint", "scenario", dataplane.ServicePort{Namespace: "telco", Name: "sig", Port: "sctp", Protocol: "SCTP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 1 local [10.244.1.10:3868]",
		dataplane.FamilyIPv6: "forward to 1 local [[fd00:10:244:1::a]:3868]",
	}},
	{"Cluster policy: programmed, nothing local counted", "scenario", dataplane.ServicePort{Namespace: "kube-system", Name: "kube-dns", Port: "dns", Protocol: "UDP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 0 local []",
		dataplane.FamilyIPv6: "forward to 0 local []",
	}},
	{"internalTrafficPolicy Local without local endpoints: external traffic not dropped", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "internal", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 0 local []",
		dataplane.FamilyIPv6: "forward to 0 local []",
	}},
	{"not programmed: absent", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "nothere", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "absent",
		dataplane.FamilyIPv6: "absent",
	}},
	{"not programmed under that protocol: absent", "scenario", dataplane.ServicePort{Namespace: "kubelings", Name: "web", Port: "http", Protocol: "UDP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "absent",
		dataplane.FamilyIPv6: "absent",
	}},
	{"dual-stack: IPv4 forwards, IPv6 drops", "dual-stack", dataplane.ServicePort{Namespace: "kubelings", Name: "dual-lb", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 1 local [10.244.1.40:8080]",
		dataplane.FamilyIPv6: "drop NodePort 30140, [2001:db8::40]:80",
	}},
	{"dual-stack: IPv4 drops, IPv6 forwards", "dual-stack", dataplane.ServicePort{Namespace: "kubelings", Name: "dual-np", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "drop NodePort 30141",
		dataplane.FamilyIPv6: "forward to 1 local [[fd00:10:244:1::41]:8080]",
	}},
	// Cilium's own states.
	{"only local endpoint terminating: used, as no local one is active", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "draining", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "forward to 1 local [10.244.1.50:8080]",
		dataplane.FamilyIPv6: "forward to 1 local [[fd00:10:244:1::50]:8080]",
	}},
	{"only local endpoint quarantined: LoadBalancer IP and NodePort dropped", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "sick", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "drop NodePort 30151, 192.0.2.51:80",
		dataplane.FamilyIPv6: "drop NodePort 30151, [2001:db8::51]:80",
	}},
	{"only local endpoint in maintenance: externalIP and NodePort dropped", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "maint", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "drop NodePort 30152, 192.0.2.52:80",
		dataplane.FamilyIPv6: "drop NodePort 30152, [2001:db8::52]:80",
	}},
	{"terminating endpoints elsewhere only: dropped, not rejected", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "leaving", Port: "http", Protocol: "TCP"}, 0, map[string]string{
		dataplane.FamilyIPv4: "drop NodePort 30153",
		dataplane.FamilyIPv6: "drop NodePort 30153",
	}},
	{"two ports of one protocol: endpoints by address, first port", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "multi", Port: "http", Protocol: "TCP"}, 80, map[string]string{
		dataplane.FamilyIPv4: "forward to 2 local [10.244.1.60 10.244.1.61]",
		dataplane.FamilyIPv6: "forward to 2 local [fd00:10:244:1::60 fd00:10:244:1::61]",
	}},
	{"two ports of one protocol: endpoints by address, second port", "states", dataplane.ServicePort{Namespace: "kubelings", Name: "multi", Port: "metrics", Protocol: "TCP"}, 9090, map[string]string{
		dataplane.FamilyIPv4: "forward to 2 local [10.244.1.60 10.244.1.61]",
		dataplane.FamilyIPv6: "forward to 2 local [fd00:10:244:1::60 fd00:10:244:1::61]",
	}},
}

// TestSeamFixtureTable reads each world's recorded answer through a fake agent and the seam, and must say of
// every Service what kube-proxy's readers say of the same Services.
func TestSeamFixtureTable(t *testing.T) {
	reads := map[string]dataplane.Rules{}
	for world := range worlds {
		a := &agent{kpr: "True", serviceList: fixture(t, world)}
		rules, err := NewReader(a.serve(t), time.Second).Read(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", world, err)
		}
		info := rules.Info()
		if info.Kind != dataplane.KindCilium || info.Mode != Mode || info.Backend != "" || info.Watch != dataplane.WatchNone ||
			!slices.Equal(info.Families, []string{dataplane.FamilyIPv4, dataplane.FamilyIPv6}) || info.ReadAt.IsZero() {
			t.Errorf("%s: the read says %+v", world, info)
		}
		if !slices.Equal(a.gets, []string{"/v1/healthz", "/v1/service"}) {
			t.Errorf("%s: asked the agent for %q", world, a.gets)
		}
		reads[world] = rules
	}
	rows := map[string]int{}
	for _, row := range seamTable {
		t.Run(row.state, func(t *testing.T) {
			rules := reads[row.world]
			for _, f := range []string{dataplane.FamilyIPv4, dataplane.FamilyIPv6} {
				if !rules.HasFamily(f) {
					t.Errorf("%s not read", f)
				}
				st := rules.Family(row.sp, f)
				dests := destinations(row.world, row.sp, row.svcPort, f == dataplane.FamilyIPv6)
				if got := seamSays(st, dests); got != row.want[f] {
					t.Errorf("%s: %v: %q, want %q", f, row.sp, got, row.want[f])
				}
				if st.Drop && len(st.Drops) == 0 || st.DropPackets != 0 {
					t.Errorf("%s: %v: drops %+v (packets %d): each drop names its destination, and Cilium counts none", f, row.sp, st.Drops, st.DropPackets)
				}
			}
		})
		rows[row.world+"/"+row.sp.Namespace+"/"+row.sp.Name]++
	}
	// Every Service of each world is in the table.
	for world, services := range worlds {
		for _, s := range services(false) {
			if rows[world+"/"+s.ns+"/"+s.name] == 0 {
				t.Errorf("%s: %s/%s has no row", world, s.ns, s.name)
			}
		}
	}
}

// TestReadIsComparable: two reads of the same table are equal but for their times (the node model compares
// reads with reflect.DeepEqual to tell what changed).
func TestReadIsComparable(t *testing.T) {
	sock := (&agent{kpr: "True", serviceList: fixture(t, "scenario")}).serve(t)
	r := NewReader(sock, time.Second)
	one, err1 := r.Read(context.Background())
	two, err2 := r.Read(context.Background())
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	a, b := one.(*table), two.(*table)
	if fmt.Sprint(a.ports) != fmt.Sprint(b.ports) || !slices.Equal(a.families, b.families) {
		t.Errorf("two reads of one table differ:\n%v\n%v", a.ports, b.ports)
	}
}

// TestReadFailures: an agent that is absent, refuses, hangs, answers garbage or does not replace kube-proxy is
// an error within the read's deadline, and the read still says it is Cilium's.
func TestReadFailures(t *testing.T) {
	refused := filepath.Join(t.TempDir(), "refused.sock")
	l, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the socket file stays, nothing listens: connect(2) says ECONNREFUSED

	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	for _, tc := range []struct {
		name    string
		sock    func(t *testing.T) string
		want    string
		unsupp  bool
		timeout time.Duration
	}{
		{"absent socket", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.sock") }, "does not exist", false, time.Second},
		{"refused", func(*testing.T) string { return refused }, "refused the connection", false, time.Second},
		{"hanging agent", func(t *testing.T) string {
			return (&agent{kpr: "True", handler: func(http.ResponseWriter, *http.Request) { <-hang }}).serve(t)
		}, "did not answer GET /v1/service", false, 200 * time.Millisecond},
		{"garbage", func(t *testing.T) string {
			return (&agent{kpr: "True", serviceList: []byte(`[{"spec":{"frontend-address":{"ip":"10.96.0.1"`)}).serve(t)
		}, "decoding the Cilium agent's answer to GET /v1/service", false, time.Second},
		{"not JSON at all", func(t *testing.T) string {
			return (&agent{kpr: "True", serviceList: []byte("<html>hello</html>")}).serve(t)
		}, "decoding the Cilium agent's answer", false, time.Second},
		{"bad frontend address", func(t *testing.T) string {
			return (&agent{kpr: "True", serviceList: []byte(`[{"spec":{"frontend-address":{"ip":"ten","port":80},"flags":{"name":"a","namespace":"b","type":"NodePort"}}}]`)}).serve(t)
		}, `frontend address "ten"`, false, time.Second},
		{"server error", func(t *testing.T) string {
			return (&agent{kpr: "True", handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }}).serve(t)
		}, "answered GET /v1/service with 500", false, time.Second},
		{"no kube-proxy replacement", func(t *testing.T) string {
			return (&agent{kpr: "False", serviceList: fixture(t, "scenario")}).serve(t)
		}, "Cilium does not replace kube-proxy on this node (kube-proxy-replacement False)", true, time.Second},
		{"status without kube-proxy replacement", func(t *testing.T) string {
			return (&agent{kpr: "", serviceList: fixture(t, "scenario")}).serve(t)
		}, "says nothing of its kube-proxy replacement", false, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rules, err := NewReader(tc.sock(t), tc.timeout).Read(context.Background())
			if took := time.Since(start); took > tc.timeout+time.Second {
				t.Errorf("took %s, beyond the read's deadline %s", took, tc.timeout)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if errors.Is(err, dataplane.ErrUnsupported) != tc.unsupp {
				t.Errorf("ErrUnsupported %v, want %v", errors.Is(err, dataplane.ErrUnsupported), tc.unsupp)
			}
			if rules == nil || rules.Info().Kind != dataplane.KindCilium || len(rules.Info().Families) != 0 ||
				rules.HasFamily(dataplane.FamilyIPv4) || rules.Family(dataplane.ServicePort{Namespace: "kubelings", Name: "web", Protocol: "TCP"}, dataplane.FamilyIPv4).Programmed {
				t.Errorf("the failed read says %+v", rules)
			}
		})
	}
}

// TestReadHonoursCallersDeadline: the caller's shorter deadline bounds the read too.
func TestReadHonoursCallersDeadline(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	sock := (&agent{kpr: "True", handler: func(http.ResponseWriter, *http.Request) { <-hang }}).serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := NewReader(sock, time.Minute).Read(ctx)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("error %v after %s", err, time.Since(start))
	}
}
