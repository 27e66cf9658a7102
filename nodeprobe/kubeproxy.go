package nodeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// KubeProxyPath is an endpoint of kube-proxy's health server, as named in the kube_proxy metrics' endpoint label.
type KubeProxyPath string

// kube-proxy's health endpoints (docs/kube-proxy.md, Health server).
const (
	PathHealthz KubeProxyPath = "healthz"
	PathLivez   KubeProxyPath = "livez"
)

// KubeProxyHealth is one answer of kube-proxy's health server (/healthz or /livez; docs/kube-proxy.md, Health server).
type KubeProxyHealth struct {
	Endpoint   KubeProxyPath
	Result     Result
	StatusCode int // 0 when no HTTP answer came
	// LastUpdated is the last sync kube-proxy reports. On a 200 kube-proxy rewrites it to "now"; only a 503 shows
	// the real last sync time. Zero when absent.
	LastUpdated time.Time
	CurrentTime time.Time
	// NodeEligible is /healthz's nodeEligible (1.28+); nil when absent.
	NodeEligible *bool
	// Healthy is the body's "healthy" (1.33+); nil when absent.
	Healthy  *bool
	Duration time.Duration
	Err      error
}

// Up is true when kube-proxy answered 200 with its body. A 200 with anything else is not kube-proxy speaking.
func (k KubeProxyHealth) Up() bool { return k.Result == ResultOK }

// kubeProxyBody covers every body kube-proxy has shipped: ≤1.27 {"lastUpdated","currentTime"} with Go
// time.String() values, 1.28–1.32 the same plus "nodeEligible", ≥1.33 RFC 3339 values plus "healthy" and a
// per-family "status" map (ignored here: the top-level fields summarise it).
type kubeProxyBody struct {
	LastUpdated  *string `json:"lastUpdated"`
	CurrentTime  *string `json:"currentTime"`
	NodeEligible *bool   `json:"nodeEligible"`
	Healthy      *bool   `json:"healthy"`
}

// ProbeKubeProxy asks kube-proxy's health server at hostPort for endpoint.
func ProbeKubeProxy(ctx context.Context, client *http.Client, hostPort string, endpoint KubeProxyPath) KubeProxyHealth {
	return probe(ctx, client, "kube-proxy", "http://"+hostPort+"/"+string(endpoint),
		func(r Result, err error) KubeProxyHealth {
			return KubeProxyHealth{Endpoint: endpoint, Result: r, Err: err}
		},
		func(resp response) KubeProxyHealth { return parseKubeProxy(resp, endpoint) })
}

// finish implements probeResult.
func (k *KubeProxyHealth) finish(took time.Duration, what string) {
	k.Duration = took
	if k.Err != nil {
		k.Err = fmt.Errorf("%s: %w", what, k.Err)
	}
}

func parseKubeProxy(resp response, endpoint KubeProxyPath) KubeProxyHealth {
	k := KubeProxyHealth{Endpoint: endpoint, StatusCode: resp.status}
	if resp.status != http.StatusOK && resp.status != http.StatusServiceUnavailable {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("unexpected status %d", resp.status)
		return k
	}
	if resp.tooLarge {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("body larger than %d bytes", MaxBodyBytes)
		return k
	}
	if len(bytes.TrimSpace(resp.body)) == 0 {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("status %d with an empty body", resp.status)
		return k
	}
	var body kubeProxyBody
	if err := json.Unmarshal(resp.body, &body); err != nil {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("decoding body: %w", err)
		return k
	}
	if body.LastUpdated == nil || body.CurrentTime == nil {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("body lacks lastUpdated or currentTime")
		return k
	}
	var err error
	if k.LastUpdated, err = ParseKubeProxyTime(*body.LastUpdated); err != nil {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("lastUpdated: %w", err)
		return k
	}
	if k.CurrentTime, err = ParseKubeProxyTime(*body.CurrentTime); err != nil {
		k.Result, k.Err = ResultInvalid, fmt.Errorf("currentTime: %w", err)
		return k
	}
	k.NodeEligible, k.Healthy = body.NodeEligible, body.Healthy
	if resp.status == http.StatusOK {
		k.Result = ResultOK
	} else {
		k.Result = ResultUnavailable
	}
	return k
}

// goTimeStringLayout is time.Time.String()'s layout, which kube-proxy ≤1.32 printed with %q.
const goTimeStringLayout = "2006-01-02 15:04:05.999999999 -0700 MST"

// goTimeStringNumericZoneLayout is time.Time.String() for a zone whose abbreviation is numeric
// (Asia/Kathmandu prints "+0545 +0545"), which the MST layout element does not accept.
const goTimeStringNumericZoneLayout = "2006-01-02 15:04:05.999999999 -0700 -0700"

// ParseKubeProxyTime reads both time formats kube-proxy has used: RFC 3339 (1.33+) and Go's time.String()
// (older), which may carry a monotonic clock suffix (" m=+12.345") and, for the zero time, "+0000 UTC".
func ParseKubeProxyTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if i := strings.Index(s, " m="); i >= 0 {
		s = s[:i]
	}
	if t, err := time.Parse(goTimeStringLayout, s); err == nil {
		return t, nil
	}
	// The numeric offset alone fixes the instant.
	t, err := time.Parse(goTimeStringNumericZoneLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("unrecognised time %q", s)
	}
	return t, nil
}
