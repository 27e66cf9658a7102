package nodeprobe_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// kube-proxy's health check node port server, as each release wrote it (pkg/proxy/healthcheck/service_health.go).
// The body is a dedented, tab-indented literal without a trailing newline; the status and headers changed with
// releases:
//   ≤1.26: 200 when local endpoints > 0, else 503; body without serviceProxyHealthy.
//   1.27:  200 only when local endpoints > 0 and kube-proxy is healthy; body gains serviceProxyHealthy.
//   ≥1.28: as 1.27, plus X-Load-Balancing-Endpoint-Weight: <local endpoints> on every answer.

func healthCheckBody126(ns, name string, count int) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d\n}", ns, name, count)
}

func healthCheckBody127(ns, name string, count int, proxyHealthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", ns, name, count, proxyHealthy)
}

// kubeProxyHealthCheckHandler answers like kube-proxy release minor (26, 27, 28, …) for Service ns/name.
func kubeProxyHealthCheckHandler(minor int, ns, name string, count int, proxyHealthy bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if minor <= 26 {
			if count == 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
			} else {
				w.WriteHeader(http.StatusOK)
			}
			fmt.Fprint(w, healthCheckBody126(ns, name, count))
			return
		}
		if minor >= 28 {
			w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		}
		if count != 0 && proxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, healthCheckBody127(ns, name, count, proxyHealthy))
	})
}

func probeHealthCheck(t *testing.T, h http.Handler, ns, name string) nodeprobe.HealthCheck {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	host, port := splitHostPort(srv.Listener.Addr().String())
	var hc nodeprobe.HealthCheck
	withinGuard(t, "health check probe", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hc = nodeprobe.ProbeHealthCheckNodePort(ctx, nodeprobe.NewHTTPClient(), host, port, ns, name)
	})
	return hc
}

func boolPtr(b bool) *bool { return &b }

func TestHealthCheckNodePortVersions(t *testing.T) {
	tests := []struct {
		name         string
		minor        int
		count        int
		proxyHealthy bool
		want         nodeprobe.HealthCheck
	}{
		{"1.26 with endpoints", 26, 3, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 3, Weight: -1}},
		{"1.26 without endpoints", 26, 0, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 0, Weight: -1}},
		{"1.27 with endpoints", 27, 2, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 2, ServiceProxyHealthy: boolPtr(true), Weight: -1}},
		{"1.27 without endpoints", 27, 0, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 0, ServiceProxyHealthy: boolPtr(true), Weight: -1}},
		{"1.27 endpoints but kube-proxy unhealthy", 27, 2, false,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 2, ServiceProxyHealthy: boolPtr(false), Weight: -1}},
		{"1.28 with endpoints", 28, 3, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 3, ServiceProxyHealthy: boolPtr(true), Weight: 3}},
		{"1.28 without endpoints", 28, 0, true,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 0, ServiceProxyHealthy: boolPtr(true), Weight: 0}},
		{"1.37 endpoints but kube-proxy unhealthy", 37, 2, false,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 2, ServiceProxyHealthy: boolPtr(false), Weight: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probeHealthCheck(t, kubeProxyHealthCheckHandler(tc.minor, "kubelings", "web", tc.count, tc.proxyHealthy), "kubelings", "web")
			checkHealthCheck(t, got, tc.want)
			if got.Err != nil {
				t.Errorf("err = %v for a well-formed answer, want nil", got.Err)
			}
		})
	}
}

func checkHealthCheck(t *testing.T, got, want nodeprobe.HealthCheck) {
	t.Helper()
	if got.Result != want.Result || got.StatusCode != want.StatusCode || got.LocalEndpoints != want.LocalEndpoints || got.Weight != want.Weight {
		t.Errorf("got result %q, status %d, local endpoints %d, weight %d (err %v); want %q, %d, %d, %d",
			got.Result, got.StatusCode, got.LocalEndpoints, got.Weight, got.Err,
			want.Result, want.StatusCode, want.LocalEndpoints, want.Weight)
	}
	switch {
	case want.ServiceProxyHealthy == nil && got.ServiceProxyHealthy != nil:
		t.Errorf("serviceProxyHealthy = %v, want absent (nil)", *got.ServiceProxyHealthy)
	case want.ServiceProxyHealthy != nil && got.ServiceProxyHealthy == nil:
		t.Errorf("serviceProxyHealthy absent, want %v", *want.ServiceProxyHealthy)
	case want.ServiceProxyHealthy != nil && *got.ServiceProxyHealthy != *want.ServiceProxyHealthy:
		t.Errorf("serviceProxyHealthy = %v, want %v", *got.ServiceProxyHealthy, *want.ServiceProxyHealthy)
	}
	if got.Answered() != (want.StatusCode != 0) {
		t.Errorf("Answered() = %v with status %d", got.Answered(), got.StatusCode)
	}
}

// realV1372Body is the body of a real kube-proxy v1.37.2 reply (docs/kube-proxy.md, Health check node port)
// byte for byte: tab indented, no trailing newline.
const realV1372Body = "{\n" +
	"\t\"service\": {\n" +
	"\t\t\"namespace\": \"kubelings\",\n" +
	"\t\t\"name\": \"web\"\n" +
	"\t},\n" +
	"\t\"localEndpoints\": 0,\n" +
	"\t\"serviceProxyHealthy\": true\n" +
	"}"

// realV1372Reply is that whole reply, its headers as in docs/kube-proxy.md, framed as Go's net/http server frames
// it (Date, Content-Length; Connection: close because the probe asks for it).
func realV1372Reply() string {
	return "HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"X-Load-Balancing-Endpoint-Weight: 0\r\n" +
		"Date: Mon, 30 Nov 2026 11:45:14 GMT\r\n" +
		"Content-Length: " + strconv.Itoa(len(realV1372Body)) + "\r\n" +
		"Connection: close\r\n" +
		"\r\n" + realV1372Body
}

func TestHealthCheckNodePortRealV1372Reply(t *testing.T) {
	requests := make(chan *http.Request, 1)
	p := startPeer(t, func(c net.Conn, _ <-chan struct{}) {
		req, err := readRequest(c)
		if err != nil {
			return
		}
		requests <- req
		_, _ = c.Write([]byte(realV1372Reply()))
	})
	host, port := splitHostPort(p.addr())
	var got nodeprobe.HealthCheck
	withinGuard(t, "health check probe", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got = nodeprobe.ProbeHealthCheckNodePort(ctx, nodeprobe.NewHTTPClient(), host, port, "kubelings", "web")
	})
	checkHealthCheck(t, got, nodeprobe.HealthCheck{
		Result: nodeprobe.ResultUnavailable, StatusCode: 503, LocalEndpoints: 0, ServiceProxyHealthy: boolPtr(true), Weight: 0,
	})
	if got.Err != nil {
		t.Errorf("err = %v, want nil for kube-proxy's own 503", got.Err)
	}
	select {
	case req := <-requests:
		// A load balancer asks GET / ; the probe must ask the same thing.
		if req.Method != http.MethodGet || req.URL.Path != "/" {
			t.Errorf("probe asked %s %s, want GET /", req.Method, req.URL.Path)
		}
	default:
		t.Error("the peer saw no request")
	}
}

func TestHealthCheckNodePortEmptyBody(t *testing.T) {
	// kube-proxy's handler returns without writing while it removes the Service: Go's server answers 200 with
	// an empty body.
	got := probeHealthCheck(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "kubelings", "web")
	checkHealthCheck(t, got, nodeprobe.HealthCheck{Result: nodeprobe.ResultEmpty, StatusCode: 200, LocalEndpoints: -1, Weight: -1})
	if got.Err == nil {
		t.Error("no error for an empty answer: the log line would have no reason")
	}
}

func TestHealthCheckNodePortOtherService(t *testing.T) {
	// The port was reallocated to another Service (or something else answers there): its answer says nothing
	// about ours, whatever it reports.
	tests := []struct{ ns, name string }{
		{"kubelings", "api"}, // same namespace, other Service
		{"other", "web"},     // same name, other namespace
		{"", ""},             // fields missing
		{"Kubelings", "Web"}, // names are case-sensitive
	}
	for _, tc := range tests {
		t.Run(tc.ns+"/"+tc.name, func(t *testing.T) {
			got := probeHealthCheck(t, kubeProxyHealthCheckHandler(37, tc.ns, tc.name, 3, true), "kubelings", "web")
			if got.Result != nodeprobe.ResultInvalid {
				t.Errorf("result = %q, want invalid for an answer about %s/%s", got.Result, tc.ns, tc.name)
			}
			if got.StatusCode != 200 {
				t.Errorf("status = %d, want 200 (what a load balancer sees)", got.StatusCode)
			}
			if got.LocalEndpoints != -1 {
				t.Errorf("local endpoints = %d, want -1: another Service's count must not be reported as ours", got.LocalEndpoints)
			}
			if got.Err == nil {
				t.Error("no error for an answer about another Service")
			}
		})
	}
}

func TestHealthCheckNodePortMalformedAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   nodeprobe.HealthCheck
	}{
		{"no localEndpoints", 200, nil, `{"service":{"namespace":"kubelings","name":"web"}}`,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: 200, LocalEndpoints: -1, Weight: -1}},
		{"localEndpoints not a number", 200, nil, `{"service":{"namespace":"kubelings","name":"web"},"localEndpoints":"3"}`,
			nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: 200, LocalEndpoints: -1, Weight: -1}},
		{"truncated JSON", 200, nil, healthCheckBody127("kubelings", "web", 1, true)[:40],
			nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: 200, LocalEndpoints: -1, Weight: -1}},
		{"whitespace only", 200, nil, " \n\t\n",
			nodeprobe.HealthCheck{Result: nodeprobe.ResultEmpty, StatusCode: 200, LocalEndpoints: -1, Weight: -1}},
		{"503 empty", 503, nil, "",
			nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: 503, LocalEndpoints: -1, Weight: -1}},
		{"500 with a valid body", 500, nil, healthCheckBody127("kubelings", "web", 1, true),
			nodeprobe.HealthCheck{Result: nodeprobe.ResultInvalid, StatusCode: 500, LocalEndpoints: -1, Weight: -1}},
		{"garbage weight header", 200, map[string]string{"X-Load-Balancing-Endpoint-Weight": "lots"}, healthCheckBody127("kubelings", "web", 1, true),
			nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 1, ServiceProxyHealthy: boolPtr(true), Weight: -1}},
		{"negative weight header", 200, map[string]string{"X-Load-Balancing-Endpoint-Weight": "-1"}, healthCheckBody127("kubelings", "web", 1, true),
			nodeprobe.HealthCheck{Result: nodeprobe.ResultOK, StatusCode: 200, LocalEndpoints: 1, ServiceProxyHealthy: boolPtr(true), Weight: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probeHealthCheck(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}), "kubelings", "web")
			checkHealthCheck(t, got, tc.want)
			if (got.Err == nil) != (tc.want.Result == nodeprobe.ResultOK) {
				t.Errorf("err = %v for result %q: want an error exactly when the result is not ok/unavailable", got.Err, got.Result)
			}
		})
	}
}

func TestHealthCheckNodePortRefusedAndTimeoutKeepUnknownFields(t *testing.T) {
	// Without an HTTP answer nothing is known: the counts must say so (-1), not claim 0.
	host, port := splitHostPort(refusedAddress(t))
	got := nodeprobe.ProbeHealthCheckNodePort(context.Background(), nodeprobe.NewHTTPClient(), host, port, "kubelings", "web")
	checkHealthCheck(t, got, nodeprobe.HealthCheck{Result: nodeprobe.ResultRefused, LocalEndpoints: -1, Weight: -1})
	if got.Answered() {
		t.Error("Answered() = true for a refused connection")
	}
}
