package nodeprobe

import (
	"reflect"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue/flagtest"
)

// parseConfig parses args with this room's flags alone, as the exporter parses them among its others.
func parseConfig(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	return flagtest.Parse[Config](t, args...)
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(t)
	want := Config{MetricsAddress: "127.0.0.1:10249", ProbeTimeout: 5 * time.Second, ProbeConcurrency: 8}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: %+v (error %v), want %+v", c, err, want)
	}
	// Left at its default, the metrics address has kube-proxy's IPv6 default as a fallback for /configz.
	if got := [3]string{c.ProxyModeURL(), c.ConfigzURL(), c.ConfigzFallbackURL()}; got !=
		[3]string{"http://127.0.0.1:10249/proxyMode", "http://127.0.0.1:10249/configz", "http://[::1]:10249/configz"} {
		t.Errorf("URLs at the default metrics address: %q", got)
	}
}

func TestConfigGoodValues(t *testing.T) {
	c, err := parseConfig(t, "--kube-proxy.healthz-address", "[fd00::1]:10256", "--kube-proxy.metrics-address", "localhost:10249",
		"--health-check.address", "fd00::1", "--probe.timeout", "1.5s", "--probe.concurrency", "1",
		"--kube-proxy.nodeport-addresses", "10.0.0.0/8, fd00::/64,primary")
	want := Config{HealthzAddress: "[fd00::1]:10256", MetricsAddress: "localhost:10249", HealthCheckAddress: "fd00::1",
		NodePortAddresses: []string{"10.0.0.0/8", "fd00::/64", "primary"}, ProbeTimeout: 1500 * time.Millisecond,
		ProbeConcurrency: 1, nodePortAddresses: "10.0.0.0/8, fd00::/64,primary"}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("%+v (error %v), want %+v", c, err, want)
	}
	if c.ConfigzURL() != "http://localhost:10249/configz" || c.ConfigzFallbackURL() != "" {
		t.Errorf("URLs at a metrics address given: %q, fallback %q", c.ConfigzURL(), c.ConfigzFallbackURL())
	}
}

// TestConfigBadValues: the exporter prints these errors as they are, one line each.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--probe.timeout", "0s"}, "bad --probe.timeout 0s: must be positive"},
		{[]string{"--probe.concurrency", "0"}, "bad --probe.concurrency 0: must be at least 1"},
		{[]string{"--kube-proxy.healthz-address", "10.0.0.1"}, `bad --kube-proxy.healthz-address "10.0.0.1": want host:port`},
		{[]string{"--kube-proxy.metrics-address", "localhost"}, `bad --kube-proxy.metrics-address "localhost": want host:port`},
		{[]string{"--kube-proxy.nodeport-addresses", "10.0.0.1"}, `bad --kube-proxy.nodeport-addresses "10.0.0.1": want CIDRs, primary, localhost or all`},
		{[]string{"--health-check.address", "10.0.0.1:80"}, `bad --health-check.address "10.0.0.1:80": want an IP address`},
	} {
		if _, err := parseConfig(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
