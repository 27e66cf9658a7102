package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/expfmt"

	"github.com/localtraffic/localtraffic-exporter/collector"
)

// metricsHandler serves /metrics. Each scrape gets its own registry bound to a context whose deadline comes
// from Prometheus' X-Prometheus-Scrape-Timeout-Seconds header, so that every probe gives up in time for the
// answer to reach Prometheus (blackbox_exporter's approach).
type metricsHandler struct {
	exporter *collector.Exporter
	self     *prometheus.Registry // process, Go runtime and build info: long-lived, not per scrape
	maxWait  time.Duration
	offset   time.Duration
	inFlight chan struct{}
	logger   *slog.Logger
}

func newMetricsHandler(exp *collector.Exporter, opts options, logger *slog.Logger) *metricsHandler {
	self := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"node": opts.kube.NodeName}, self).MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector(collector.Namespace),
	)
	return &metricsHandler{
		// The node's name is built into the exporter's descriptors once, not wrapped onto every series of
		// every scrape (which allocates a descriptor per series).
		exporter: exp.WithNode(opts.kube.NodeName), self: self,
		// Without the header (a curl), allow a few probes' worth of time.
		maxWait:  2 * opts.probe.ProbeTimeout,
		offset:   opts.scrapeTimeoutOff,
		inFlight: make(chan struct{}, opts.maxRequests),
		logger:   logger,
	}
}

// register adds collectors to the process' own registry, with the node's label as its others have: the Event
// writer's series.
func (h *metricsHandler) register(node string, cs ...prometheus.Collector) {
	prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, h.self).MustRegister(cs...)
}

// scrapeTimeout is the time a scrape may take: Prometheus' timeout minus offset, capped by max. A missing or
// unusable header means max.
func scrapeTimeout(header string, maxWait, offset time.Duration) time.Duration {
	if header == "" {
		return maxWait
	}
	secs, err := strconv.ParseFloat(header, 64)
	// NaN fails every comparison and ±Inf or a huge value overflows a Duration: all mean "no usable header".
	if err != nil || !(secs > 0) || secs > maxWait.Seconds()+offset.Seconds() {
		return maxWait
	}
	d := time.Duration(secs*float64(time.Second)) - offset
	if d <= 0 {
		// The offset leaves nothing: still try, with a little time, rather than fail outright.
		d = time.Duration(secs * float64(time.Second) / 2)
	}
	return min(d, maxWait)
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.inFlight <- struct{}{}:
		defer func() { <-h.inFlight }()
	default:
		http.Error(w, "too many concurrent scrapes", http.StatusServiceUnavailable)
		return
	}
	timeout := scrapeTimeout(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), h.maxWait, h.offset)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	// The exporter writes its own series as text (collector/exposition.go: it keeps each Service's series as
	// text between scrapes); the process's own few come from a Registry and go among them in name order. Only
	// the text format is offered, as kube-state-metrics does: a Prometheus that asks for protobuf
	// first (native histograms) or OpenMetrics takes the text too, and the exporter has no native histogram.
	own, err := h.self.Gather()
	if err != nil {
		h.logger.Error("gathering the process's own metrics", "err", err)
	}
	var only map[string]bool
	if names := r.URL.Query()["name[]"]; len(names) > 0 {
		only = make(map[string]bool, len(names))
		for _, n := range names {
			only[n] = true
		}
	}
	format := expfmt.NegotiateAccept(r.Header, expfmt.NewFormat(expfmt.TypeTextPlain))
	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Accept-Encoding")
	w.Header().Set("Content-Type", string(format))
	var out io.Writer = w
	if acceptsGzip(r.Header.Values("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		// No compressor kept between scrapes: collector.Gzip keeps no state (its comment says why).
		gz := collector.Gzip(w)
		defer func() {
			if err := gz.Close(); err != nil {
				h.logger.Debug("finishing the compressed scrape", "err", err)
			}
		}()
		out = gz
	}
	if err := h.exporter.WriteText(ctx, out, format, own, only); err != nil {
		// Most likely the scraper went away; the status is sent already.
		h.logger.Error("serving metrics", "err", err)
	}
}

// acceptsGzip tells whether the request's Accept-Encoding values take gzip (named, or as "*") with a q-value
// above zero; Prometheus always sends "gzip".
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for _, coding := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(coding, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name != "gzip" && name != "*" {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}
