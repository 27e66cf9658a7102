package nodeprobe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// kube-proxy's health server (/healthz, /livez) as each release wrote it (pkg/proxy/healthcheck/proxier_health.go,
// later proxy_health.go):
//   ≤1.27:     fmt.Fprintf(`{"lastUpdated": %q,"currentTime": %q}`, lastUpdated, currentTime) with time.Time values,
//              so Go's time.String() format, monotonic suffix " m=+…" included.
//   1.28–1.32: /healthz adds `, "nodeEligible": %v`; /livez unchanged.
//   ≥1.33:     json.Marshal of {lastUpdated, currentTime, nodeEligible (healthz only), healthy, status{family}}:
//              RFC 3339 times.
// On 200 lastUpdated is rewritten to the current time; only a 503 carries the real last sync.

// kubeProxyHealthAnswer is one state of kube-proxy's health server.
type kubeProxyHealthAnswer struct {
	minor        int
	status       int
	lastUpdated  time.Time // what the body says
	currentTime  time.Time
	nodeEligible bool
	healthy      bool
}

// proxyHealth133 mirrors ≥1.33's ProxyHealth struct; its json.Marshal output is the body.
type proxyHealth133 struct {
	LastUpdated  time.Time                   `json:"lastUpdated"`
	CurrentTime  time.Time                   `json:"currentTime"`
	NodeEligible *bool                       `json:"nodeEligible,omitempty"`
	Healthy      bool                        `json:"healthy"`
	Status       map[string]proxierHealth133 `json:"status,omitempty"`
}

type proxierHealth133 struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

func (a kubeProxyHealthAnswer) body(endpoint nodeprobe.KubeProxyPath) string {
	switch {
	case a.minor <= 27:
		return fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q}`, a.lastUpdated, a.currentTime)
	case a.minor <= 32:
		if endpoint == "healthz" {
			return fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q, "nodeEligible": %v}`, a.lastUpdated, a.currentTime, a.nodeEligible)
		}
		return fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q}`, a.lastUpdated, a.currentTime)
	}
	h := proxyHealth133{
		LastUpdated: a.lastUpdated, CurrentTime: a.currentTime, Healthy: a.healthy,
		Status: map[string]proxierHealth133{"IPv4": {LastUpdated: a.lastUpdated, Healthy: a.healthy}, "IPv6": {LastUpdated: a.lastUpdated, Healthy: a.healthy}},
	}
	if endpoint == "healthz" {
		h.NodeEligible = &a.nodeEligible
	}
	b, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (a kubeProxyHealthAnswer) handler(endpoint nodeprobe.KubeProxyPath) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+string(endpoint) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body(endpoint))
	})
}

func probeKubeProxyHandler(t *testing.T, h http.Handler, endpoint nodeprobe.KubeProxyPath) nodeprobe.KubeProxyHealth {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	var k nodeprobe.KubeProxyHealth
	withinGuard(t, "kube-proxy probe", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		k = nodeprobe.ProbeKubeProxy(ctx, nodeprobe.NewHTTPClient(), srv.Listener.Addr().String(), endpoint)
	})
	return k
}

func checkBoolPtr(t *testing.T, field string, got, want *bool) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Errorf("%s = %v, want absent (nil)", field, *got)
	case want != nil && got == nil:
		t.Errorf("%s absent, want %v", field, *want)
	case want != nil && *got != *want:
		t.Errorf("%s = %v, want %v", field, *got, *want)
	}
}

func TestKubeProxyVersions(t *testing.T) {
	// time.Now() carries a monotonic reading, so ≤1.32 bodies get the real " m=+…" suffix.
	now := time.Now()
	lastSync := now.Add(-90 * time.Second)
	tests := []struct {
		name     string
		endpoint nodeprobe.KubeProxyPath
		answer   kubeProxyHealthAnswer
		want     nodeprobe.KubeProxyHealth
	}{
		{"1.26 healthz 200", "healthz", kubeProxyHealthAnswer{minor: 26, status: 200, lastUpdated: now, currentTime: now},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultOK, StatusCode: 200, LastUpdated: now}},
		{"1.27 healthz 503", "healthz", kubeProxyHealthAnswer{minor: 27, status: 503, lastUpdated: lastSync, currentTime: now},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync}},
		{"1.27 livez 200", "livez", kubeProxyHealthAnswer{minor: 27, status: 200, lastUpdated: now, currentTime: now},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultOK, StatusCode: 200, LastUpdated: now}},
		{"1.27 livez 503", "livez", kubeProxyHealthAnswer{minor: 27, status: 503, lastUpdated: lastSync, currentTime: now},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync}},
		{"1.28 healthz 200 eligible", "healthz", kubeProxyHealthAnswer{minor: 28, status: 200, lastUpdated: now, currentTime: now, nodeEligible: true},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultOK, StatusCode: 200, LastUpdated: now, NodeEligible: boolPtr(true)}},
		{"1.31 healthz 503 node not eligible", "healthz", kubeProxyHealthAnswer{minor: 31, status: 503, lastUpdated: lastSync, currentTime: now, nodeEligible: false},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync, NodeEligible: boolPtr(false)}},
		{"1.32 livez 503", "livez", kubeProxyHealthAnswer{minor: 32, status: 503, lastUpdated: lastSync, currentTime: now},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync}},
		{"1.33 healthz 200", "healthz", kubeProxyHealthAnswer{minor: 33, status: 200, lastUpdated: now, currentTime: now, nodeEligible: true, healthy: true},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultOK, StatusCode: 200, LastUpdated: now, NodeEligible: boolPtr(true), Healthy: boolPtr(true)}},
		{"1.37 healthz 503 draining but synced", "healthz", kubeProxyHealthAnswer{minor: 37, status: 503, lastUpdated: lastSync, currentTime: now, nodeEligible: false, healthy: true},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync, NodeEligible: boolPtr(false), Healthy: boolPtr(true)}},
		{"1.37 livez 503 not synced", "livez", kubeProxyHealthAnswer{minor: 37, status: 503, lastUpdated: lastSync, currentTime: now, healthy: false},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultUnavailable, StatusCode: 503, LastUpdated: lastSync, Healthy: boolPtr(false)}},
		{"1.37 livez 200", "livez", kubeProxyHealthAnswer{minor: 37, status: 200, lastUpdated: now, currentTime: now, healthy: true},
			nodeprobe.KubeProxyHealth{Result: nodeprobe.ResultOK, StatusCode: 200, LastUpdated: now, Healthy: boolPtr(true)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probeKubeProxyHandler(t, tc.answer.handler(tc.endpoint), tc.endpoint)
			t.Logf("body: %s", tc.answer.body(tc.endpoint))
			if got.Result != tc.want.Result || got.StatusCode != tc.want.StatusCode || got.Endpoint != tc.endpoint {
				t.Errorf("got %s result %q status %d (err %v), want %s %q %d",
					got.Endpoint, got.Result, got.StatusCode, got.Err, tc.endpoint, tc.want.Result, tc.want.StatusCode)
			}
			if got.Err != nil {
				t.Errorf("err = %v for a well-formed answer", got.Err)
			}
			// Equal, not ==: the parsed time has no monotonic reading and maybe another Location.
			if !got.LastUpdated.Equal(tc.want.LastUpdated) {
				t.Errorf("lastUpdated = %v, want %v", got.LastUpdated, tc.want.LastUpdated)
			}
			if !got.CurrentTime.Equal(tc.answer.currentTime) {
				t.Errorf("currentTime = %v, want %v", got.CurrentTime, tc.answer.currentTime)
			}
			checkBoolPtr(t, "nodeEligible", got.NodeEligible, tc.want.NodeEligible)
			checkBoolPtr(t, "healthy", got.Healthy, tc.want.Healthy)
			if got.Up() != (tc.want.StatusCode == 200) {
				t.Errorf("Up() = %v with status %d", got.Up(), got.StatusCode)
			}
		})
	}
}

// TestKubeProxyLiteralBodies feeds the bodies as docs/kube-proxy.md (Health server) and old releases write them.
func TestKubeProxyLiteralBodies(t *testing.T) {
	tests := []struct {
		name         string
		status       int
		body         string
		want         nodeprobe.Result
		lastUpdated  time.Time
		nodeEligible *bool
		healthy      *bool
	}{
		{"≤1.27 with monotonic suffix", 200,
			`{"lastUpdated": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5","currentTime": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5"}`,
			nodeprobe.ResultOK, time.Date(2023, 5, 1, 10, 0, 0, 123456789, time.UTC), nil, nil},
		{"≤1.27 503 never synced (zero time)", 503,
			`{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2023-05-01 10:00:00.5 +0000 UTC m=+120.000000001"}`,
			nodeprobe.ResultUnavailable, time.Time{}, nil, nil},
		{"1.28–1.32 healthz", 200,
			`{"lastUpdated": "2024-02-29 23:59:59.999999999 +0100 CET m=+86400.25","currentTime": "2024-02-29 23:59:59.999999999 +0100 CET m=+86400.25", "nodeEligible": true}`,
			nodeprobe.ResultOK, time.Date(2024, 2, 29, 22, 59, 59, 999999999, time.UTC), boolPtr(true), nil},
		{"1.28–1.32 healthz not eligible", 503,
			`{"lastUpdated": "2024-03-01 08:00:00 +0000 UTC m=+1.000000001","currentTime": "2024-03-01 08:01:00 +0000 UTC m=+61.000000001", "nodeEligible": false}`,
			nodeprobe.ResultUnavailable, time.Date(2024, 3, 1, 8, 0, 0, 0, time.UTC), boolPtr(false), nil},
		{"real v1.37.2", 200,
			`{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true}}}`,
			nodeprobe.ResultOK, time.Date(2026, 11, 30, 11, 45, 14, 710000000, time.UTC), boolPtr(true), boolPtr(true)},
		{"≥1.33 never synced, no status map", 200,
			`{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-11-30T11:45:14.71Z","healthy":true}`,
			nodeprobe.ResultOK, time.Time{}, nil, boolPtr(true)},
		{"≥1.33 local offset", 503,
			`{"lastUpdated":"2026-11-30T17:30:14.71+05:45","currentTime":"2026-11-30T17:32:14.71+05:45","healthy":false}`,
			nodeprobe.ResultUnavailable, time.Date(2026, 11, 30, 11, 45, 14, 710000000, time.UTC), nil, boolPtr(false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probeKubeProxyHandler(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}), "livez")
			if got.Result != tc.want || got.StatusCode != tc.status {
				t.Errorf("result %q status %d (err %v), want %q %d", got.Result, got.StatusCode, got.Err, tc.want, tc.status)
			}
			if !got.LastUpdated.Equal(tc.lastUpdated) {
				t.Errorf("lastUpdated = %v, want %v", got.LastUpdated, tc.lastUpdated)
			}
			if tc.lastUpdated.IsZero() && !got.LastUpdated.IsZero() {
				t.Errorf("lastUpdated = %v: kube-proxy's zero time must stay IsZero() so it is not exported as a date", got.LastUpdated)
			}
			checkBoolPtr(t, "nodeEligible", got.NodeEligible, tc.nodeEligible)
			checkBoolPtr(t, "healthy", got.Healthy, tc.healthy)
		})
	}
}

func TestKubeProxyMalformedAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
	}{
		{"empty 200", 200, ""},
		{"empty 503", 503, ""},
		{"no currentTime", 200, `{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true}`},
		{"no lastUpdated", 200, `{"currentTime":"2026-11-30T11:45:14.71Z","healthy":true}`},
		{"time not a time", 200, `{"lastUpdated":"yesterday","currentTime":"2026-11-30T11:45:14.71Z"}`},
		{"time a number", 200, `{"lastUpdated":1764503114,"currentTime":1764503114}`},
		{"truncated", 200, `{"lastUpdated": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5","curr`},
		{"apiserver-style ok", 200, "ok"},
		{"500 with a valid body", 500, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","healthy":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probeKubeProxyHandler(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}), "healthz")
			if got.Result != nodeprobe.ResultInvalid {
				t.Errorf("result = %q, want invalid", got.Result)
			}
			if got.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", got.StatusCode, tc.status)
			}
			if got.Err == nil {
				t.Error("no error for a malformed answer: the log line would have no reason")
			}
			if got.Up() {
				t.Error("Up() = true for an answer that is not kube-proxy's")
			}
		})
	}
}

func TestParseKubeProxyTime(t *testing.T) {
	base := time.Date(2023, 5, 1, 10, 0, 0, 123456789, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		// ≥1.33: RFC 3339 as encoding/json writes time.Time.
		{in: "2026-11-30T11:45:14.71Z", want: time.Date(2026, 11, 30, 11, 45, 14, 710000000, time.UTC)},
		{in: "2026-11-30T11:45:14Z", want: time.Date(2026, 11, 30, 11, 45, 14, 0, time.UTC)},
		{in: "2026-11-30T12:45:14.123456789+01:00", want: time.Date(2026, 11, 30, 11, 45, 14, 123456789, time.UTC)},
		{in: "0001-01-01T00:00:00Z", want: time.Time{}},
		// ≤1.32: Go's time.String(), with and without a monotonic reading.
		{in: "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5", want: base},
		{in: "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.500000001", want: base},
		{in: "2023-05-01 10:00:00.123456789 +0000 UTC m=-1.25", want: base},
		{in: "2023-05-01 10:00:00.123456789 +0000 UTC", want: base},
		{in: "2023-05-01 10:00:00 +0000 UTC m=+0.000000001", want: base.Truncate(time.Second)},
		{in: "0001-01-01 00:00:00 +0000 UTC", want: time.Time{}},
		{in: "2023-05-01 12:00:00.123456789 +0200 CEST m=+3.5", want: base},
		{in: "2023-05-01 05:00:00.123456789 -0500 CDT", want: base},
		// tzdata zones without a letter abbreviation print a numeric one.
		{in: "2023-05-01 14:00:00.123456789 +0400 +04 m=+3.5", want: base},
		{in: "2023-05-01 15:45:00.123456789 +0545 +0545 m=+3.5", want: base},
		{in: "2023-05-01 13:30:00.123456789 +0330 +0330", want: base},
		// Not times.
		{in: "", wantErr: true},
		{in: "yesterday", wantErr: true},
		{in: "1764503114", wantErr: true},
		{in: "2023-05-01", wantErr: true},
		{in: " m=+3.5", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := nodeprobe.ParseKubeProxyTime(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Errorf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !got.Equal(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestParseKubeProxyTimeRoundTrip: whatever zone kube-proxy's host runs in, what time.String() printed (the ≤1.32
// format) parses back to the same instant. kube-proxy stamps time.Now() in the Local zone of its container.
func TestParseKubeProxyTimeRoundTrip(t *testing.T) {
	instant := time.Date(2023, 5, 1, 10, 0, 0, 123456789, time.UTC)
	zones := []*time.Location{
		time.UTC,
		time.FixedZone("CEST", 2*3600),
		time.FixedZone("IST", 5*3600+1800),
		time.FixedZone("PDT", -7*3600),
		time.FixedZone("-03", -3*3600),         // America/Sao_Paulo's tzdata abbreviation
		time.FixedZone("+0545", 5*3600+45*60),  // Asia/Kathmandu
		time.FixedZone("+0330", 3*3600+30*60),  // Asia/Tehran
		time.FixedZone("+1245", 12*3600+45*60), // Pacific/Chatham (standard time)
		time.FixedZone("", 9*3600),             // a zone without any name: printed as "+0900 +0900"
	}
	for _, loc := range zones {
		for _, s := range []string{instant.In(loc).String(), time.Now().In(loc).String()} {
			t.Run(s, func(t *testing.T) {
				got, err := nodeprobe.ParseKubeProxyTime(s)
				if err != nil {
					t.Fatalf("kube-proxy in zone %q wrote %q: %v", loc, s, err)
				}
				// Compare against the wall-clock text itself, to the nanosecond.
				if got.UTC().Format(time.RFC3339Nano) != mustStripMonotonic(t, s).UTC().Format(time.RFC3339Nano) {
					t.Errorf("parsed %q as %v", s, got)
				}
			})
		}
	}
}

// mustStripMonotonic parses a time.String() text by an independent route: the numeric offset alone.
func mustStripMonotonic(t *testing.T, s string) time.Time {
	t.Helper()
	// "2006-01-02 15:04:05.999999999 -0700 ZONE[ m=±…]": the first three fields carry the instant.
	var date, clock, offset string
	if _, err := fmt.Sscan(s, &date, &clock, &offset); err != nil {
		t.Fatalf("splitting %q: %v", s, err)
	}
	want, err := time.Parse("2006-01-02 15:04:05.999999999 -0700", date+" "+clock+" "+offset)
	if err != nil {
		t.Fatalf("parsing %q independently: %v", s, err)
	}
	return want
}
