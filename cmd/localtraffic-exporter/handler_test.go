package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

func TestScrapeTimeout(t *testing.T) {
	const maxWait, offset = 10 * time.Second, 500 * time.Millisecond
	tests := []struct {
		name    string
		header  string
		maxWait time.Duration
		offset  time.Duration
		want    time.Duration
	}{
		{"absent", "", maxWait, offset, maxWait},
		{"garbage", "soon", maxWait, offset, maxWait},
		{"with a unit", "10s", maxWait, offset, maxWait},
		{"zero", "0", maxWait, offset, maxWait},
		{"negative", "-3", maxWait, offset, maxWait},
		{"Prometheus default 10s", "10", maxWait, offset, 9500 * time.Millisecond},
		{"fractional", "2.5", maxWait, offset, 2 * time.Second},
		{"larger than max", "60", maxWait, offset, maxWait},
		{"much larger than max", "3600", maxWait, offset, maxWait},
		{"exactly max plus offset", "10.5", maxWait, offset, maxWait},
		{"smaller than offset: half of it", "0.3", maxWait, offset, 150 * time.Millisecond},
		{"equal to offset: half of it", "0.5", maxWait, offset, 250 * time.Millisecond},
		{"no offset", "4", maxWait, 0, 4 * time.Second},
		// Values that do not fit a time.Duration, or are not numbers at all, must not turn into a negative or
		// zero deadline (every probe would time out at once).
		{"NaN", "NaN", maxWait, offset, maxWait},
		{"NaN, no offset", "NaN", maxWait, 0, maxWait},
		{"Inf", "+Inf", maxWait, offset, maxWait},
		{"Inf, no offset", "+Inf", maxWait, 0, maxWait},
		{"beyond a Duration", "1e300", maxWait, offset, maxWait},
		{"beyond a Duration, no offset", "1e300", maxWait, 0, maxWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := scrapeTimeout(tc.header, tc.maxWait, tc.offset); got != tc.want {
				t.Errorf("scrapeTimeout(%q, %s, %s) = %s, want %s", tc.header, tc.maxWait, tc.offset, got, tc.want)
			}
		})
	}
}

// deadlineCollector is a gatherer that records the context each scrape hands it, and can hold the scrape until
// released or until that context ends. As a collector it emits no metrics of its own: the exporter adds its
// per-collector self-metrics.
type deadlineCollector struct {
	seen    chan context.Context
	release chan struct{} // nil: do not block
}

func (*deadlineCollector) Name() string                 { return "deadline" }
func (*deadlineCollector) Metrics() []*collector.Metric { return nil }
func (*deadlineCollector) Inputs() []scrape.Input       { return nil }

func (d *deadlineCollector) Gather(ctx context.Context) *scrape.State {
	d.seen <- ctx
	if d.release != nil {
		select {
		case <-d.release:
		case <-ctx.Done():
			// What a real input does when the scrape's deadline passes: it is recorded as failed.
			return &scrape.State{NodeErr: ctx.Err()}
		}
	}
	return &scrape.State{}
}

func (d *deadlineCollector) Update(st *scrape.State, _ *collector.Sink) error {
	return st.NodeErr
}

func newTestHandler(c *deadlineCollector, maxRequests int) *metricsHandler {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := options{kube: kubeview.Config{NodeName: "node-a"}, probe: nodeprobe.Config{ProbeTimeout: 5 * time.Second},
		scrapeTimeoutOff: 500 * time.Millisecond, maxRequests: maxRequests}
	return newMetricsHandler(collector.NewExporter(logger, c, c), opts, logger)
}

func getMetrics(t *testing.T, url string, header string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", header)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard only
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("scraping: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the scrape: %v", err)
	}
	return resp.StatusCode, string(body)
}

func TestMetricsHandlerDeadlineFromHeader(t *testing.T) {
	c := &deadlineCollector{seen: make(chan context.Context, 1)}
	srv := httptest.NewServer(newTestHandler(c, 10))
	defer srv.Close()

	tests := []struct {
		header string
		want   time.Duration // the scrape's timeout the handler must apply
	}{
		{"", 10 * time.Second},         // no header (a curl): 2 × probe.timeout
		{"3", 2500 * time.Millisecond}, // header minus offset
		{"60", 10 * time.Second},       // capped
	}
	for _, tc := range tests {
		t.Run("header="+tc.header, func(t *testing.T) {
			sent := time.Now()
			status, body := getMetrics(t, srv.URL, tc.header)
			answered := time.Now()
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			ctx := <-c.seen
			dl, ok := ctx.Deadline()
			if !ok {
				t.Fatal("collector context has no deadline")
			}
			// The handler set the deadline between sending and answering: bracket it exactly, no timing guess.
			if dl.Before(sent.Add(tc.want)) || dl.After(answered.Add(tc.want)) {
				t.Errorf("collector deadline is %s after the request was sent and %s after it was answered; want a timeout of %s",
					dl.Sub(sent), dl.Sub(answered), tc.want)
			}
		})
	}
}

func TestMetricsHandlerOutput(t *testing.T) {
	c := &deadlineCollector{seen: make(chan context.Context, 1)}
	srv := httptest.NewServer(newTestHandler(c, 10))
	defer srv.Close()
	status, body := getMetrics(t, srv.URL, "10")
	<-c.seen
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{
		`localtraffic_scrape_collector_success{collector="deadline",node="node-a"} 1`,
		`localtraffic_build_info{`,
		`go_goroutines{node="node-a"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// Every series carries node= the exporter's node.
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(line, `node="node-a"`) {
			t.Errorf("series without node label: %s", line)
		}
	}
}

// TestMetricsHandlerSlowCollectorGivesUpAtDeadline: a collector stuck until its context ends costs the scrape
// its deadline, not more, and the scrape still answers (with the collector marked failed).
func TestMetricsHandlerSlowCollectorGivesUpAtDeadline(t *testing.T) {
	c := &deadlineCollector{seen: make(chan context.Context, 1), release: make(chan struct{})}
	defer close(c.release)
	srv := httptest.NewServer(newTestHandler(c, 10))
	defer srv.Close()
	status, body := getMetrics(t, srv.URL, "1") // 1s minus 0.5s offset
	<-c.seen
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if !strings.Contains(body, `localtraffic_scrape_collector_success{collector="deadline",node="node-a"} 0`) {
		t.Errorf("the stuck collector is not marked failed:\n%s", body)
	}
}

func TestMetricsHandlerLimitsConcurrentScrapes(t *testing.T) {
	c := &deadlineCollector{seen: make(chan context.Context, 2), release: make(chan struct{})}
	srv := httptest.NewServer(newTestHandler(c, 1))
	defer srv.Close()

	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-c.seen // the first scrape is inside the collector, holding the only slot

	status, body := getMetrics(t, srv.URL, "")
	if status != http.StatusServiceUnavailable {
		t.Errorf("second concurrent scrape: status %d, want 503 (%s)", status, body)
	}
	close(c.release)
	if got := <-first; got != http.StatusOK {
		t.Errorf("first scrape: status %d, want 200", got)
	}
	// The slot is free again (release stays closed: the collector no longer blocks).
	if status, body := getMetrics(t, srv.URL, ""); status != http.StatusOK {
		t.Errorf("scrape after the first finished: status %d, want 200 (%s)", status, body)
	}
	<-c.seen
}

// TestMetricsHandlerNegotiates: the handler writes the text format whatever the scraper prefers (with the
// Content-Type saying so), compresses only when gzip is acceptable, keeps only the families `name[]` asks for,
// and writes each family once, in name order, the exporter's among the process's own.
func TestMetricsHandlerNegotiates(t *testing.T) {
	c := &deadlineCollector{seen: make(chan context.Context, 10)}
	srv := httptest.NewServer(newTestHandler(c, 10))
	defer srv.Close()
	get := func(path string, header http.Header) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		// A transport that leaves Content-Encoding alone: the test reads what was sent.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	protobufFirst := "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,text/plain;version=0.0.4;q=0.3"

	resp, body := get("/metrics", http.Header{"Accept": {protobufFirst}, "Accept-Encoding": {"gzip"}})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	gz, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v\n%s", err, text)
	}
	var names []string
	for _, line := range strings.Split(string(text), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(name)[0])
		}
	}
	if len(names) != len(fams) || !slices.IsSorted(names) {
		t.Errorf("families not each once in name order: %v", names)
	}
	for _, want := range []string{"go_goroutines", "localtraffic_build_info", "localtraffic_scrape_collector_success"} {
		if fams[want] == nil {
			t.Errorf("scrape lacks %s", want)
		}
	}

	resp, body = get("/metrics?name[]=localtraffic_scrape_collector_success&name[]=go_goroutines", http.Header{"Accept-Encoding": {"gzip;q=0, identity"}})
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("Content-Encoding %q though gzip was refused", ce)
	}
	var kept []string
	for _, line := range strings.Split(string(body), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			kept = append(kept, strings.Fields(name)[0])
		}
	}
	if want := []string{"go_goroutines", "localtraffic_scrape_collector_success"}; !slices.Equal(kept, want) {
		t.Errorf("name[] kept %v, want %v\n%s", kept, want, body)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                      false,
		"gzip":                  true,
		"GZIP;q=0.5":            true,
		"deflate, gzip;q=1.0":   true,
		"gzip;q=0":              false,
		"identity":              false,
		"*":                     true,
		"br;q=1, gzip ; q=0.0 ": false,
	} {
		if got := acceptsGzip([]string{header}); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}
