package scrape

import (
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// Input names one source the gatherer reads for a scrape. A collector's self-metrics count the inputs it
// renders: their gathering time is part of its duration, and a failed input is its failure.
type Input string

// The gatherer's inputs.
const (
	InputAPI          Input = "api"           // the API view snapshot (Services, EndpointSlices, Node)
	InputNode         Input = "node"          // this node's Node object alone
	InputRules        Input = "rules"         // one read of kube-proxy's rules
	InputKubeProxy    Input = "kube_proxy"    // kube-proxy's /healthz and /livez
	InputHealthChecks Input = "health_checks" // every health check node port probe, per family
	InputAddrs        Input = "addrs"         // this host's addresses (netlink)
	InputInformers    Input = "informers"     // the informers' own status
	InputArrivals     Input = "arrivals"      // the arrivals meter's snapshot
)

// State is everything one scrape read and decided. The gatherer builds it once per scrape; every collector
// renders it and none reads a source itself, so all series of one scrape speak of the same inputs. A State is
// immutable once Gather returns.
type State struct {
	// Node is this node's state: from the API snapshot, or from the Node informer alone when the snapshot
	// failed (kube-proxy's probes and the Node series need nothing else).
	Node    kubeview.NodeState
	NodeErr error
	// APIErr is why the API snapshot could not be taken (informers not synced); Services is empty then.
	APIErr error
	// Rules is the read of the dataplane (kube-proxy's rules); nil when not read (RulesErr says why, unless no
	// reader is configured: RulesConfigured false).
	Rules           dataplane.Rules
	RulesErr        error
	RulesConfigured bool
	// KubeProxy is what kube-proxy's health server answered.
	KubeProxy KubeProxyState
	// Services is one entry per Local Service, sorted by namespace and name. The node model shares an entry
	// between the States it publishes while the Service's result stays the same (Rev): never change one.
	Services []*ServiceResult
	// Source is what decided the verdicts: SourceRules or SourceAPI.
	Source verdict.Source
	// Dataplane is DataplaneKubeProxy, DataplaneIPVS, DataplaneReplacement or DataplaneCilium.
	Dataplane DataplaneKind
	// Replacement names the kube-proxy replacement auto detection found and the link that showed it; "" when
	// none was (or the flag said so).
	Replacement string
	// NotProgrammed: the dataplane is kube-proxy, and its rules were read and hold no kube-proxy rule at all:
	// before kube-proxy's first sync, or kube-proxy never ran here. Nothing drops, so no blackhole.
	NotProgrammed bool
	Informers     []kubeview.InformerStatus
	// LocalAddrs are this host's addresses; AddrsErr why they could not be listed.
	LocalAddrs []net.IP
	AddrsErr   error
	// AssignedAddrs are the addresses on this host's real interfaces (not kube-ipvs0 and other NOARP dummies,
	// where IPVS binds Service addresses on every node); NodePortAddrs the local addresses kube-proxy accepts
	// NodePorts on (its nodePortAddresses).
	AssignedAddrs []net.IP
	NodePortAddrs []net.IP
	// Arrivals is what the arrivals meter observed.
	Arrivals ArrivalsState
	// KubeProxyConfig is kube-proxy's configuration as its /configz (or a flag) gave it: where its health
	// servers listen, whether it programs externalIPs. KubeProxyConfigErr is why /configz could not be read
	// (the last known configuration, else kube-proxy's defaults, is used then).
	KubeProxyConfig    nodeprobe.KubeProxyConfig
	KubeProxyConfigErr error
	// KubeProxyConfigState says where KubeProxyConfig came from.
	KubeProxyConfigState ConfigState
	// Announcers is each load balancer announcer source's state (kubeview.Snapshot.Announcers); nil when the
	// view reads no announcers.
	Announcers map[announce.Source]announce.SourceState
	// StateFile is the state file's state (localtraffic_state_file_state): what this process started from.
	StateFile string
	// Exposure is the exposure recorder's totals and histogram (package exposure); nil outside the node model,
	// which alone records episodes.
	Exposure *exposure.Snapshot
	// Epoch is the node model's count of changes to what every Service's decision and rendering read (the
	// rules read, the node, its addresses, kube-proxy's configuration, the meter's state): a renderer's kept
	// series of a Service hold while both Epoch and the Service's Rev do. 0 outside the model.
	Epoch uint64

	took map[Input]time.Duration
}

// ErrNotYetRead is an input the node model has not read yet (just started, its first read still under way): a
// State says so rather than show an answer nobody gave. Collectors take it for "no data yet".
var ErrNotYetRead = errors.New("not read yet: the exporter just started")

// Took is how long gathering the input took in this scrape (0 when it was not gathered).
func (s *State) Took(in Input) time.Duration { return s.took[in] }

// KubeProxyState is one probe of kube-proxy's health server.
type KubeProxyState struct {
	Err     error // no address to probe: Healthz and Livez are empty
	Healthz nodeprobe.KubeProxyHealth
	Livez   nodeprobe.KubeProxyHealth
}

// ServiceResult is one Local Service: what the API said, what was probed and read, and the verdict.
type ServiceResult struct {
	Service kubeview.ServiceState
	// Checks is the health check node port's answer per family, in the Service's family order; empty when
	// the Service has none.
	Checks []FamilyCheck
	// Ports is what kube-proxy's rules hold per family and Service port, for the families whose rules were
	// read; empty when the rules were not read.
	Ports []PortResult
	// Mismatch: the rules (or, without rules, a health check node port's localEndpoints) disagree with the
	// API view in some family. MismatchKnown: some comparison was possible at all.
	Mismatch      bool
	MismatchKnown bool
	Verdict       verdict.Verdict
	// Rev is the node model's revision of this result: it changes whenever anything above does, so a
	// renderer may keep what it rendered of a Service for as long as Rev and State.Epoch hold. 0 (the full
	// recomputation, and tests) promises nothing: render it afresh.
	Rev uint64
}

// FamilyCheck is one family's probe of the health check node port.
type FamilyCheck struct {
	Family  corev1.IPFamily
	Address string // where it was probed; "" with ResultNoAddress
	nodeprobe.HealthCheck
}

// PortResult is one Service port in one family as kube-proxy's rules programmed it.
type PortResult struct {
	Family corev1.IPFamily
	Port   kubeview.PortEndpoints
	Label  string // the port label: its name, or its number when unnamed
	Rules  dataplane.PortState
	// DroppedPackets is the monotonic total of the port's drop rule counters in the family (see dropTotals).
	DroppedPackets uint64
	Mismatch       bool
	// GoneEndpoints counts the rules' local endpoints that the API no longer lists on this node (a deleted
	// pod); when they are all the rules have, the port drops its external traffic in fact (matchEndpoints).
	GoneEndpoints int
}

// portLabel is the port's name, or its number when unnamed (a single-port Service).
func portLabel(p kubeview.PortEndpoints) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprint(p.Port)
}

// ConfigState is where the scrape's kube-proxy configuration came from (localtraffic_kube_proxy_config_state).
type ConfigState string

// Config states.
const (
	// ConfigRead: kube-proxy's /configz answered (now, or within its cache's minute).
	ConfigRead ConfigState = "read"
	// ConfigLastKnown: /configz is unreadable now; the last configuration read holds.
	ConfigLastKnown ConfigState = "last_known"
	// ConfigDefaults: /configz was never read; kube-proxy's defaults are assumed (its local detector unknown).
	ConfigDefaults ConfigState = "defaults"
	// ConfigNotRead: the exporter does not read /configz.
	ConfigNotRead ConfigState = "not_read"
)

// ConfigStates lists every ConfigState.
var ConfigStates = []ConfigState{ConfigRead, ConfigLastKnown, ConfigDefaults, ConfigNotRead}
