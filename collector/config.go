package collector

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/alecthomas/kingpin/v2"
)

// Config is the collectors' command line, registered by RegisterFlags beside the collectors it switches: which
// collectors run, whether the rules collector exports every port, and which metrics are exported. Validate
// fills Selection and Filter from the flags.
type Config struct {
	// Selection is the collectors the flags leave on.
	Selection Selection
	// Filter keeps the metrics --metrics.allowlist and --metrics.denylist let through; nil: every metric of the
	// selected collectors.
	Filter *MetricFilter

	switches            collectorSwitches
	rulesPerPort        bool
	allowlist, denylist string
}

// collectorSwitches are node_exporter's collector flags: --collector.<name> and --no-collector.<name> for
// every collector, and --collector.disable-defaults, which turns off every collector not named explicitly.
type collectorSwitches struct {
	disableDefaults bool
	on, set         map[string]*bool
}

// RegisterFlags defines the collectors' flags on app.
func (c *Config) RegisterFlags(app *kingpin.Application) {
	c.switches = collectorSwitches{on: map[string]*bool{}, set: map[string]*bool{}}
	for _, e := range Catalog() {
		state := "disabled"
		if e.Default {
			state = "enabled"
		}
		on, set := new(bool), new(bool)
		app.Flag("collector."+e.Name, fmt.Sprintf("Enable the %s collector (default: %s). %s", e.Name, state, e.Help)).
			Default(strconv.FormatBool(e.Default)).IsSetByUser(set).BoolVar(on)
		c.switches.on[e.Name], c.switches.set[e.Name] = on, set
	}
	app.Flag("collector.disable-defaults", "Turn off every collector not enabled explicitly with --collector.<name>.").BoolVar(&c.switches.disableDefaults)
	app.Flag("collector.rules.per-port", "Export every Service port's rule series (rules_drop, rules_local_endpoints, rules_dropped_packets_total); by default only the dropped-packet counters of Services with a health check node port.").BoolVar(&c.rulesPerPort)
	app.Flag("metrics.allowlist", "Comma-separated regular expressions (each matching a whole metric name): export only these metrics. Excludes --metrics.denylist.").StringVar(&c.allowlist)
	app.Flag("metrics.denylist", "Comma-separated regular expressions (each matching a whole metric name): do not export these metrics. Excludes --metrics.allowlist.").StringVar(&c.denylist)
}

// Validate checks the parsed flags and fills Selection and Filter. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	c.Selection = Selection{Enabled: map[string]bool{}, RulesPerPort: c.rulesPerPort}
	for name, on := range c.switches.on {
		c.Selection.Enabled[name] = *on && (!c.switches.disableDefaults || *c.switches.set[name])
	}
	if c.rulesPerPort && !c.Selection.Enabled["rules"] {
		return errors.New("bad --collector.rules.per-port: the rules collector is disabled")
	}
	var err error
	if c.Filter, err = NewMetricFilter(c.allowlist, c.denylist); err != nil {
		return fmt.Errorf("bad --metrics.allowlist/--metrics.denylist: %w", err)
	}
	return nil
}
