package eventwriter

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/localtraffic/localtraffic-exporter/internal/flagvalue"
)

// Config is the Event writer's command line, registered by RegisterFlags. Off by default: then nothing of it
// runs (no lease, no list, no poll, no write).
type Config struct {
	Enabled bool
	// LeaseNamespace and LeaseName are the Lease the writers elect their leader over; Identity is this pod's
	// name (the Lease's holder and the Events' reportingInstance).
	LeaseNamespace, LeaseName, Identity string
	// PeersNamespace and PeersService name the exporters' own Service, whose EndpointSlices list the peers.
	PeersNamespace, PeersService string
	// PeersScheme is how peers are asked: https (kube-rbac-proxy in front of each exporter) or http.
	PeersScheme string
	// CAFile verifies the peers' serving certificates; "": not verified (docs/exposure.md says what that trusts).
	CAFile string
	// TokenFile is the bearer token sent to peers over https: the pod's ServiceAccount token, read again at each
	// poll (the kubelet rotates it).
	TokenFile string
	// Poll is how often the leader asks every peer; PeerTimeout the longest one peer's answer may take.
	Poll, PeerTimeout time.Duration
	// Rate and Burst are the token bucket of Event writes: Events per second, and how many at once.
	Rate  float64
	Burst int

	peers, podNamespace string
}

// DefaultTokenFile is where the kubelet mounts the pod's ServiceAccount token.
const DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// RegisterFlags defines the writer's flags on app; getenv supplies the defaults from the pod's downward API
// (POD_NAMESPACE, POD_NAME).
func (c *Config) RegisterFlags(app *kingpin.Application, getenv func(string) string) {
	ns := getenv("POD_NAMESPACE")
	c.podNamespace = ns
	app.Flag("events.write", "Write one Kubernetes Event (events.k8s.io/v1) per ended exposure episode, regarding its Service, from one writer per cluster: the exporters elect a leader over a Lease, which polls every exporter's /episodes. Needs its own RBAC (deploy/README.md). Off: no Lease, no poll, no write.").Default("false").BoolVar(&c.Enabled)
	app.Flag("events.lease-namespace", "Namespace of the writers' Lease (default $POD_NAMESPACE).").Default(ns).StringVar(&c.LeaseNamespace)
	app.Flag("events.lease-name", "Name of the writers' Lease; it also keeps each peer's cursor, so a new leader neither drops nor repeats an episode.").Default("localtraffic-exporter-events").StringVar(&c.LeaseName)
	app.Flag("events.identity", "This writer's identity: the Lease's holder and the Events' reportingInstance (default $POD_NAME).").Default(getenv("POD_NAME")).StringVar(&c.Identity)
	app.Flag("events.peers-service", "namespace/name of the exporters' own Service: its EndpointSlices list the exporters the leader polls (default $POD_NAMESPACE/localtraffic-exporter).").StringVar(&c.peers)
	app.Flag("events.peers-scheme", "How the leader asks peers for /episodes: https (kube-rbac-proxy in front of each exporter; the pod's ServiceAccount token is sent) or http (no token sent).").Default("https").StringVar(&c.PeersScheme)
	app.Flag("events.peers-ca-file", "CA bundle that verifies the peers' serving certificates; empty: not verified (docs/exposure.md, \"Events\", says what that trusts).").StringVar(&c.CAFile)
	app.Flag("events.token-file", "Bearer token sent to peers over https.").Default(DefaultTokenFile).StringVar(&c.TokenFile)
	flagvalue.Duration(app, "events.poll-interval", "How often the leader asks every peer for its ended episodes.", "10s", &c.Poll)
	flagvalue.Duration(app, "events.peer-timeout", "Longest time one peer's answer may take; a peer slower, refused or answering garbage is counted unreachable and asked again at the next poll.", "3s", &c.PeerTimeout)
	app.Flag("events.rate", "Events written per second at most (a token bucket); episodes over it wait, and repeats at one destination that waited are merged into one Event's series.").Default("0.5").Float64Var(&c.Rate)
	flagvalue.Int(app, "events.burst", "Events written at once at most (the token bucket's size).", "20", &c.Burst)
}

// Validate checks the parsed flags. Off, only their spelling is: nothing of it runs.
func (c *Config) Validate() error {
	if c.PeersScheme != "https" && c.PeersScheme != "http" {
		// kingpin's own enum error does not name the flag.
		return fmt.Errorf("bad --events.peers-scheme %q: want https or http", c.PeersScheme)
	}
	if !c.Enabled {
		return nil
	}
	if c.peers == "" {
		c.peers = c.podNamespace + "/localtraffic-exporter"
	}
	ns, name, ok := strings.Cut(c.peers, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("bad --events.peers-service %q: want namespace/name", c.peers)
	}
	c.PeersNamespace, c.PeersService = ns, name
	switch {
	case c.LeaseNamespace == "":
		return errors.New("no --events.lease-namespace: set it or POD_NAMESPACE (the DaemonSet passes metadata.namespace)")
	case c.LeaseName == "":
		return errors.New("bad --events.lease-name: empty")
	case c.Identity == "":
		return errors.New("no --events.identity: set it or POD_NAME (the DaemonSet passes metadata.name)")
	case c.Poll <= 0:
		return fmt.Errorf("bad --events.poll-interval %s: must be positive", c.Poll)
	case c.PeerTimeout <= 0:
		return fmt.Errorf("bad --events.peer-timeout %s: must be positive", c.PeerTimeout)
	case !(c.Rate > 0):
		return fmt.Errorf("bad --events.rate %v: must be positive", c.Rate)
	case c.Burst < 1:
		return fmt.Errorf("bad --events.burst %d: must be at least 1", c.Burst)
	}
	if c.CAFile != "" {
		if _, err := os.Stat(c.CAFile); err != nil {
			return fmt.Errorf("bad --events.peers-ca-file: %w", err)
		}
	}
	return nil
}
