package kubeview

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/apimachinery/pkg/labels"
)

// Config is the API view's command line, registered by RegisterFlags: how to reach the API server, which node
// the view is of, whether the announcers' objects are read, and the Services the cluster owner excludes.
type Config struct {
	Kubeconfig string // "": the in-cluster config
	NodeName   string
	// Announcers says whether the announcers' own objects are read (NewAnnouncers); CiliumNamespace is where
	// Cilium's L2 announcement Leases are.
	Announcers      bool
	CiliumNamespace string
	// IgnoreSelector selects the Services the cluster owner excludes (WithIgnoreSelector); nil: none. Set by
	// Validate.
	IgnoreSelector labels.Selector

	ignoreSelector string
}

// RegisterFlags defines the API view's flags on app; getenv supplies the node name's default (NODE_NAME, which
// the DaemonSet sets from spec.nodeName).
func (c *Config) RegisterFlags(app *kingpin.Application, getenv func(string) string) {
	app.Flag("kubeconfig", "Path to a kubeconfig; empty uses the in-cluster config.").StringVar(&c.Kubeconfig)
	app.Flag("node-name", "The node this exporter runs on (default $NODE_NAME).").Default(getenv("NODE_NAME")).StringVar(&c.NodeName)
	app.Flag("announcers.enabled", "Read who announces each load balancer IP (and the externalIPs a Cilium L2 announcement policy selects) in the announcers' own objects: MetalLB's ServiceL2Status and this node's ServiceBGPStatus, Cilium's L2 announcement Leases and policies (needs list and watch on them; an absent CRD or a refused read is exported in localtraffic_announcer_source_state, never an error). A node an announcer names is in rotation for the address at once (reason announced_here). kube-vip's, OpenELB's and PureLB's Service annotations are read either way.").Default("true").BoolVar(&c.Announcers)
	app.Flag("announcers.cilium-namespace", "The namespace of Cilium's L2 announcement Leases (cilium-l2announce-<namespace>-<service>): the Cilium agents' namespace.").Default("kube-system").StringVar(&c.CiliumNamespace)
	app.Flag("services.ignore-selector", "Label selector (kubectl's syntax, e.g. team=legacy,tier!=edge) of the Services the cluster owner excludes: still measured, exported as ignored (localtraffic_service_ignored_info), paged by no shipped alert. A Service's own localtraffic.io/intentional-placement annotation does the same for one Service.").StringVar(&c.ignoreSelector)
}

// Validate checks the parsed flags and fills IgnoreSelector. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("no node name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)")
	}
	if c.ignoreSelector != "" {
		sel, err := labels.Parse(c.ignoreSelector)
		if err != nil {
			// The parser's messages may span lines; the exporter prints one.
			return fmt.Errorf("bad --services.ignore-selector %q: %s", c.ignoreSelector, strings.Join(strings.Fields(err.Error()), " "))
		}
		if sel.Empty() {
			return fmt.Errorf("bad --services.ignore-selector %q: selects every Service; leave it out to ignore none", c.ignoreSelector)
		}
		c.IgnoreSelector = sel
	}
	if c.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			return fmt.Errorf("bad --kubeconfig: %w", err)
		}
	}
	return nil
}
