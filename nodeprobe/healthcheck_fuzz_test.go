package nodeprobe

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"testing"
)

// kubeProxyHealthCheckBody writes the body of kube-proxy's health check node port as service_health.go does: a
// dedented, tab-indented literal, no trailing newline; serviceProxyHealthy since 1.27.
func kubeProxyHealthCheckBody(ns, name string, count int, proxyHealthy *bool) string {
	b := fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d", ns, name, count)
	if proxyHealthy != nil {
		b += fmt.Sprintf(",\n\t\"serviceProxyHealthy\": %v", *proxyHealthy)
	}
	return b + "\n}"
}

// FuzzHealthCheckResponse feeds raw answers of a health check node port — status line, headers (the
// X-Load-Balancing-Endpoint-Weight header among them) and body — to the parser, seeded with kube-proxy's real
// answers of every release (docs/kube-proxy.md, Health check node port).
func FuzzHealthCheckResponse(f *testing.F) {
	yes, no := true, false
	for _, count := range []int{0, 1, 3} {
		for _, healthy := range []*bool{nil, &yes, &no} {
			status := 503
			if count > 0 && (healthy == nil || *healthy) {
				status = 200
			}
			body := kubeProxyHealthCheckBody("kubelings", "web", count, healthy)
			header := kubeProxyJSONHeaders
			if healthy != nil {
				header = append(header[:len(header):len(header)], [2]string{"X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count)})
			}
			f.Add(rawAnswer(status, header, body), "kubelings", "web")
		}
	}
	// A Service being removed: 200, no body. Another Service's answer on a reallocated port.
	f.Add(rawAnswer(200, kubeProxyJSONHeaders, ""), "kubelings", "web")
	f.Add(rawAnswer(200, kubeProxyJSONHeaders, kubeProxyHealthCheckBody("other", "web", 1, &yes)), "kubelings", "web")
	f.Fuzz(func(t *testing.T, raw []byte, namespace, name string) {
		resp, ok := readRaw(raw)
		if !ok {
			return
		}
		h := parseHealthCheck(resp, namespace, name)
		checkHealthCheck(t, resp, h, namespace, name)
		again, _ := readRaw(raw)
		if h2 := parseHealthCheck(again, namespace, name); !reflect.DeepEqual(h2, h) {
			t.Fatalf("non-deterministic: %+v vs %+v", h, h2)
		}
	})
}

// FuzzHealthCheckBody fuzzes the body and the weight header value directly.
func FuzzHealthCheckBody(f *testing.F) {
	yes := true
	f.Add(503, "0", []byte(kubeProxyHealthCheckBody("kubelings", "web", 0, &yes)))
	f.Add(200, "2", []byte(kubeProxyHealthCheckBody("kubelings", "web", 2, &yes)))
	f.Add(200, "", []byte(kubeProxyHealthCheckBody("kubelings", "web", 1, nil)))
	f.Add(503, "-1", []byte(kubeProxyHealthCheckBody("kubelings", "web", -1, &yes)))
	f.Fuzz(func(t *testing.T, status int, weight string, body []byte) {
		header := http.Header{}
		if weight != "" {
			header.Set("X-Load-Balancing-Endpoint-Weight", weight)
		}
		resp := response{status: status, header: header, body: body}
		checkHealthCheck(t, resp, parseHealthCheck(resp, "kubelings", "web"), "kubelings", "web")
	})
}

func checkHealthCheck(t *testing.T, resp response, h HealthCheck, namespace, name string) {
	t.Helper()
	if !isProbeResult(h.Result) {
		t.Fatalf("result %q is not in the closed set", h.Result)
	}
	if h.StatusCode != resp.status {
		t.Fatalf("status %d, answer had %d", h.StatusCode, resp.status)
	}
	if h.Weight < -1 {
		t.Fatalf("weight %d", h.Weight)
	}
	if w := resp.header.Get("X-Load-Balancing-Endpoint-Weight"); w == "" && h.Weight != -1 {
		t.Fatalf("weight %d without the header", h.Weight)
	}
	switch h.Result {
	case ResultOK, ResultUnavailable:
		if h.Err != nil {
			t.Fatalf("%s with an error: %v", h.Result, h.Err)
		}
		if want := map[Result]int{ResultOK: 200, ResultUnavailable: 503}[h.Result]; resp.status != want {
			t.Fatalf("%s from status %d", h.Result, resp.status)
		}
		// A count is exported as a gauge and compared with the API's: it is never negative.
		if h.LocalEndpoints < 0 {
			t.Fatalf("%s with %d local endpoints", h.Result, h.LocalEndpoints)
		}
	case ResultInvalid, ResultEmpty:
		if h.Err == nil {
			t.Fatalf("%s without a reason", h.Result)
		}
		if h.LocalEndpoints != -1 || h.ServiceProxyHealthy != nil {
			t.Fatalf("%s but reports %d endpoints", h.Result, h.LocalEndpoints)
		}
		if h.Result == ResultEmpty && resp.status != 200 {
			t.Fatalf("empty from status %d", resp.status)
		}
	default:
		t.Fatalf("a parsed answer cannot be %s", h.Result)
	}
}

// Answered is true when the port gave an HTTP status: a load balancer checking it sees that status. Declared
// here, in the package, for this package's tests of both kinds.
func (h HealthCheck) Answered() bool { return h.StatusCode != 0 }
