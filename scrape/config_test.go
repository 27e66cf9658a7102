package scrape

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
	defaults := Config{ExternalIPWindow: 10 * time.Minute, Grace: 2 * time.Minute, LossHold: 15 * time.Minute,
		StateFile: "/var/lib/localtraffic-exporter/state.json", dataplane: "auto"}
	for _, tc := range []struct {
		args []string
		want Config
	}{
		{nil, defaults},
		{[]string{"--dataplane", "replacement", "--externalip.evidence-window", "90s", "--rotation.grace", "45s",
			"--rotation.loss-hold", "20m", "--state.file", "/run/lt/state.json"},
			Config{Dataplane: DataplaneReplacement, ExternalIPWindow: 90 * time.Second, Grace: 45 * time.Second,
				LossHold: 20 * time.Minute, StateFile: "/run/lt/state.json", dataplane: "replacement"}},
		{[]string{"--dataplane", "kube-proxy", "--state.file", ""},
			Config{Dataplane: DataplaneKubeProxy, ExternalIPWindow: 10 * time.Minute, Grace: 2 * time.Minute,
				LossHold: 15 * time.Minute, dataplane: "kube-proxy"}},
	} {
		if c, err := parseConfig(t, tc.args...); err != nil || c != tc.want {
			t.Errorf("%q: %+v (error %v), want %+v", tc.args, c, err, tc.want)
		}
	}
}

// TestConfigBadValues: the exporter prints these errors as they are, one line each.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dataplane", "cilium"}, `bad --dataplane "cilium": want auto, kube-proxy or replacement`},
		{[]string{"--dataplane", "ipvs"}, `bad --dataplane "ipvs": want auto, kube-proxy or replacement`},
		{[]string{"--externalip.evidence-window", "0s"}, "bad --externalip.evidence-window 0s: must be positive"},
		{[]string{"--rotation.grace", "0s"}, "bad --rotation.grace 0s: must be positive"},
		{[]string{"--rotation.loss-hold", "0s"}, "bad --rotation.loss-hold 0s: must be positive"},
		{[]string{"--state.file", "/var/lib/localtraffic-exporter/"},
			`bad --state.file "/var/lib/localtraffic-exporter/": want a file path (the directory must exist), or empty for none`},
		{[]string{"--state.file", "."}, `bad --state.file ".": want a file path (the directory must exist), or empty for none`},
	} {
		if _, err := parseConfig(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
