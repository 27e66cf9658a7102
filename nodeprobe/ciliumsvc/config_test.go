package ciliumsvc

import (
	"testing"

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
		{nil, Config{}, false},
		{[]string{"--dataplane.cilium-socket", DefaultSocket}, Config{Socket: "/var/run/cilium/cilium.sock"}, true},
		{[]string{"--dataplane.cilium-socket="}, Config{}, false},
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
		{[]string{"--dataplane.cilium-socket", "cilium.sock"}, `bad --dataplane.cilium-socket "cilium.sock": want an absolute path, or empty for none`},
	} {
		_, err := parseConfig(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
