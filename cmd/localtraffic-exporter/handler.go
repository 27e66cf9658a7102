package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

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
	prometheus.WrapRegistererWith(prometheus.Labels{"node": opts.nodeName}, self).MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector(collector.Namespace),
	)
	return &metricsHandler{
		// The node's name is built into the exporter's descriptors once, not wrapped onto every series of
		// every scrape (which allocates a descriptor per series).
		exporter: exp.WithNode(opts.nodeName), self: self,
		// Without the header (a curl), allow a few probes' worth of time.
		maxWait:  2 * opts.probeTimeout,
		offset:   opts.scrapeTimeoutOff,
		inFlight: make(chan struct{}, opts.maxRequests),
		logger:   logger,
	}
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

	// The exporter's series come from its direct exposition, not through a Registry (collector/exposition.go:
	// a Registry builds every series twice and hashes it, and a scrape's garbage sets the RSS); the process's
	// own few are a Registry's. Their names never overlap, so they are simply put side by side.
	scrape := h.exporter.Exposition(ctx)
	both := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		own, errSelf := h.self.Gather()
		ours, err := scrape.Gather()
		mfs := append(own, ours...)
		slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
		return mfs, errors.Join(errSelf, err)
	})
	promhttp.HandlerFor(both, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slogPrinter{h.logger},
	}).ServeHTTP(w, r)
}

// slogPrinter adapts slog to promhttp's Println-style error log.
type slogPrinter struct{ logger *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.logger.Error("serving metrics", "err", v) }
