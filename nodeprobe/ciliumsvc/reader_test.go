package ciliumsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane/dataplanetest"
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

// destinations are the external destinations of a world's Service port (by its Service port number).
func destinations(world string, sp dataplane.ServicePort, svcPort uint16, v6 bool) []dataplanetest.Dest {
	var out []dataplanetest.Dest
	for _, s := range worlds[world](v6) {
		if s.ns != sp.Namespace || s.name != sp.Name || s.proto != sp.Protocol || svcPort != 0 && s.svcPort != svcPort {
			continue
		}
		if s.nodePort != 0 {
			out = append(out, dataplanetest.Dest{Port: int32(s.nodePort)})
		}
		for _, a := range slices.Concat(s.lbIPs, s.externalIPs) {
			out = append(out, dataplanetest.Dest{Address: a, Port: int32(s.svcPort)})
		}
	}
	return out
}

// ownTable: the states only Cilium reports (backend states; two ports of one protocol, which its model cannot
// name apart), in the words of the seam's fixture table (dataplanetest.Says).
var ownTable = []struct {
	state   string
	world   string
	sp      dataplane.ServicePort
	svcPort uint16            // which port's destinations to ask about; 0: the Service's only one
	want    map[string]string // family -> dataplanetest.Says
}{
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

// readWorld reads, through the seam, a fake agent on a unix socket in a temporary directory answering
// /v1/service with the world's recorded answer (testdata: the world as Cilium serializes it).
func readWorld(t *testing.T, world string) dataplane.Rules {
	t.Helper()
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
	return rules
}

// noCountedDrops: each drop names its destination, and Cilium counts none.
func noCountedDrops(t *testing.T, world string, rules dataplane.Rules) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		f := dataplane.FamilyIPv4
		if v6 {
			f = dataplane.FamilyIPv6
		}
		for _, s := range worlds[world](v6) {
			sp := dataplane.ServicePort{Namespace: s.ns, Name: s.name, Protocol: s.proto}
			if st := rules.Family(sp, f); st.Drop && len(st.Drops) == 0 || st.DropPackets != 0 {
				t.Errorf("%s %s: %v: drops %+v (packets %d)", world, f, sp, st.Drops, st.DropPackets)
			}
		}
	}
}

// TestSeamFixtureTable runs the seam's fixture table (dataplanetest: the Service states every reader must tell
// the same) through Cilium's reader: each world as Cilium's agent serves it, read through the seam, must say
// of every Service what kube-proxy's readers say of the same Services (nodeprobe/kernelrules runs the same
// table on its rules).
func TestSeamFixtureTable(t *testing.T) {
	var reads []dataplanetest.Read
	for _, world := range dataplanetest.Worlds() {
		rules := readWorld(t, world)
		noCountedDrops(t, world, rules)
		reads = append(reads, dataplanetest.Read{Reader: "cilium", World: world, Rules: rules})
	}
	dataplanetest.RunTable(t, reads)
}

// TestOwnStates: what only Cilium reports, in the table's words.
func TestOwnStates(t *testing.T) {
	rules := readWorld(t, worldStates)
	noCountedDrops(t, worldStates, rules)
	rows := map[string]int{}
	for _, row := range ownTable {
		t.Run(row.state, func(t *testing.T) {
			for _, f := range []string{dataplane.FamilyIPv4, dataplane.FamilyIPv6} {
				st := rules.Family(row.sp, f)
				dests := destinations(row.world, row.sp, row.svcPort, f == dataplane.FamilyIPv6)
				if got := dataplanetest.Says(st, dests); got != row.want[f] {
					t.Errorf("%s: %v: %q, want %q", f, row.sp, got, row.want[f])
				}
			}
		})
		rows[row.world+"/"+row.sp.Namespace+"/"+row.sp.Name]++
	}
	// Every Service of the world is in the table.
	for _, s := range worlds[worldStates](false) {
		if rows[worldStates+"/"+s.ns+"/"+s.name] == 0 {
			t.Errorf("%s/%s has no row", s.ns, s.name)
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
