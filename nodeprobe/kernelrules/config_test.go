package kernelrules

import (
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue/flagtest"
)

// parseConfig parses args with this room's flags alone, as the exporter parses them among its others.
func parseConfig(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	return flagtest.Parse[Config](t, args...)
}

func TestConfigValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Config
		read bool
	}{
		{nil, Config{Mode: "auto", MinInterval: 2 * time.Second, CountersInterval: 15 * time.Second}, true},
		{[]string{"--rules.mode", "nftables", "--rules.cache-ttl", "0s", "--rules.counters-interval", "3s"},
			Config{Mode: "nftables", CountersInterval: 3 * time.Second}, true},
		{[]string{"--rules.mode", "iptables"}, Config{Mode: "iptables", MinInterval: 2 * time.Second, CountersInterval: 15 * time.Second}, true},
		{[]string{"--rules.mode", "none"}, Config{Mode: "none", MinInterval: 2 * time.Second, CountersInterval: 15 * time.Second}, false},
	} {
		c, err := parseConfig(t, tc.args...)
		if err != nil || c != tc.want || c.Read() != tc.read {
			t.Errorf("%q: %+v (read %v, error %v), want %+v (read %v)", tc.args, c, c.Read(), err, tc.want, tc.read)
		}
	}
}

// TestConfigBadValues: the exporter prints these errors as they are, one line each.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rules.mode", "ipvs"}, `bad --rules.mode "ipvs": want auto, iptables, nftables or none`},
		{[]string{"--rules.counters-interval", "0s"}, "bad --rules.counters-interval 0s: must be positive"},
	} {
		if _, err := parseConfig(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
