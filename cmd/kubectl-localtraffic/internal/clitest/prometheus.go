package clitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
