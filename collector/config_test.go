package collector

import (
	"reflect"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue/flagtest"
)

// parseConfig parses args with this room's flags alone, as the exporter parses them among its others.
func parseConfig(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	return flagtest.Parse[Config](t, args...)
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(t)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Selection, DefaultSelection()) || c.Filter != nil {
		t.Errorf("defaults: selection %+v, filter %v; want %+v and no filter", c.Selection, c.Filter, DefaultSelection())
	}
}

func TestConfigGoodValues(t *testing.T) {
	c, err := parseConfig(t, "--collector.service_details", "--no-collector.dataplane", "--collector.rules.per-port")
	if err != nil {
		t.Fatal(err)
	}
	want := Selection{RulesPerPort: true, Enabled: map[string]bool{"services": true, "service_details": true,
		"kube_proxy": true, "node": true, "informers": true, "rules": true, "dataplane": false, "arrivals": true,
		"service_arrivals": false, "state_file": true, "announcers": true, "exposure": true, "service_exposure": false}}
	if !reflect.DeepEqual(c.Selection, want) {
		t.Errorf("\n got %+v\nwant %+v", c.Selection, want)
	}
	// --collector.disable-defaults keeps only the collectors named explicitly.
	if c, err = parseConfig(t, "--collector.disable-defaults", "--collector.services", "--collector.rules"); err != nil {
		t.Fatal(err)
	}
	for name, on := range c.Selection.Enabled {
		if on != (name == "services" || name == "rules") {
			t.Errorf("--collector.disable-defaults --collector.services --collector.rules: %s enabled=%v", name, on)
		}
	}
	if c, err = parseConfig(t, "--metrics.denylist", "localtraffic_rules_.*, localtraffic_node_found"); err != nil {
		t.Fatal(err)
	}
	for name, keep := range map[string]bool{"localtraffic_rules_mismatch": false, "localtraffic_node_found": false,
		"localtraffic_node_found_x": true, "localtraffic_blackhole": true} {
		if c.Filter.Keep(name) != keep {
			t.Errorf("--metrics.denylist: Keep(%s) = %v, want %v", name, !keep, keep)
		}
	}
}

// TestConfigBadValues: the exporter prints these errors as they are, one line each.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-collector.rules", "--collector.rules.per-port"}, "bad --collector.rules.per-port: the rules collector is disabled"},
		{[]string{"--collector.disable-defaults", "--collector.rules.per-port"}, "bad --collector.rules.per-port: the rules collector is disabled"},
		{[]string{"--metrics.allowlist", "a", "--metrics.denylist", "b"},
			"bad --metrics.allowlist/--metrics.denylist: an allowlist and a denylist exclude each other: give one"},
		{[]string{"--metrics.allowlist", "localtraffic_(blackhole"},
			"bad --metrics.allowlist/--metrics.denylist: bad expression \"localtraffic_(blackhole\": error parsing regexp: missing closing ): `localtraffic_(blackhole`"},
	} {
		if _, err := parseConfig(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
