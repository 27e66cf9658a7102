package nodeprobe

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
)

// Config is the command line of what the node answers, registered by RegisterFlags: where kube-proxy's servers
// are, where and how health check node ports are probed.
type Config struct {
	// HealthzAddress is kube-proxy's health server host:port; "": its healthzBindAddress from /configz
	// (KubeProxyHealthAddress).
	HealthzAddress string
	// MetricsAddress is kube-proxy's metrics server host:port, asked for /proxyMode and /configz.
	MetricsAddress string
	// HealthCheckAddress is where health check node ports of its family are probed; "": the node's address of
	// each family that kube-proxy serves.
	HealthCheckAddress string
	// NodePortAddresses is kube-proxy's --nodeport-addresses as the flag gives it; nil: read from /configz.
	NodePortAddresses []string
	ProbeTimeout      time.Duration // the longest one probe may take
	ProbeConcurrency  int           // health check probes in flight at once

	nodePortAddresses string
}

// defaultMetricsAddress is kube-proxy's default --metrics-bind-address when its bindAddress is IPv4.
const defaultMetricsAddress = "127.0.0.1:10249"

// RegisterFlags defines the probes' flags on app.
func (c *Config) RegisterFlags(app *kingpin.Application) {
	app.Flag("kube-proxy.healthz-address", "kube-proxy's health server host:port (default: its healthzBindAddress from /configz on --kube-proxy.metrics-address; when that binds every address, the node's own address kube-proxy uses, InternalIP before ExternalIP).").StringVar(&c.HealthzAddress)
	app.Flag("kube-proxy.metrics-address", "kube-proxy's metrics server host:port, asked for /proxyMode and /configz (left at its default, [::1]:10249 is asked for /configz too: kube-proxy's default when its bindAddress is IPv6).").Default(defaultMetricsAddress).StringVar(&c.MetricsAddress)
	app.Flag("health-check.address", "Address to probe health check node ports of its IP family on (default: the node's address of each family that kube-proxy serves).").StringVar(&c.HealthCheckAddress)
	app.Flag("kube-proxy.nodeport-addresses", "kube-proxy's --nodeport-addresses, comma-separated CIDRs or primary, localhost, all (default: read from kube-proxy's /configz on --kube-proxy.metrics-address).").StringVar(&c.nodePortAddresses)
	flagvalue.Duration(app, "probe.timeout", "Longest time one probe may take; the scrape's own timeout may shorten it.", "5s", &c.ProbeTimeout)
	flagvalue.Int(app, "probe.concurrency", "Health check probes in flight at once.", "8", &c.ProbeConcurrency)
}

// Validate checks the parsed flags and fills NodePortAddresses. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	if c.ProbeTimeout <= 0 {
		return fmt.Errorf("bad --probe.timeout %s: must be positive", c.ProbeTimeout)
	}
	if c.ProbeConcurrency < 1 {
		return fmt.Errorf("bad --probe.concurrency %d: must be at least 1", c.ProbeConcurrency)
	}
	for _, hp := range []struct{ flag, v string }{
		{"--kube-proxy.healthz-address", c.HealthzAddress}, {"--kube-proxy.metrics-address", c.MetricsAddress},
	} {
		if hp.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(hp.v); err != nil {
			return fmt.Errorf("bad %s %q: want host:port", hp.flag, hp.v)
		}
	}
	c.NodePortAddresses = nil
	if c.nodePortAddresses != "" {
		c.NodePortAddresses = []string{}
		for _, a := range strings.Split(c.nodePortAddresses, ",") {
			a = strings.TrimSpace(a)
			switch a {
			case "primary", "localhost", "all": // kube-proxy's keywords, expanded as it expands them
			default:
				if _, _, err := net.ParseCIDR(a); err != nil {
					return fmt.Errorf("bad --kube-proxy.nodeport-addresses %q: want CIDRs, primary, localhost or all", c.nodePortAddresses)
				}
			}
			c.NodePortAddresses = append(c.NodePortAddresses, a)
		}
	}
	if c.HealthCheckAddress != "" && net.ParseIP(c.HealthCheckAddress) == nil {
		return fmt.Errorf("bad --health-check.address %q: want an IP address", c.HealthCheckAddress)
	}
	return nil
}

// ProxyModeURL is kube-proxy's /proxyMode on its metrics server.
func (c Config) ProxyModeURL() string { return "http://" + c.MetricsAddress + "/proxyMode" }

// ConfigzURL is kube-proxy's /configz on its metrics server.
func (c Config) ConfigzURL() string { return "http://" + c.MetricsAddress + "/configz" }

// ConfigzFallbackURL is where else kube-proxy's /configz may be when --kube-proxy.metrics-address is left at
// its default: kube-proxy defaults its metrics server to [::1]:10249 when its bindAddress is IPv6. "": none.
func (c Config) ConfigzFallbackURL() string {
	if c.MetricsAddress != defaultMetricsAddress {
		return ""
	}
	return "http://[::1]:10249/configz"
}
