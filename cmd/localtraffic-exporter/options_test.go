package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/eventwriter"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/ciliumsvc"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// env returns a getenv over a fixed map: tests never read the real environment.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := parseOptions(nil, env(map[string]string{"NODE_NAME": "node-a"}))
	if err != nil {
		t.Fatalf("parseOptions with NODE_NAME set: %v", err)
	}
	want := options{
		listenAddresses:  []string{":9746"},
		telemetryPath:    "/metrics",
		maxRequests:      10,
		scrapeTimeoutOff: 500 * time.Millisecond,
		shutdownGrace:    5 * time.Second,
		logLevel:         slog.LevelInfo,
		logFormat:        "logfmt",
		kube:             kubeview.Config{NodeName: "node-a", Announcers: true, CiliumNamespace: "kube-system"},
		probe:            nodeprobe.Config{MetricsAddress: "127.0.0.1:10249", ProbeTimeout: 5 * time.Second, ProbeConcurrency: 8},
		rules:            kernelrules.Config{Mode: "auto", MinInterval: 2 * time.Second, CountersInterval: 15 * time.Second},
		arrivals:         arrivals.FlagConfig{Enabled: true, QuietPeriod: 2 * time.Minute, MaxPacketRate: arrivals.DefaultMaxPacketRate},
		scrape: scrape.Config{ExternalIPWindow: 10 * time.Minute, Grace: 2 * time.Minute, LossHold: 15 * time.Minute,
			StateFile: "/var/lib/localtraffic-exporter/state.json"},
		collectors: collector.Config{Selection: collector.DefaultSelection()},
		events: eventwriter.Config{LeaseName: "localtraffic-exporter-events", PeersScheme: "https", TokenFile: eventwriter.DefaultTokenFile,
			Poll: 10 * time.Second, PeerTimeout: 3 * time.Second, Rate: 0.5, Burst: 20},
	}
	checkOptions(t, o, want)
}

// checkOptions compares main's own options whole and each room's Config by its exported fields: a room keeps
// its flags' raw text unexported, and what main hands on is the exported part.
func checkOptions(t *testing.T, got, want options) {
	t.Helper()
	for _, room := range []struct{ got, want any }{
		{got.kube, want.kube}, {got.probe, want.probe}, {got.rules, want.rules}, {got.cilium, want.cilium}, {got.arrivals, want.arrivals},
		{got.scrape, want.scrape}, {got.collectors, want.collectors}, {got.events, want.events},
	} {
		g, w := reflect.ValueOf(room.got), reflect.ValueOf(room.want)
		for i := range g.NumField() {
			if f := g.Type().Field(i); f.IsExported() && !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
				t.Errorf("%s.%s:\n got %+v\nwant %+v", g.Type(), f.Name, g.Field(i), w.Field(i))
			}
		}
	}
	want.kube, want.probe, want.rules, want.arrivals, want.scrape, want.collectors, want.events =
		got.kube, got.probe, got.rules, got.arrivals, got.scrape, got.collectors, got.events
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

func TestParseOptionsNodeName(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"from NODE_NAME", nil, map[string]string{"NODE_NAME": "from-env"}, "from-env"},
		{"flag overrides NODE_NAME", []string{"--node-name", "from-flag"}, map[string]string{"NODE_NAME": "from-env"}, "from-flag"},
		{"flag without NODE_NAME", []string{"--node-name=from-flag"}, nil, "from-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args, env(tc.env))
			if err != nil {
				t.Fatalf("parseOptions(%q): %v", tc.args, err)
			}
			if o.kube.NodeName != tc.want {
				t.Errorf("node name %q, want %q", o.kube.NodeName, tc.want)
			}
		})
	}
}

func TestParseOptionsListenAddresses(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{nil, []string{":9746"}},
		{[]string{"--web.listen-address", "127.0.0.1:9000"}, []string{"127.0.0.1:9000"}},
		{[]string{"--web.listen-address", "127.0.0.1:9000", "--web.listen-address=[::1]:9000"}, []string{"127.0.0.1:9000", "[::1]:9000"}},
		// Repeating the default keeps it exactly once.
		{[]string{"--web.listen-address", ":9746"}, []string{":9746"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseOptions(append([]string{"--node-name", "n"}, tc.args...), env(nil))
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if !reflect.DeepEqual(o.listenAddresses, tc.want) {
				t.Errorf("listen addresses %q, want %q", o.listenAddresses, tc.want)
			}
		})
	}
}

func TestParseOptionsGoodValues(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{
		"--node-name", "n", "--kubeconfig", kubeconfig, "--web.telemetry-path", "/m",
		"--log.level", "debug", "--log.format", "json", "--kube-proxy.healthz-address", "[fd00::1]:10256",
		"--kube-proxy.metrics-address", "localhost:10249", "--health-check.address", "fd00::1",
		"--probe.timeout", "1.5s", "--probe.concurrency", "1", "--scrape.timeout-offset", "0s",
		"--web.max-requests", "1", "--rules.mode", "nftables", "--rules.cache-ttl", "0s", "--rules.counters-interval", "3s",
		"--web.config.file", "/etc/web.yml", "--kube-proxy.nodeport-addresses", "10.0.0.0/8, fd00::/64,primary",
		"--externalip.evidence-window", "90s", "--dataplane", "replacement", "--web.shutdown-grace-period", "8s",
		"--collector.service_details", "--no-collector.dataplane", "--collector.rules.per-port",
		"--no-arrivals.enabled", "--rotation.grace", "45s", "--arrivals.internal-cidrs", "10.244.0.0/16, fd00:244::/56",
		"--rotation.loss-hold", "20m", "--arrivals.quiet-period", "30s", "--arrivals.max-packet-rate", "5000",
		"--state.file", "/run/lt/state.json", "--no-announcers.enabled", "--announcers.cilium-namespace", "cilium",
		"--web.enable-pprof", "--dataplane.cilium-socket", "/run/cilium/cilium.sock",
		"--events.write", "--events.lease-namespace", "lt", "--events.lease-name", "lease", "--events.identity", "pod-1",
		"--events.peers-service", "lt/exporters", "--events.peers-scheme", "http", "--events.token-file", "/t",
		"--events.poll-interval", "2s", "--events.peer-timeout", "1s", "--events.rate", "3", "--events.burst", "4",
	}, env(nil))
	if err != nil {
		t.Fatalf("parseOptions: %v", err)
	}
	want := options{
		listenAddresses: []string{":9746"}, webConfigFile: "/etc/web.yml", telemetryPath: "/m", maxRequests: 1,
		enablePprof: true, scrapeTimeoutOff: 0, shutdownGrace: 8 * time.Second, logLevel: slog.LevelDebug, logFormat: "json",
		kube: kubeview.Config{Kubeconfig: kubeconfig, NodeName: "n", CiliumNamespace: "cilium"},
		probe: nodeprobe.Config{HealthzAddress: "[fd00::1]:10256", MetricsAddress: "localhost:10249", HealthCheckAddress: "fd00::1",
			NodePortAddresses: []string{"10.0.0.0/8", "fd00::/64", "primary"}, ProbeTimeout: 1500 * time.Millisecond, ProbeConcurrency: 1},
		rules:  kernelrules.Config{Mode: "nftables", MinInterval: 0, CountersInterval: 3 * time.Second},
		cilium: ciliumsvc.Config{Socket: "/run/cilium/cilium.sock"},
		arrivals: arrivals.FlagConfig{QuietPeriod: 30 * time.Second, MaxPacketRate: 5000,
			InternalCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}},
		scrape: scrape.Config{Dataplane: scrape.DataplaneReplacement, ExternalIPWindow: 90 * time.Second, Grace: 45 * time.Second,
			LossHold: 20 * time.Minute, StateFile: "/run/lt/state.json"},
		collectors: collector.Config{Selection: collector.Selection{RulesPerPort: true, Enabled: map[string]bool{"services": true,
			"service_details": true, "kube_proxy": true, "node": true, "informers": true, "rules": true, "dataplane": false,
			"arrivals": true, "service_arrivals": false, "state_file": true, "announcers": true, "exposure": true,
			"service_exposure": false}}},
		events: eventwriter.Config{Enabled: true, LeaseNamespace: "lt", LeaseName: "lease", Identity: "pod-1", PeersNamespace: "lt",
			PeersService: "exporters", PeersScheme: "http", TokenFile: "/t", Poll: 2 * time.Second, PeerTimeout: time.Second, Rate: 3, Burst: 4},
	}
	checkOptions(t, o, want)
	for _, level := range []string{"debug", "info", "warn", "error"} {
		if _, err := parseOptions([]string{"--node-name", "n", "--log.level", level}, env(nil)); err != nil {
			t.Errorf("--log.level %s: %v", level, err)
		}
	}
	for _, mode := range []string{"auto", "iptables", "nftables", "none"} {
		if _, err := parseOptions([]string{"--node-name", "n", "--rules.mode", mode}, env(nil)); err != nil {
			t.Errorf("--rules.mode %s: %v", mode, err)
		}
	}
	for _, format := range []string{"logfmt", "json"} {
		if _, err := parseOptions([]string{"--node-name", "n", "--log.format", format}, env(nil)); err != nil {
			t.Errorf("--log.format %s: %v", format, err)
		}
	}
}

// TestParseOptionsBadValues: each bad command line is an error of one line that names what is wrong, fit for
// the one line main prints on stderr.
func TestParseOptionsBadValues(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		names string // the error must contain this
	}{
		{"unknown flag", []string{"--no-such-flag"}, nil, "no-such-flag"},
		{"flag without its value", []string{"--node-name"}, nil, "node-name"},
		{"positional argument", []string{"--node-name", "n", "extra"}, nil, `unexpected extra`},
		{"no node name", nil, nil, "--node-name"},
		{"empty node name overrides NODE_NAME", []string{"--node-name", ""}, map[string]string{"NODE_NAME": "x"}, "--node-name"},
		{"log level", []string{"--log.level", "verbose"}, nil, "--log.level"},
		{"log format", []string{"--log.format", "xml"}, nil, "--log.format"},
		{"rules mode", []string{"--rules.mode", "ipvs"}, nil, "--rules.mode"},
		{"probe timeout not a duration", []string{"--probe.timeout", "5"}, nil, "probe.timeout"},
		{"probe timeout zero", []string{"--probe.timeout", "0s"}, nil, "--probe.timeout"},
		{"probe timeout negative", []string{"--probe.timeout", "-1s"}, nil, "--probe.timeout"},
		{"shutdown grace zero", []string{"--web.shutdown-grace-period", "0s"}, nil, "--web.shutdown-grace-period"},
		{"probe concurrency zero", []string{"--probe.concurrency", "0"}, nil, "--probe.concurrency"},
		{"probe concurrency not a number", []string{"--probe.concurrency", "many"}, nil, "probe.concurrency"},
		{"max requests zero", []string{"--web.max-requests", "0"}, nil, "--web.max-requests"},
		{"scrape timeout offset negative", []string{"--scrape.timeout-offset", "-1s"}, nil, "--scrape.timeout-offset"},
		{"telemetry path relative", []string{"--web.telemetry-path", "metrics"}, nil, "--web.telemetry-path"},
		{"healthz address without port", []string{"--kube-proxy.healthz-address", "10.0.0.1"}, nil, "--kube-proxy.healthz-address"},
		{"metrics address without port", []string{"--kube-proxy.metrics-address", "localhost"}, nil, "--kube-proxy.metrics-address"},
		{"health check address a host:port", []string{"--health-check.address", "10.0.0.1:80"}, nil, "--health-check.address"},
		{"health check address a name", []string{"--health-check.address", "node-a"}, nil, "--health-check.address"},
		{"nodeport addresses not CIDRs", []string{"--kube-proxy.nodeport-addresses", "10.0.0.1"}, nil, "--kube-proxy.nodeport-addresses"},
		{"externalIP window zero", []string{"--externalip.evidence-window", "0s"}, nil, "--externalip.evidence-window"},
		{"grace zero", []string{"--rotation.grace", "0s"}, nil, "--rotation.grace"},
		{"counters interval zero", []string{"--rules.counters-interval", "0s"}, nil, "--rules.counters-interval"},
		{"loss hold zero", []string{"--rotation.loss-hold", "0s"}, nil, "--rotation.loss-hold"},
		{"quiet period zero", []string{"--arrivals.quiet-period", "0s"}, nil, "--arrivals.quiet-period"},
		{"packet budget zero", []string{"--arrivals.max-packet-rate", "0"}, nil, "--arrivals.max-packet-rate"},
		{"packet budget not a number", []string{"--arrivals.max-packet-rate", "lots"}, nil, "--arrivals.max-packet-rate"},
		{"internal CIDR not a CIDR", []string{"--arrivals.internal-cidrs", "10.244.0.0"}, nil, "--arrivals.internal-cidrs"},
		{"state file a directory", []string{"--state.file", "/var/lib/localtraffic-exporter/"}, nil, "--state.file"},
		{"dataplane", []string{"--dataplane", "cilium"}, nil, "--dataplane"},
		{"cilium socket relative", []string{"--dataplane.cilium-socket", "cilium.sock"}, nil, "--dataplane.cilium-socket"},
		{"cilium socket on a kube-proxy node", []string{"--dataplane.cilium-socket", "/var/run/cilium/cilium.sock", "--dataplane", "kube-proxy"}, nil, "--dataplane.cilium-socket"},
		{"kubeconfig missing", []string{"--kubeconfig", "/nonexistent/kubeconfig"}, nil, "--kubeconfig"},
		{"bool flag with a value", []string{"--version=maybe"}, nil, "version"},
		{"unknown collector", []string{"--collector.cpu"}, nil, "collector.cpu"},
		{"per-port without the rules collector", []string{"--no-collector.rules", "--collector.rules.per-port"}, nil, "--collector.rules.per-port"},
		{"allowlist and denylist", []string{"--metrics.allowlist", "a", "--metrics.denylist", "b"}, nil, "--metrics.allowlist"},
		{"bad allowlist expression", []string{"--metrics.allowlist", "localtraffic_(blackhole"}, nil, "--metrics.allowlist"},
		{"ignore selector does not parse", []string{"--services.ignore-selector", "team in (a"}, nil, "--services.ignore-selector"},
		{"ignore selector bad label name", []string{"--services.ignore-selector", "-team=a"}, nil, "--services.ignore-selector"},
		{"ignore selector selects everything", []string{"--services.ignore-selector", ","}, nil, "--services.ignore-selector"},
		{"events without the pod's namespace", []string{"--events.write", "--events.identity", "p"}, nil, "--events.peers-service"},
		{"events without an identity", []string{"--events.write"}, map[string]string{"POD_NAMESPACE": "lt"}, "--events.identity"},
		{"events rate zero", []string{"--events.write", "--events.rate", "0"}, map[string]string{"POD_NAMESPACE": "lt", "POD_NAME": "p"}, "--events.rate"},
		{"events peers scheme", []string{"--events.peers-scheme", "ftp"}, nil, "events.peers-scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.names != "--node-name" && tc.name != "flag without its value" {
				args = append([]string{"--node-name", "n"}, args...)
			}
			_, err := parseOptions(args, env(tc.env))
			if err == nil {
				t.Fatalf("parseOptions(%q) succeeded, want an error", args)
			}
			var help errHelp
			if errors.As(err, &help) {
				t.Fatalf("parseOptions(%q) returned the usage, want an error", args)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans several lines:\n%s", msg)
			}
			if !strings.Contains(msg, tc.names) {
				t.Errorf("error %q does not name %s", msg, tc.names)
			}
		})
	}
}

func TestParseOptionsHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		_, err := parseOptions([]string{arg}, env(nil))
		var help errHelp
		if !errors.As(err, &help) {
			t.Fatalf("%s: error %v, want errHelp", arg, err)
		}
		// The usage lists every flag of the command-line contract.
		for _, flag := range []string{"kubeconfig", "node-name", "web.listen-address", "web.config.file",
			"web.telemetry-path", "log.level", "log.format", "kube-proxy.healthz-address",
			"kube-proxy.metrics-address", "health-check.address", "probe.timeout", "probe.concurrency", "rules.mode",
			"collector.services", "collector.service_details", "collector.disable-defaults", "collector.rules.per-port",
			"state.file", "rotation.grace", "arrivals.enabled", "web.enable-pprof",
			"metrics.allowlist", "metrics.denylist"} {
			// kingpin shows a boolean flag with its negation: --[no-]collector.rules.
			if !strings.Contains(help.usage, "--"+flag) && !strings.Contains(help.usage, "--[no-]"+flag) {
				t.Errorf("%s: usage does not mention --%s:\n%s", arg, flag, help.usage)
			}
		}
	}
}

func TestParseOptionsVersionSkipsChecks(t *testing.T) {
	// --version must work anywhere, even without a node name.
	o, err := parseOptions([]string{"--version"}, env(nil))
	if err != nil || !o.version {
		t.Errorf("--version: options %+v, error %v; want version set and no error", o, err)
	}
}

// --log.format=logfmt|json are promslog's formats, as node_exporter's: logfmt lines of time, level, source, msg
// and the attributes; one JSON object per line. Debug lines only at --log.level=debug.
func TestLogFormats(t *testing.T) {
	var logfmt, js bytes.Buffer
	newLogger(&logfmt, "logfmt", slog.LevelInfo).Info("informers synced", "node", "node-1")
	newLogger(&logfmt, "logfmt", slog.LevelInfo).Debug("not shown")
	newLogger(&js, "json", slog.LevelDebug).Debug("rules read", "node", "node-1")
	line := logfmt.String()
	if !regexp.MustCompile(`^time=\S+ level=INFO source=\S+ msg="informers synced" node=node-1\n$`).MatchString(line) {
		t.Errorf("logfmt: %q", line)
	}
	var obj map[string]any
	if err := json.Unmarshal(js.Bytes(), &obj); err != nil || obj["msg"] != "rules read" || obj["level"] != "DEBUG" || obj["node"] != "node-1" {
		t.Errorf("json: %s (%v)", js.String(), err)
	}
	if _, err := parseOptions([]string{"--node-name", "n", "--log.format", "text"}, env(nil)); err == nil ||
		!strings.Contains(err.Error(), "want logfmt or json") {
		t.Errorf("--log.format text: %v, want an error naming logfmt and json", err)
	}
}
