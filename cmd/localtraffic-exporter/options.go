package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/endpoint"
	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/eventwriter"
	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/ciliumsvc"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// options are the command line, parsed and checked: main's own flags (the HTTP server, logging) and each
// room's Config, which registers and validates its own flags beside the code they configure.
type options struct {
	listenAddresses  []string
	systemdSocket    bool
	webConfigFile    string
	telemetryPath    string
	maxRequests      int
	enablePprof      bool // --web.enable-pprof: Go's profiles under /debug/pprof/
	scrapeTimeoutOff time.Duration
	shutdownGrace    time.Duration
	logLevel         slog.Level
	logFormat        string
	version          bool

	kube       kubeview.Config
	probe      nodeprobe.Config
	rules      kernelrules.Config
	cilium     ciliumsvc.Config
	arrivals   arrivals.FlagConfig
	scrape     scrape.Config
	collectors collector.Config // Selection zero (built in code): the default collectors
	events     eventwriter.Config
}

// defaultShutdownGrace leaves in-flight scrapes most of the DaemonSet's terminationGracePeriodSeconds (10 s)
// while the process still exits before the kubelet's SIGKILL.
const defaultShutdownGrace = 5 * time.Second

// errHelp carries the usage text for --help: printed on stdout, exit 0.
type errHelp struct{ usage string }

func (e errHelp) Error() string { return e.usage }

// errVersion stops parsing at --version: the version is printed whatever else the command line holds.
var errVersion = errors.New("version requested")

// parseOptions reads args; getenv supplies defaults (NODE_NAME). Errors are one line, fit for stderr.
//
// The flags are kingpin's, as in node_exporter and the other Prometheus exporters: exporter-toolkit's
// kingpinflag defines --web.listen-address (repeatable), --web.config.file and --web.systemd-socket exactly as
// they do, and --log.level/--log.format are promslog's (same names, values and help).
// kingpin never exits or writes here: help and version come back as values, errors as one-line errors.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	var o options
	app := kingpin.New("localtraffic-exporter",
		"Per node and per Service with externalTrafficPolicy: Local, tells whether this node serves or silently drops the Service's external traffic.")
	var usage bytes.Buffer
	app.Terminate(nil).UsageWriter(&usage).ErrorWriter(io.Discard)
	app.HelpFlag.Short('h').PreAction(func(c *kingpin.ParseContext) error {
		if err := app.UsageForContext(c); err != nil {
			return fmt.Errorf("rendering the usage: %w", err)
		}
		return errHelp{usage: usage.String()}
	})
	versionFlag := app.Flag("version", "Show application version.")
	versionFlag.PreAction(func(c *kingpin.ParseContext) error {
		// kingpin runs this before it reports arguments left over ("--version=maybe" leaves "maybe"): check here.
		if !c.EOL() {
			return fmt.Errorf("unexpected %s after --version (it takes no value)", c.Peek())
		}
		o.version = true
		return errVersion
	}).Bool()

	web := kingpinflag.AddFlags(app, endpoint.DefaultListenAddress)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default(endpoint.DefaultPath).StringVar(&o.telemetryPath)
	flagvalue.Int(app, "web.max-requests", "Scrapes served at once; more get 503.", "10", &o.maxRequests)
	app.Flag("web.enable-pprof", "Serve Go's runtime profiles (net/http/pprof) under /debug/pprof/ beside the metrics, to whoever may scrape them.").Default("false").BoolVar(&o.enablePprof)
	var logLevel string
	app.Flag("log.level", "Only log messages with the given severity or above. One of: [debug, info, warn, error]").Default("info").StringVar(&logLevel)
	app.Flag("log.format", "Output format of log messages. One of: [logfmt, json]").Default("logfmt").StringVar(&o.logFormat)
	flagvalue.Duration(app, "scrape.timeout-offset", "Subtracted from X-Prometheus-Scrape-Timeout-Seconds to leave time to answer.", "500ms", &o.scrapeTimeoutOff)
	flagvalue.Duration(app, "web.shutdown-grace-period", "On SIGTERM, how long in-flight scrapes may run on; keep it below the pod's terminationGracePeriodSeconds.",
		defaultShutdownGrace.String(), &o.shutdownGrace)

	// Each room registers its own flags.
	o.kube.RegisterFlags(app, getenv)
	o.probe.RegisterFlags(app)
	o.rules.RegisterFlags(app)
	o.cilium.RegisterFlags(app)
	o.arrivals.RegisterFlags(app)
	o.scrape.RegisterFlags(app)
	o.collectors.RegisterFlags(app)
	o.events.RegisterFlags(app, getenv)

	_, err := app.Parse(args)
	var help errHelp
	switch {
	case errors.As(err, &help):
		return o, help
	case errors.Is(err, errVersion):
		return o, nil
	case err != nil:
		return o, fmt.Errorf("bad command line: %s", oneLine(err.Error()))
	}
	o.listenAddresses, o.systemdSocket, o.webConfigFile = *web.WebListenAddresses, *web.WebSystemdSocket, *web.WebConfigFile
	return o, o.check(logLevel)
}

// check validates main's own flags, parsing --log.level into o, then has each room validate its own.
func (o *options) check(logLevel string) error {
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("bad --log.level %q: want debug, info, warn or error", logLevel)
	}
	if !slices.Contains(promslog.FormatFlagOptions, o.logFormat) {
		return fmt.Errorf("bad --log.format %q: want %s", o.logFormat, strings.Join(promslog.FormatFlagOptions, " or "))
	}
	if o.maxRequests < 1 {
		return fmt.Errorf("bad --web.max-requests %d: must be at least 1", o.maxRequests)
	}
	if o.shutdownGrace <= 0 {
		return fmt.Errorf("bad --web.shutdown-grace-period %s: must be positive", o.shutdownGrace)
	}
	if o.scrapeTimeoutOff < 0 {
		return fmt.Errorf("bad --scrape.timeout-offset %s: must not be negative", o.scrapeTimeoutOff)
	}
	if !strings.HasPrefix(o.telemetryPath, "/") {
		return fmt.Errorf("bad --web.telemetry-path %q: must start with /", o.telemetryPath)
	}
	// A room's errors already name the flag, in the one line main prints.
	for _, room := range []interface{ Validate() error }{&o.kube, &o.probe, &o.rules, &o.cilium, &o.arrivals, &o.scrape, &o.collectors, &o.events} {
		if err := room.Validate(); err != nil {
			return err
		}
	}
	if o.cilium.Read() && o.scrape.Dataplane == scrape.DataplaneKubeProxy {
		return fmt.Errorf("bad --dataplane.cilium-socket %q: Cilium's service table is read only where Cilium replaces kube-proxy, not with --dataplane=kube-proxy", o.cilium.Socket)
	}
	return nil
}

// versionText is what --version prints, as every Prometheus exporter prints it.
func versionText() string { return version.Print("localtraffic-exporter") }

// oneLine joins a multi-line message (kingpin's errors are one line; this keeps the rule if one is not).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
