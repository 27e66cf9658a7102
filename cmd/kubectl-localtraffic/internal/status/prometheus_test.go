package status

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// status --prometheus: one query (both series, the selector added to each) with the token and the tenant header,
// answered as a Prometheus holding the exporters' series answers; the OBSERVED column is --from-exporters' own.
func TestStatusPrometheus(t *testing.T) {
	f := &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer(append(clitest.ReportedBy("1", "node-1", "node-2", "node-3"),
		clitest.ReasonSeries("node-2", "traffic_lost"), clitest.ReasonSeries("node-3", "no_traffic_seen"),
		// A second replica's copy (Thanos without deduplication), weaker: the strongest reason stays.
		clitest.ReasonSeries("node-2", "not_observed"))...)}
	url := clitest.StartProm(t, f)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runWith(t, drillObjects(true), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-bearer-token-file", token,
		"--prometheus-header", "X-Scope-OrgID: tenant-1", "--prometheus-selector", `cluster="prod"`)
	if r.Code != cli.ExitFindings || r.ErrOut != "" {
		t.Fatalf("exit %d, stderr %q, want 1 and nothing on stderr\n%s", r.Code, r.ErrOut, r.Out)
	}
	if !strings.Contains(r.Out, "OBSERVED") || !strings.Contains(r.Out, "traffic_lost: node-2; no_traffic_seen: node-3") {
		t.Errorf("no OBSERVED column naming node-2 and node-3:\n%s", r.Out)
	}
	wantQuery := `localtraffic_blackhole_reason{cluster="prod"} or localtraffic_scrape_collector_success{collector="services",cluster="prod"}`
	if len(f.Queries) != 1 || f.Queries[0] != wantQuery {
		t.Errorf("queries %q, want exactly one: %s", f.Queries, wantQuery)
	}
	if h := f.Headers[0]; h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Scope-OrgID") != "tenant-1" {
		t.Errorf("headers %v: want the token and the tenant", h)
	}

	// Per node, in JSON: what each node's exporter reports.
	r = runWith(t, drillObjects(true), "status", "-n", "kubelings", "checkout", "--prometheus", url, "-o", "json")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 {
		t.Fatalf("json: %v\n%s", err, r.Out)
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
	renamed := clitest.Series(map[string]string{"__name__": "localtraffic_blackhole_reason", "node": "node-2", "namespace": "openshift-user-workload",
		"exported_namespace": "kubelings", "service": "localtraffic-exporter", "exported_service": "checkout", "reason": "health_check_ignored"}, "1")
	f := &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer(append(clitest.ReportedBy("1", "node-1", "node-2", "node-3"), renamed)...)}
	url := clitest.StartProm(t, f)
	if r := runWith(t, drillObjects(false), "status", "-n", "kubelings"); r.Code != cli.ExitClean {
		t.Fatalf("the API view alone: exit %d, want 0", r.Code)
	}
	r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url)
	if r.Code != cli.ExitFindings || !strings.Contains(r.Out, "health_check_ignored: node-2") {
		t.Errorf("exit %d, want 1: node-2's exporter reports a blackhole the API cannot see\n%s%s", r.Code, r.Out, r.ErrOut)
	}

	f.Body = clitest.VectorAnswer(append(clitest.ReportedBy("1", "node-1"), clitest.ReportedBy("0", "node-3")...)...)
	r = runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url)
	want := "has no report from the exporter on node-2, node-3 (not scraped, no exporter there, or its services collector failing)"
	if r.Code != cli.ExitAPI || !strings.Contains(r.ErrOut, want) || strings.Count(r.ErrOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want 3 and one line saying %q", r.Code, r.ErrOut, want)
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
			url := clitest.StartProm(t, &clitest.FakeProm{Status: tc.status, Body: tc.body, Hang: tc.hang})
			r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-timeout", "300ms")
			if r.Code != cli.ExitAPI || !strings.Contains(r.ErrOut, tc.want) || strings.Count(r.ErrOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want 3 and one line containing %q", r.Code, r.ErrOut, tc.want)
			}
			if !strings.Contains(r.Out, "kubelings   checkout") || !strings.Contains(r.Out, "OBSERVED") {
				t.Errorf("the API's view is not printed:\n%s", r.Out)
			}
			if r := runWith(t, drillObjects(true), "status", "-n", "kubelings", "--prometheus", url, "--prometheus-timeout", "300ms"); r.Code != cli.ExitFindings {
				t.Errorf("with blackholes in the API's view: exit %d, want 1", r.Code)
			}
		})
	}
}

// Flags that cannot work are bad input before anything is read.
func TestStatusPrometheusBadInput(t *testing.T) {
	url := clitest.StartProm(t, &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer()})
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
		if r.Code != cli.ExitError || !strings.Contains(r.ErrOut, tc.want) || r.Out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, r.Code, r.Out, r.ErrOut, tc.want)
		}
	}
}

// TLS: the certificate is verified against --prometheus-ca-file (not the system's roots), or not at all with
// --prometheus-insecure-skip-tls-verify.
func TestStatusPrometheusTLS(t *testing.T) {
	f := &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...)}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the test's, not news
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + "/prefix"
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runWith(t, drillObjects(false), "status", "-n", "kubelings", "--prometheus", url); r.Code != cli.ExitAPI || !strings.Contains(r.ErrOut, "certificate") {
		t.Errorf("unknown CA: exit %d, stderr %q; want 3 and the certificate named", r.Code, r.ErrOut)
	}
	for _, flags := range [][]string{{"--prometheus-ca-file", ca}, {"--prometheus-insecure-skip-tls-verify"}} {
		if r := runWith(t, drillObjects(false), append([]string{"status", "-n", "kubelings", "--prometheus", url}, flags...)...); r.Code != cli.ExitClean || r.ErrOut != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0", flags, r.Code, r.ErrOut)
		}
	}
}
