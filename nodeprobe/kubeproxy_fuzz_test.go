package nodeprobe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the zones below must exist on a fresh CI machine without the tzdata package
)

// rawAnswer frames an HTTP/1.1 answer the way Go's net/http server (kube-proxy's) writes it.
func rawAnswer(status int, header [][2]string, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for _, h := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	fmt.Fprintf(&b, "Date: Mon, 30 Nov 2026 11:45:14 GMT\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	return b.Bytes()
}

var kubeProxyJSONHeaders = [][2]string{{"Content-Type", "application/json"}, {"X-Content-Type-Options", "nosniff"}}

// readRaw turns a peer's raw bytes into the bounded response probes parse, through the same net/http reader the
// transport uses. ok is false when net/http itself rejects the bytes (the probe then sees a transport error).
func readRaw(raw []byte) (response, bool) {
	req, _ := http.NewRequest(http.MethodGet, "http://192.0.2.1:10256/", nil)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
	if err != nil {
		return response{}, false
	}
	defer resp.Body.Close()
	r, err := readBounded(resp)
	return r, err == nil
}

// kubeProxyBodySeeds are kube-proxy's /healthz and /livez bodies of every format (docs/kube-proxy.md, Health
// server, and the literal bodies in kubeproxy_test.go): ≤1.27 Go time.String() with and without a monotonic suffix and the zero
// time, 1.28–1.32 with nodeEligible, ≥1.33 RFC 3339 with healthy and the per-family status map.
var kubeProxyBodySeeds = []string{
	`{"lastUpdated": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5","currentTime": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5"}`,
	`{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2023-05-01 10:00:00.5 +0000 UTC m=+120.000000001"}`,
	`{"lastUpdated": "2024-02-29 23:59:59.999999999 +0100 CET m=+86400.25","currentTime": "2024-02-29 23:59:59.999999999 +0100 CET m=+86400.25", "nodeEligible": true}`,
	`{"lastUpdated": "2024-03-01 08:00:00 +0000 UTC m=+1.000000001","currentTime": "2024-03-01 08:01:00 +0000 UTC m=+61.000000001", "nodeEligible": false}`,
	`{"lastUpdated": "2024-03-01 13:45:00 +0545 +0545","currentTime": "2024-03-01 13:46:00 +0545 +0545"}`,
	`{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-30T11:45:14.71Z","healthy":true}}}`,
	`{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-11-30T11:45:14.71Z","healthy":true}`,
	`{"lastUpdated":"2026-11-30T17:30:14.71+05:45","currentTime":"2026-11-30T17:32:14.71+05:45","healthy":false}`,
}

func isProbeResult(r Result) bool { return slices.Contains(Results, r) }

// FuzzKubeProxyHealthResponse feeds raw answers of kube-proxy's health server (status line, headers, body) to the
// /healthz and /livez parser.
func FuzzKubeProxyHealthResponse(f *testing.F) {
	for _, body := range kubeProxyBodySeeds {
		for _, status := range []int{200, 503} {
			f.Add(rawAnswer(status, kubeProxyJSONHeaders, body), true)
			f.Add(rawAnswer(status, kubeProxyJSONHeaders, body), false)
		}
	}
	f.Add(rawAnswer(404, [][2]string{{"Content-Type", "text/plain; charset=utf-8"}}, "404 page not found\n"), true)
	f.Add(rawAnswer(200, nil, ""), false)
	f.Fuzz(func(t *testing.T, raw []byte, healthz bool) {
		endpoint := PathLivez
		if healthz {
			endpoint = PathHealthz
		}
		resp, ok := readRaw(raw)
		if !ok {
			return
		}
		k := parseKubeProxy(resp, endpoint)
		checkKubeProxyHealth(t, resp, k)
		again, _ := readRaw(raw)
		if k2 := parseKubeProxy(again, endpoint); !reflect.DeepEqual(k2, k) {
			t.Fatalf("non-deterministic: %+v vs %+v", k, k2)
		}
	})
}

// FuzzKubeProxyHealthBody fuzzes the body alone: most of its inputs get past net/http's framing.
func FuzzKubeProxyHealthBody(f *testing.F) {
	for _, body := range kubeProxyBodySeeds {
		f.Add(200, []byte(body))
		f.Add(503, []byte(body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := response{status: status, header: http.Header{}, body: body}
		checkKubeProxyHealth(t, resp, parseKubeProxy(resp, "healthz"))
	})
}

func checkKubeProxyHealth(t *testing.T, resp response, k KubeProxyHealth) {
	t.Helper()
	if !isProbeResult(k.Result) {
		t.Fatalf("result %q is not in the closed set", k.Result)
	}
	if k.StatusCode != resp.status {
		t.Fatalf("status %d, answer had %d", k.StatusCode, resp.status)
	}
	switch k.Result {
	case ResultOK, ResultUnavailable:
		if k.Err != nil {
			t.Fatalf("%s with an error: %v", k.Result, k.Err)
		}
		if want := map[Result]int{ResultOK: 200, ResultUnavailable: 503}[k.Result]; resp.status != want {
			t.Fatalf("%s from status %d", k.Result, resp.status)
		}
		for name, ts := range map[string]time.Time{"lastUpdated": k.LastUpdated, "currentTime": k.CurrentTime} {
			// A parsed time survives the format ≥1.33 writes: what the exporter exports is what kube-proxy said.
			back, err := ParseKubeProxyTime(ts.Format(time.RFC3339Nano))
			if ts.Year() >= 0 && ts.Year() <= 9999 && (err != nil || !back.Equal(ts)) {
				t.Fatalf("%s %v does not round-trip: %v %v", name, ts, back, err)
			}
		}
	case ResultInvalid:
		if k.Err == nil {
			t.Fatalf("invalid without a reason")
		}
	default:
		t.Fatalf("a parsed answer cannot be %s", k.Result)
	}
	if k.Up() != (k.Result == ResultOK) {
		t.Fatalf("Up() = %v for %s", k.Up(), k.Result)
	}
}

// timeZones covers every shape of zone abbreviation Go's time.String() prints: letters (UTC, CET, ChST), numeric
// ("+0545", "-03", "+1030"), half and quarter hours, offsets beyond ±12 h, DST with a negative save (Dublin).
var timeZones = []string{
	"UTC", "Local", "Europe/Berlin", "America/New_York", "America/Los_Angeles", "Asia/Kathmandu", "America/Sao_Paulo",
	"Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Pacific/Guam", "Africa/Casablanca",
	"Asia/Tehran", "Europe/Dublin", "Pacific/Kiritimati", "Etc/GMT+12", "Etc/GMT-14", "America/Caracas",
	"Antarctica/Troll", "Europe/Moscow", "Asia/Dhaka", "Pacific/Apia", "America/Noronha", "Atlantic/Azores",
	"Asia/Shanghai", "Europe/London", "Australia/Eucla", "Asia/Yangon", "Pacific/Marquesas", "America/Scoresbysund",
	"Asia/Pyongyang", "Africa/Johannesburg", "Pacific/Honolulu",
}

// FuzzParseKubeProxyTime checks the time parser on arbitrary strings: never a panic, and whatever it accepts
// reads the same instant back from RFC 3339.
func FuzzParseKubeProxyTime(f *testing.F) {
	for _, s := range []string{
		"2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5", "0001-01-01 00:00:00 +0000 UTC",
		"2024-02-29 23:59:59.999999999 +0100 CET m=+86400.25", "2024-03-01 13:45:00 +0545 +0545",
		"2024-03-01 09:00:00 -0300 -03", "2026-11-30T11:45:14.71Z", "0001-01-01T00:00:00Z", "2026-11-30T17:30:14.71+05:45",
		"2026-11-30 11:45:14.71 +0000 UTC m=-0.000000001", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseKubeProxyTime(s)
		if err != nil {
			if !ts.IsZero() {
				t.Fatalf("error %v with a time %v", err, ts)
			}
			return
		}
		if ts.Year() < 0 || ts.Year() > 9999 {
			return // RFC 3339 cannot write it; kube-proxy could not have either
		}
		back, err := ParseKubeProxyTime(ts.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(ts) {
			t.Fatalf("%q → %v does not round-trip: %v %v", s, ts, back, err)
		}
	})
}

// FuzzKubeProxyTimeFormats builds instants kube-proxy could report, in every zone shape, and checks that both
// formats kube-proxy has written — time.String() (≤1.32, with or without the monotonic suffix) and RFC 3339
// (≥1.33, json.Marshal) — parse back to the same instant.
func FuzzKubeProxyTimeFormats(f *testing.F) {
	f.Add(int64(1700000000), int64(123456789), uint8(0), 3.5)
	f.Add(int64(1709251200), int64(0), uint8(5), 86400.25)
	f.Add(int64(4102444800), int64(999999999), uint8(7), -1.0)
	f.Add(int64(0), int64(1), uint8(9), 0.0)
	f.Fuzz(func(t *testing.T, sec, nsec int64, zone uint8, mono float64) {
		// kube-proxy reports sync times of a running process: 1970 to 2200 (before 1900 zones had second offsets
		// time.String() cannot write).
		sec = int64(uint64(sec) % uint64(7258118400))
		nsec = int64(uint64(nsec) % 1e9)
		loc, err := time.LoadLocation(timeZones[int(zone)%len(timeZones)])
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Unix(sec, nsec).In(loc)
		forms := []string{ts.String(), ts.Format(time.RFC3339Nano)}
		if !math.IsNaN(mono) && !math.IsInf(mono, 0) {
			forms = append(forms, ts.String()+" m="+signed(mono))
		}
		js, err := json.Marshal(struct {
			T time.Time `json:"t"`
		}{ts})
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			T string `json:"t"`
		}
		if err := json.Unmarshal(js, &raw); err != nil {
			t.Fatal(err)
		}
		forms = append(forms, raw.T)
		for _, s := range forms {
			got, err := ParseKubeProxyTime(s)
			if err != nil || !got.Equal(ts) {
				t.Errorf("%q (%s) → %v, %v; want %v", s, loc, got, err, ts)
			}
		}
		// The zero time, as both formats write it, stays IsZero: it is "never synced", not a date.
		for _, s := range []string{time.Time{}.String(), time.Time{}.Format(time.RFC3339Nano)} {
			if got, err := ParseKubeProxyTime(s); err != nil || !got.IsZero() {
				t.Errorf("zero time %q → %v, %v", s, got, err)
			}
		}
	})
}

// signed writes a monotonic reading as time.String() does: an explicit sign, nine decimals.
func signed(v float64) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', 9, 64)
	if v < 0 {
		return "-" + s
	}
	return "+" + s
}
