package kernelrules

import (
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
)

// Config is the command line of the rules' reading, registered by RegisterFlags: which kube-proxy rules are
// read, and how often the node model reads them.
type Config struct {
	// Mode is auto, iptables or nftables (a Mode for Options.Mode), or none: the rules are not read.
	Mode string
	// MinInterval is the least time between two reads: the node model reads the rules when its Watcher tells of
	// a change, at most this often (--rules.cache-ttl). CountersInterval is how often it reads them, for the drop
	// counters, when no change comes.
	MinInterval, CountersInterval time.Duration
}

// RegisterFlags defines the rules' flags on app.
func (c *Config) RegisterFlags(app *kingpin.Application) {
	app.Flag("rules.mode", "Which kube-proxy rules to read: auto, iptables, nftables, none.").Default("auto").StringVar(&c.Mode)
	flagvalue.Duration(app, "rules.cache-ttl", "The least time between two reads of kube-proxy's rules: the node model reads them when they change, at most this often.", "2s", &c.MinInterval)
	flagvalue.Duration(app, "rules.counters-interval", "How often the node model reads kube-proxy's drop counters when no change of the rules comes.", "15s", &c.CountersInterval)
}

// Validate checks the parsed flags. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	switch c.Mode {
	case "auto", "iptables", "nftables", "none":
	default:
		return fmt.Errorf("bad --rules.mode %q: want auto, iptables, nftables or none", c.Mode)
	}
	if c.CountersInterval <= 0 {
		return fmt.Errorf("bad --rules.counters-interval %s: must be positive", c.CountersInterval)
	}
	return nil
}

// Read says whether kube-proxy's rules are read at all (--rules.mode other than none).
func (c Config) Read() bool { return c.Mode != "none" }
