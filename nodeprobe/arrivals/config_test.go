package arrivals

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// parseFlagConfig parses args with the meter's flags alone, as the exporter parses them among its others.
func parseFlagConfig(t *testing.T, args ...string) (FlagConfig, error) {
	var c FlagConfig
	app := kingpin.New("t", "").Terminate(nil)
	c.RegisterFlags(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return c, c.Validate()
}

func TestFlagConfigValues(t *testing.T) {
	c, err := parseFlagConfig(t)
	want := FlagConfig{Enabled: true, QuietPeriod: 2 * time.Minute, MaxPacketRate: 100_000}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: %+v (error %v), want %+v", c, err, want)
	}
	// The flag's default is the meter's own.
	if got := (Config{}).withDefaults().QuietPeriod; c.QuietPeriod != got {
		t.Errorf("--arrivals.quiet-period defaults to %s, the meter's QuietPeriod to %s", c.QuietPeriod, got)
	}
	if got := (Config{}).withDefaults().MaxPacketRate; c.MaxPacketRate != got {
		t.Errorf("--arrivals.max-packet-rate defaults to %d, the meter's MaxPacketRate to %d", c.MaxPacketRate, got)
	}
	c, err = parseFlagConfig(t, "--no-arrivals.enabled", "--arrivals.internal-cidrs", "10.244.0.0/16, fd00:244::/56",
		"--arrivals.quiet-period", "30s", "--arrivals.max-packet-rate", "300")
	want = FlagConfig{QuietPeriod: 30 * time.Second, MaxPacketRate: 300, internalCIDRs: "10.244.0.0/16, fd00:244::/56",
		InternalCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("%+v (error %v), want %+v", c, err, want)
	}
	if m := c.Meter(nil); m.QuietPeriod != 30*time.Second || m.MaxPacketRate != 300 {
		t.Errorf("the meter's QuietPeriod %s and MaxPacketRate %d, want the flags' 30s and 300", m.QuietPeriod, m.MaxPacketRate)
	}
}

// TestFlagConfigBadValues: the exporter prints these errors as they are, one line each.
func TestFlagConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arrivals.quiet-period", "0s"}, "bad --arrivals.quiet-period 0s: must be positive"},
		{[]string{"--arrivals.max-packet-rate=-5"}, "bad --arrivals.max-packet-rate -5: must be positive"},
		{[]string{"--arrivals.internal-cidrs", "10.244.0.0"}, `bad --arrivals.internal-cidrs "10.244.0.0": want comma-separated CIDRs`},
	} {
		if _, err := parseFlagConfig(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
