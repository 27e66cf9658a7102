package scrape

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
)

// Config is the node model's command line, registered by RegisterFlags: what serves Services on the node, the
// windows of the rotation evidence, and the state file.
type Config struct {
	// Dataplane is DataplaneKubeProxy, DataplaneReplacement, or "" (auto: detected); set by Validate.
	Dataplane DataplaneKind
	// ExternalIPWindow, Grace and LossHold are GathererConfig's.
	ExternalIPWindow, Grace, LossHold time.Duration
	StateFile                         string // StateFileConfig.Path; "": none

	dataplane string
}

// RegisterFlags defines the node model's flags on app.
func (c *Config) RegisterFlags(app *kingpin.Application) {
	app.Flag("dataplane", "What serves Services on this node: auto (a kube-proxy replacement only on positive evidence: no kube-proxy rule and a link it creates, cilium_host, bpfin.cali, ovn-k8s-mp0 or kube-dummy-if; otherwise kube-proxy, missing or not programmed when it has no rule), kube-proxy, or replacement (Cilium, Calico eBPF, OVN-Kubernetes, kube-router: API view and health check node ports decide).").Default("auto").StringVar(&c.dataplane)
	flagvalue.Duration(app, "externalip.evidence-window", "A kube-proxy drop rule counter that grew this recently is evidence of arrivals (iptables modes): an externalIP not assigned to this node is in rotation where the arrivals meter does not watch it, and, where the meter is off or blind, a blackhole whose counter grew is traffic_lost (held for --rotation.loss-hold if that is longer).", "10m", &c.ExternalIPWindow)
	flagvalue.Duration(app, "rotation.grace", "How long new connection attempts must keep arriving at a destination this node drops before they put it in rotation: longer than a load balancer takes to deregister a node whose health check fails (AWS target groups 30s x 2, GCE 8s x 3; docs/rotation.md).", DefaultGrace.String(), &c.Grace)
	flagvalue.Duration(app, "rotation.loss-hold", "How long a blackhole stays traffic_lost (critical) after the last connection attempt lost there: longer than the pause between a rare client's attempts, so the page stays up for a client that tries at least every 10 minutes (docs/rotation.md).", DefaultLossHold.String(), &c.LossHold)
	app.Flag("state.file", "Node-local file that carries the arrival runs, the times destinations were first found dropped and kube-proxy seen over an exporter restart, so a paging node pages again at its first scrape (the DaemonSet mounts a hostPath directory for it); empty: none. A corrupt, unreadable or foreign file is reported (localtraffic_state_file_state) and replaced, never trusted.").Default(DefaultStateFile).StringVar(&c.StateFile)
}

// Validate checks the parsed flags and fills Dataplane. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	switch c.dataplane {
	case "auto":
		c.Dataplane = ""
	case string(DataplaneKubeProxy), string(DataplaneReplacement):
		c.Dataplane = DataplaneKind(c.dataplane)
	default:
		return fmt.Errorf("bad --dataplane %q: want auto, kube-proxy or replacement", c.dataplane)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--externalip.evidence-window", c.ExternalIPWindow}, {"--rotation.grace", c.Grace}, {"--rotation.loss-hold", c.LossHold}} {
		if d.v <= 0 {
			return fmt.Errorf("bad %s %s: must be positive", d.flag, d.v)
		}
	}
	if c.StateFile != "" && (strings.HasSuffix(c.StateFile, "/") || filepath.Base(c.StateFile) == ".") {
		return fmt.Errorf("bad --state.file %q: want a file path (the directory must exist), or empty for none", c.StateFile)
	}
	return nil
}
