package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
)

// options are the command line, parsed and checked.
type options struct {
	kubeconfig         string
	nodeName           string
	listenAddresses    []string
	webConfigFile      string
	telemetryPath      string
	logLevel           slog.Level
	logFormat          string
	kubeProxyHealthz   string
	kubeProxyMetrics   string
	healthCheckAddress string
	probeTimeout       time.Duration
	probeConcurrency   int
	scrapeTimeoutOff   time.Duration
	maxRequests        int
	rulesMode          string
	rulesCacheTTL      time.Duration
	shutdownGrace      time.Duration
	version            bool
}

// listFlag is a repeatable string flag, as exporter-toolkit's --web.listen-address is.
type listFlag struct {
	values  *[]string
	changed bool
}

func (l *listFlag) String() string {
	if l.values == nil {
		return ""
	}
	return strings.Join(*l.values, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.changed {
		*l.values, l.changed = nil, true // the first explicit value replaces the default
	}
	*l.values = append(*l.values, v)
	return nil
}

const defaultListenAddress = ":9746"

// defaultShutdownGrace leaves in-flight scrapes most of the DaemonSet's terminationGracePeriodSeconds (10 s)
// while the process still exits before the kubelet's SIGKILL.
const defaultShutdownGrace = 5 * time.Second

// parseOptions reads args; getenv supplies defaults (NODE_NAME). Errors are one line, fit for stderr.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	o := options{listenAddresses: []string{defaultListenAddress}}
	fs := flag.NewFlagSet("localtraffic-exporter", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned as one line; --help is handled below
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty uses the in-cluster config.")
	fs.StringVar(&o.nodeName, "node-name", getenv("NODE_NAME"), "The node this exporter runs on (default $NODE_NAME).")
	fs.Var(&listFlag{values: &o.listenAddresses}, "web.listen-address", "Address to listen on; repeatable (default "+defaultListenAddress+").")
	fs.StringVar(&o.webConfigFile, "web.config.file", "", "exporter-toolkit web configuration file for TLS and basic auth.")
	fs.StringVar(&o.telemetryPath, "web.telemetry-path", "/metrics", "Path under which to expose metrics.")
	level := fs.String("log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&o.logFormat, "log.format", "auto", "Log format: auto (tint on a terminal, JSON otherwise), json, text.")
	fs.StringVar(&o.kubeProxyHealthz, "kube-proxy.healthz-address", "", "kube-proxy's health server host:port (default <Node InternalIP>:10256).")
	fs.StringVar(&o.kubeProxyMetrics, "kube-proxy.metrics-address", "127.0.0.1:10249", "kube-proxy's metrics server host:port, asked for /proxyMode.")
	fs.StringVar(&o.healthCheckAddress, "health-check.address", "", "Address to probe health check node ports on (default: the Node's InternalIP, confirmed local).")
	fs.DurationVar(&o.probeTimeout, "probe.timeout", 5*time.Second, "Longest time one probe may take; the scrape's own timeout may shorten it.")
	fs.IntVar(&o.probeConcurrency, "probe.concurrency", 8, "Health check probes in flight at once.")
	fs.DurationVar(&o.scrapeTimeoutOff, "scrape.timeout-offset", 500*time.Millisecond, "Subtracted from X-Prometheus-Scrape-Timeout-Seconds to leave time to answer.")
	fs.IntVar(&o.maxRequests, "web.max-requests", 10, "Scrapes served at once; more get 503.")
	fs.StringVar(&o.rulesMode, "rules.mode", "auto", "Which kube-proxy rules to read: auto, iptables, nftables, none.")
	fs.DurationVar(&o.rulesCacheTTL, "rules.cache-ttl", 2*time.Second, "How long one read of kube-proxy's rules serves concurrent scrapes.")
	fs.DurationVar(&o.shutdownGrace, "web.shutdown-grace-period", defaultShutdownGrace,
		"On SIGTERM, how long in-flight scrapes may run on; keep it below the pod's terminationGracePeriodSeconds.")
	fs.BoolVar(&o.version, "version", false, "Print the version and exit.")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelp{usage: usage(fs)}
		}
		return o, fmt.Errorf("bad command line: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bad command line: unexpected argument %q", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("bad --log.level %q: want debug, info, warn or error", *level)
	}
	switch o.logFormat {
	case "auto", "json", "text":
	default:
		return o, fmt.Errorf("bad --log.format %q: want auto, json or text", o.logFormat)
	}
	switch o.rulesMode {
	case "auto", "iptables", "nftables", "none":
	default:
		return o, fmt.Errorf("bad --rules.mode %q: want auto, iptables, nftables or none", o.rulesMode)
	}
	if o.nodeName == "" {
		return o, errors.New("no node name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)")
	}
	if o.probeTimeout <= 0 {
		return o, fmt.Errorf("bad --probe.timeout %s: must be positive", o.probeTimeout)
	}
	if o.probeConcurrency < 1 {
		return o, fmt.Errorf("bad --probe.concurrency %d: must be at least 1", o.probeConcurrency)
	}
	if o.maxRequests < 1 {
		return o, fmt.Errorf("bad --web.max-requests %d: must be at least 1", o.maxRequests)
	}
	if o.shutdownGrace <= 0 {
		return o, fmt.Errorf("bad --web.shutdown-grace-period %s: must be positive", o.shutdownGrace)
	}
	if o.scrapeTimeoutOff < 0 {
		return o, fmt.Errorf("bad --scrape.timeout-offset %s: must not be negative", o.scrapeTimeoutOff)
	}
	if !strings.HasPrefix(o.telemetryPath, "/") {
		return o, fmt.Errorf("bad --web.telemetry-path %q: must start with /", o.telemetryPath)
	}
	for _, hp := range []struct{ flag, v string }{
		{"--kube-proxy.healthz-address", o.kubeProxyHealthz}, {"--kube-proxy.metrics-address", o.kubeProxyMetrics},
	} {
		if hp.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(hp.v); err != nil {
			return o, fmt.Errorf("bad %s %q: want host:port", hp.flag, hp.v)
		}
	}
	if o.healthCheckAddress != "" && net.ParseIP(o.healthCheckAddress) == nil {
		return o, fmt.Errorf("bad --health-check.address %q: want an IP address", o.healthCheckAddress)
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			return o, fmt.Errorf("bad --kubeconfig: %w", err)
		}
	}
	return o, nil
}

// errHelp carries the usage text for --help: printed, exit 0.
type errHelp struct{ usage string }

func (e errHelp) Error() string { return e.usage }

func usage(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("Usage: localtraffic-exporter [flags]\n\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}
