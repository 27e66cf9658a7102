package clitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Series is one sample of an instant vector as Prometheus' API writes it.
func Series(labels map[string]string, value string) map[string]any {
	return map[string]any{"metric": labels, "value": []any{1767000000.5, value}}
}

// ReasonSeries is localtraffic_blackhole_reason of kubelings/checkout on node, as scraped (job and instance
// added by Prometheus).
func ReasonSeries(node, reason string) map[string]any {
	return Series(map[string]string{"__name__": "localtraffic_blackhole_reason", "job": "localtraffic-exporter", "instance": "10.0.0.1:9745",
		"node": node, "namespace": "kubelings", "service": "checkout", "reason": reason}, "1")
}

// ReportedBy is each node's services collector success: its report of its Services was read whole.
func ReportedBy(value string, nodes ...string) []map[string]any {
	var out []map[string]any
	for _, n := range nodes {
		out = append(out, Series(map[string]string{"__name__": "localtraffic_scrape_collector_success", "job": "localtraffic-exporter",
			"node": n, "collector": "services"}, value))
	}
	return out
}

// DrainSeries are the drain query's answer for kubelings/checkout: its measured drain's p95 and its episodes.
func DrainSeries(p95, episodes string) []map[string]any {
	return []map[string]any{
		Series(map[string]string{"namespace": "kubelings", "service": "checkout", "stat": "p95"}, p95),
		Series(map[string]string{"namespace": "kubelings", "service": "checkout", "stat": "episodes"}, episodes),
	}
}

// DrainAnswers answers the drain query (localtraffic_service_lb_drain_seconds) with drain and any other query
// with verdicts.
func DrainAnswers(verdicts, drain string) func(string) (int, string) {
	return func(q string) (int, string) {
		if strings.Contains(q, "localtraffic_service_lb_drain_seconds") {
			return http.StatusOK, drain
		}
		return http.StatusOK, verdicts
	}
}

// VectorAnswer is a successful instant query's body.
func VectorAnswer(result ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// FakeProm is a Prometheus HTTP API answering every query with one status and body, and recording what it was
// asked and with which headers.
type FakeProm struct {
	mu sync.Mutex
	// Status and Body are the answer; Hang: no answer until the request is given up.
	Status int
	Body   string
	Hang   bool
	// Answer, when set, answers each query instead of Status and Body (a verb that asks several queries).
	Answer func(query string) (status int, body string)
	// Queries and Headers are what it was asked, in order.
	Queries []string
	Headers []http.Header
}

// ServeHTTP answers /prefix/api/v1/query.
func (f *FakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/prefix/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.Queries = append(f.Queries, r.FormValue("query"))
	f.Headers = append(f.Headers, r.Header.Clone())
	status, body, hang := f.Status, f.Body, f.Hang
	if f.Answer != nil {
		status, body = f.Answer(r.FormValue("query"))
	}
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// StartProm serves f over plain HTTP under /prefix, as a Mimir or a Thanos behind a path.
func StartProm(t *testing.T, f *FakeProm) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL + "/prefix"
}
