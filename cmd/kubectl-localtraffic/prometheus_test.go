package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// series is one sample of an instant vector as Prometheus' API writes it.
func series(labels map[string]string, value string) map[string]any {
	return map[string]any{"metric": labels, "value": []any{1767000000.5, value}}
}

// reasonSeries is localtraffic_blackhole_reason of kubelings/checkout on node, as scraped (job and instance
// added by Prometheus).
func reasonSeries(node, reason string) map[string]any {
	return series(map[string]string{"__name__": "localtraffic_blackhole_reason", "job": "localtraffic-exporter", "instance": "10.0.0.1:9745",
		"node": node, "namespace": "kubelings", "service": "checkout", "reason": reason}, "1")
}

// reportedBy is each node's services collector success: its report of its Services was read whole.
func reportedBy(value string, nodes ...string) []map[string]any {
	var out []map[string]any
	for _, n := range nodes {
		out = append(out, series(map[string]string{"__name__": "localtraffic_scrape_collector_success", "job": "localtraffic-exporter",
			"node": n, "collector": "services"}, value))
	}
	return out
}

// vectorAnswer is a successful instant query's body.
func vectorAnswer(result ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fakeProm is a Prometheus HTTP API answering every query with one status and body, and recording what it was
// asked and with which headers.
type fakeProm struct {
	mu      sync.Mutex
	status  int
	body    string
	hang    bool
	queries []string
	headers []http.Header
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/prefix/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.queries = append(f.queries, r.FormValue("query"))
	f.headers = append(f.headers, r.Header.Clone())
	status, body, hang := f.status, f.body, f.hang
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// startProm serves f over plain HTTP under /prefix, as a Mimir or a Thanos behind a path.
func startProm(t *testing.T, f *fakeProm) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL + "/prefix"
}

func runWith(t *testing.T, objs []runtime.Object, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	a := exportersApp(fake.NewClientset(objs...), nil, &out, &errOut)
	code := a.run(context.Background(), args)
	return result{code, out.String(), errOut.String()}
}

// status --prometheus: one query (both series, the selector added to each) with the token and the tenant header,
// answered as a Prometheus holding the exporters' series answers; the OBSERVED column is --from-exporters' own.
func TestStatusPrometheus(t *testing.T) {
	f := &fakeProm{status: http.StatusOK, body: vectorAnswer(append(reportedBy("1", "node-1", "node-2", "node-3"),
		reasonSeries("node-2", "traffic_lost"), reasonSeries("node-3", "no_traffic_seen"),
		// A second replica's copy (Thanos without deduplication), weaker: the strongest reason stays.
		reasonSeries("node-2", "not_observed"))...)}
	url := startProm(t, f)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runWith(t, drillObjects(true), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-bearer-token-file", token,
		"--prometheus-header", "X-Scope-OrgID: tenant-1", "--prometheus-selector", `cluster="prod"`)
	if r.code != cli.ExitFindings || r.errOut != "" {
		t.Fatalf("exit %d, stderr %q, want 1 and nothing on stderr\n%s", r.code, r.errOut, r.out)
	}
	if !strings.Contains(r.out, "OBSERVED") || !strings.Contains(r.out, "traffic_lost: node-2; no_traffic_seen: node-3") {
		t.Errorf("no OBSERVED column naming node-2 and node-3:\n%s", r.out)
	}
	wantQuery := `localtraffic_blackhole_reason{cluster="prod"} or localtraffic_scrape_collector_success{collector="services",cluster="prod"}`
	if len(f.queries) != 1 || f.queries[0] != wantQuery {
		t.Errorf("queries %q, want exactly one: %s", f.queries, wantQuery)
	}
	if h := f.headers[0]; h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Scope-OrgID") != "tenant-1" {
		t.Errorf("headers %v: want the token and the tenant", h)
	}

	// Per node, in JSON: what each node's exporter reports.
	r = runWith(t, drillObjects(true), "status", "-n", "kubelings", "checkout", "--prometheus", url, "-o", "json")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 {
		t.Fatalf("json: %v\n%s", err, r.out)
	}
	got := map[string]placement.Observation{}
	for _, n := range st.Items[0].NodeStatuses {
		got[n.Node] = n.Observed
	}
	if got["node-1"] != placement.ObservedNoBlackhole || got["node-2"] != "traffic_lost" || got["node-3"] != "no_traffic_seen" {
		t.Errorf("observed per node %v", got)
	}
}

// The exit status follows what the exporters see: a cluster whose API view is clean fails the command when a
// node's exporter reports a blackhole (here the exporter's labels renamed exported_*, as OpenShift's
// user-workload Prometheus keeps them); a node Prometheus has no report from is named on stderr and makes the
// picture incomplete (3), as an exporter that did not answer --from-exporters does.
func TestStatusPrometheusExitFollowsTheExporters(t *testing.T) {
	renamed := series(map[string]string{"__name__": "localtraffic_blackhole_reason", "node": "node-2", "namespace": "openshift-user-workload",
		"exported_namespace": "kubelings", "service": "localtraffic-exporter", "exported_service": "checkout", "reason": "health_check_ignored"}, "1")
	f := &fakeProm{status: http.StatusOK, body: vectorAnswer(append(reportedBy("1", "node-1", "node-2", "node-3"), renamed)...)}
	url := startProm(t, f)
	if r := runWith(t, drillObjects(false), "status", "-n", "kubelings"); r.code != cli.ExitClean {
		t.Fatalf("the API view alone: exit %d, want 0", r.code)
	}
	r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url)
	if r.code != cli.ExitFindings || !strings.Contains(r.out, "health_check_ignored: node-2") {
		t.Errorf("exit %d, want 1: node-2's exporter reports a blackhole the API cannot see\n%s%s", r.code, r.out, r.errOut)
	}

	f.body = vectorAnswer(append(reportedBy("1", "node-1"), reportedBy("0", "node-3")...)...)
	r = runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url)
	want := "has no report from the exporter on node-2, node-3 (not scraped, no exporter there, or its services collector failing)"
	if r.code != cli.ExitAPI || !strings.Contains(r.errOut, want) || strings.Count(r.errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want 3 and one line saying %q", r.code, r.errOut, want)
	}
}

// A Prometheus that answers garbage, an error, refuses the token, answers another result type or hangs fails the
// read in one line within --prometheus-timeout: the API's view is still printed, and the exit status is 3 (1
// where the API already shows blackholes).
func TestStatusPrometheusFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		hang   bool
		want   string
	}{
		{"garbage", http.StatusOK, "<html>It works!</html>", false, "is not the API's JSON"},
		{"truncated", http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[{"metric":`, false, "is not the API's JSON"},
		{"matrix", http.StatusOK, `{"status":"success","data":{"resultType":"matrix","result":[]}}`, false, "answered the instant query with a matrix, not a vector"},
		{"bad query", http.StatusBadRequest, `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:31: parse error"}`, false,
			"failed the query localtraffic_blackhole_reason or localtraffic_scrape_collector_success{collector=\"services\"}: bad_data: invalid parameter"},
		{"server error", http.StatusServiceUnavailable, `{"status":"error","errorType":"unavailable","error":"too many queries"}`, false, "server error: 503: {\"status\":\"error\",\"errorType\":\"unavailable\",\"error\":\"too many queries\"}"},
		{"proxy error", http.StatusBadGateway, "<html>502 Bad Gateway</html>", false, "server_error: server error: 502"},
		{"unauthorized", http.StatusUnauthorized, "Unauthorized\n", false, "refused the query (client error: 401): check --prometheus-bearer-token-file"},
		{"hang", 0, "", true, "did not answer within 300ms (--prometheus-timeout)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startProm(t, &fakeProm{status: tc.status, body: tc.body, hang: tc.hang})
			r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-timeout", "300ms")
			if r.code != cli.ExitAPI || !strings.Contains(r.errOut, tc.want) || strings.Count(r.errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want 3 and one line containing %q", r.code, r.errOut, tc.want)
			}
			if !strings.Contains(r.out, "kubelings   checkout") || !strings.Contains(r.out, "OBSERVED") {
				t.Errorf("the API's view is not printed:\n%s", r.out)
			}
			if r := runWith(t, drillObjects(true), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-timeout", "300ms"); r.code != cli.ExitFindings {
				t.Errorf("with blackholes in the API's view: exit %d, want 1", r.code)
			}
		})
	}
}

// Flags that cannot work are bad input before anything is read.
func TestStatusPrometheusBadInput(t *testing.T) {
	url := startProm(t, &fakeProm{status: http.StatusOK, body: vectorAnswer()})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prometheus", "mimir:9009"}, "want the API's base URL"},
		{[]string{"--prometheus", url, "--prometheus-header", "X-Scope-OrgID"}, "--prometheus-header \"X-Scope-OrgID\": want 'Name: value'"},
		{[]string{"--prometheus", url, "--prometheus-header", "Authorization: Bearer x"}, `setting header "Authorization" is not allowed`},
		{[]string{"--prometheus", url, "--prometheus-bearer-token-file", "/nonexistent/token"}, "--prometheus-bearer-token-file: open /nonexistent/token"},
		{[]string{"--prometheus", url, "--prometheus-ca-file", "/nonexistent/ca.pem"}, "--prometheus flags:"},
		{[]string{"--prometheus", url, "--prometheus-timeout", "0s"}, "want a positive duration"},
		{[]string{"--prometheus-header", "X-Scope-OrgID: t"}, "which is not given"},
		{[]string{"--prometheus", url, "--from-exporters"}, "choose one"},
	} {
		r := runWith(t, drillObjects(true), append([]string{"status", "-n", "kubelings"}, tc.args...)...)
		if r.code != cli.ExitError || !strings.Contains(r.errOut, tc.want) || r.out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, r.code, r.out, r.errOut, tc.want)
		}
	}
}

// TLS: the certificate is verified against --prometheus-ca-file (not the system's roots), or not at all with
// --prometheus-insecure-skip-tls-verify.
func TestStatusPrometheusTLS(t *testing.T) {
	f := &fakeProm{status: http.StatusOK, body: vectorAnswer(reportedBy("1", "node-1", "node-2", "node-3")...)}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the test's, not news
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + "/prefix"
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url); r.code != cli.ExitAPI || !strings.Contains(r.errOut, "certificate") {
		t.Errorf("unknown CA: exit %d, stderr %q; want 3 and the certificate named", r.code, r.errOut)
	}
	for _, flags := range [][]string{{"--prometheus-ca-file", ca}, {"--prometheus-insecure-skip-tls-verify"}} {
		if r := runWith(t, drillObjects(false), append([]string{"status", "-n", "kubelings", "--prometheus", url}, flags...)...); r.code != cli.ExitClean || r.errOut != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0", flags, r.code, r.errOut)
		}
	}
}

// drain-check --prometheus: a drain the API finds harmless fails while the exporters report the Service
// blackholed now, and says so under the Service and in JSON.
func TestDrainCheckPrometheus(t *testing.T) {
	objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
	f := &fakeProm{status: http.StatusOK, body: vectorAnswer(append(reportedBy("1", "node-1", "node-2", "node-3"),
		reasonSeries("node-3", "health_check_ignored"))...)}
	url := startProm(t, f)
	r := runWith(t, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url)
	if r.code != cli.ExitFindings || !strings.Contains(r.out, "now, before any drain, its exporters report health_check_ignored on node-3") ||
		!strings.Contains(r.out, "the exporters report 1 of these Local Service(s) blackholed now") {
		t.Errorf("exit %d, want 1 and node-3's blackhole named:\n%s%s", r.code, r.out, r.errOut)
	}
	r = runWith(t, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url, "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil || rep.ObservedBlackholes != 1 || len(rep.Services) != 1 ||
		strings.Join(rep.Services[0].Observed["health_check_ignored"], ",") != "node-3" || rep.Loses {
		t.Errorf("json %v: %+v", err, rep)
	}
	// The exporters report nothing: the API's verdict stands (exit 0); a node unheard of makes it 3.
	f.body = vectorAnswer(reportedBy("1", "node-1", "node-2", "node-3")...)
	if r := runWith(t, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.code != cli.ExitClean {
		t.Errorf("clean: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	f.body = vectorAnswer(reportedBy("1", "node-1", "node-2")...)
	if r := runWith(t, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.code != cli.ExitAPI || !strings.Contains(r.errOut, "node-3") {
		t.Errorf("node-3 unheard of: exit %d, stderr %q", r.code, r.errOut)
	}
}
