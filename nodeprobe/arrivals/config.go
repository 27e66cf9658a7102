package arrivals

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
)

// DefaultQuietPeriod is Config.QuietPeriod's default: the pause without arrivals that ends a run.
const DefaultQuietPeriod = 2 * time.Minute

// DefaultMaxPacketRate is Config.MaxPacketRate's default: about a tenth of a core at the reader's cost per
// packet (docs/performance.md).
const DefaultMaxPacketRate = 100_000

// FlagConfig is the meter's command line, registered by RegisterFlags: whether it runs, what ends a run of
// arrivals, which sources are never external, and how many packets a second it counts. (Config is the meter's
// own tuning, which the command line sets only the quiet period and the packet budget of.)
type FlagConfig struct {
	Enabled       bool          // run the meter; off, rotation is left to the declared model
	QuietPeriod   time.Duration // Config.QuietPeriod
	MaxPacketRate int           // Config.MaxPacketRate
	// InternalCIDRs are sources that are never external arrivals, beside those kube-proxy's local detector
	// calls pod traffic (Watch.Internal). Set by Validate.
	InternalCIDRs []netip.Prefix

	internalCIDRs string
}

// RegisterFlags defines the meter's flags on app.
func (c *FlagConfig) RegisterFlags(app *kingpin.Application) {
	app.Flag("arrivals.enabled", "Observe the new external connection attempts that reach this node (a passive AF_PACKET socket with a kernel filter; needs CAP_NET_RAW, writes nothing on the node): a node is in rotation when they keep arriving past --rotation.grace, whatever the health check says. --no-arrivals.enabled leaves rotation to the declared model (localtraffic_arrivals_meter_state{state=\"disabled\"}).").Default("true").BoolVar(&c.Enabled)
	app.Flag("arrivals.internal-cidrs", "Comma-separated CIDRs whose connection attempts are never external arrivals, beside what kube-proxy's local detector (its /configz: detectLocalMode, clusterCIDR, detectLocal) calls pod traffic and the node's own addresses; while /configz is unread, this node's spec.podCIDRs stand in for the detector. Set it only where kube-proxy sends these sources to every endpoint some other way.").StringVar(&c.internalCIDRs)
	flagvalue.Int(app, "arrivals.max-packet-rate", "The packets per second, per IP family, the meter counts at most: past it the meter gives packets back uncounted, and the kernel filter passes only the attempts of a sample of the source addresses, each source's in full, so that a flood costs the node a bounded share of a core (localtraffic_arrivals_missed_total; counts are then lower bounds).", strconv.Itoa(DefaultMaxPacketRate), &c.MaxPacketRate)
	flagvalue.Duration(app, "arrivals.quiet-period", "A pause without new connection attempts at a destination that ends their run: attempts must keep arriving past --rotation.grace without such a pause to put a node in rotation.", DefaultQuietPeriod.String(), &c.QuietPeriod)
}

// Validate checks the parsed flags and fills InternalCIDRs. Its errors are one line naming the flag.
func (c *FlagConfig) Validate() error {
	if c.QuietPeriod <= 0 {
		return fmt.Errorf("bad --arrivals.quiet-period %s: must be positive", c.QuietPeriod)
	}
	if c.MaxPacketRate <= 0 {
		return fmt.Errorf("bad --arrivals.max-packet-rate %d: must be positive", c.MaxPacketRate)
	}
	c.InternalCIDRs = nil
	if c.internalCIDRs != "" {
		for _, s := range strings.Split(c.internalCIDRs, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("bad --arrivals.internal-cidrs %q: want comma-separated CIDRs", c.internalCIDRs)
			}
			c.InternalCIDRs = append(c.InternalCIDRs, p)
		}
	}
	return nil
}

// Meter is the meter's Config for the command line, logging to logger.
func (c FlagConfig) Meter(logger *slog.Logger) Config {
	return Config{QuietPeriod: c.QuietPeriod, MaxPacketRate: c.MaxPacketRate, Logger: logger}
}
