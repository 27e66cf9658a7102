package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The program's entry points as in-process tests call them: what main wires, less what a test cannot share.

// run is the whole program but for process-wide state (see runWith).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, stdout, stderr, processHooks{routeKlog: func(*slog.Logger) {}, profileMemory: func(bool) {}})
}

// newExporter wires the collectors over a gatherer without an arrivals meter or a state file. h reads this
// host; ruleReader may be nil.
func newExporter(opts options, view exporterView, h host, ruleReader scrape.DataplaneReader, logger *slog.Logger) (*collector.Exporter, error) {
	return exporterFor(opts, newGatherer(opts, view, h, ruleReader, nil, logger), logger)
}

// newGatherer is newGathererWith without a state file.
func newGatherer(opts options, view exporterView, addrs host, ruleReader scrape.DataplaneReader, meter scrape.ArrivalsMeter, logger *slog.Logger) *scrape.Gatherer {
	return newGathererWith(opts, view, addrs, ruleReader, meter, logger, nil)
}
