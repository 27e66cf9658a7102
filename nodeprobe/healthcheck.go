package nodeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// HealthCheck is one answer of a Service's health check node port (docs/kube-proxy.md, Health check node port).
type HealthCheck struct {
	Result     Result
	StatusCode int // 0 when no HTTP answer came
	// LocalEndpoints is what kube-proxy reported; -1 when the answer had no usable body.
	LocalEndpoints int
	// ServiceProxyHealthy is kube-proxy's own health as it reported it (since 1.27); nil when absent.
	ServiceProxyHealthy *bool
	// Weight is the X-Load-Balancing-Endpoint-Weight header (since 1.28); -1 when absent.
	Weight   int
	Duration time.Duration
	Err      error // why the result is not ok or unavailable; nil otherwise
}

type healthCheckBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      *int  `json:"localEndpoints"`
	ServiceProxyHealthy *bool `json:"serviceProxyHealthy"`
}

// ProbeHealthCheckNodePort asks the health check node port of Service namespace/name on addr, as a load
// balancer would. kube-proxy answers on any path; "/" is what most cloud load balancers ask.
func ProbeHealthCheckNodePort(ctx context.Context, client *http.Client, addr string, port int32, namespace, name string) HealthCheck {
	url := "http://" + net.JoinHostPort(addr, strconv.Itoa(int(port))) + "/"
	return probe(ctx, client, "health check", url,
		func(r Result, err error) HealthCheck {
			return HealthCheck{Result: r, Err: err, LocalEndpoints: -1, Weight: -1}
		},
		func(resp response) HealthCheck { return parseHealthCheck(resp, namespace, name) })
}

// finish implements probeResult.
func (h *HealthCheck) finish(took time.Duration, what string) {
	h.Duration = took
	if h.Err != nil {
		h.Err = fmt.Errorf("%s: %w", what, h.Err)
	}
}

func parseHealthCheck(resp response, namespace, name string) HealthCheck {
	h := HealthCheck{StatusCode: resp.status, LocalEndpoints: -1, Weight: -1}
	if w := resp.header.Get("X-Load-Balancing-Endpoint-Weight"); w != "" {
		if n, err := strconv.Atoi(w); err == nil && n >= 0 {
			h.Weight = n
		}
	}
	if resp.status != http.StatusOK && resp.status != http.StatusServiceUnavailable {
		h.Result, h.Err = ResultInvalid, fmt.Errorf("unexpected status %d", resp.status)
		return h
	}
	if resp.tooLarge {
		h.Result, h.Err = ResultInvalid, fmt.Errorf("body larger than %d bytes", MaxBodyBytes)
		return h
	}
	if len(bytes.TrimSpace(resp.body)) == 0 {
		if resp.status == http.StatusOK {
			// kube-proxy answers 200 with no body while it removes the Service: unknown, not healthy.
			h.Result, h.Err = ResultEmpty, fmt.Errorf("status 200 with an empty body")
			return h
		}
		h.Result, h.Err = ResultInvalid, fmt.Errorf("status %d with an empty body", resp.status)
		return h
	}
	var body healthCheckBody
	if err := json.Unmarshal(resp.body, &body); err != nil {
		h.Result, h.Err = ResultInvalid, fmt.Errorf("decoding body: %w", err)
		return h
	}
	if body.LocalEndpoints == nil {
		h.Result, h.Err = ResultInvalid, fmt.Errorf("body has no localEndpoints field")
		return h
	}
	if *body.LocalEndpoints < 0 {
		// kube-proxy counts endpoints; a negative count is not kube-proxy speaking, and must not become a gauge.
		h.Result, h.Err = ResultInvalid, fmt.Errorf("negative localEndpoints %d", *body.LocalEndpoints)
		return h
	}
	if body.Service.Namespace != namespace || body.Service.Name != name {
		// Another Service answers on this port: the port was reallocated, or this is not kube-proxy.
		h.Result, h.Err = ResultInvalid, fmt.Errorf("answer is for %s/%s", body.Service.Namespace, body.Service.Name)
		return h
	}
	h.LocalEndpoints, h.ServiceProxyHealthy = *body.LocalEndpoints, body.ServiceProxyHealthy
	if resp.status == http.StatusOK {
		h.Result = ResultOK
	} else {
		h.Result = ResultUnavailable
	}
	return h
}
