// Package verdict is the one decision behind localtraffic_blackhole and `kubectl localtraffic status`: for one
// node and one Service with externalTrafficPolicy Local, which ways in (entries) send the Service's external
// traffic to the node, and which of them kube-proxy drops there for lack of a local endpoint.
//
// Where it lives, and why: its two front ends are the exporter (package collector, which gathers what the node
// shows: the health check node port's answers, kube-proxy's rules, the node's addresses and rule counters) and
// the plugin (its package placement, cmd/kubectl-localtraffic/internal/placement, which has the API alone). The
// decision reads the API view both already share (package kubeview) and its own small Evidence types, and
// imports nothing else of this module: the plugin gets it without pulling in the exporter's collector, nodeprobe
// (netlink, HTTP probes) or nodeprobe/kernelrules (iptables and nft readers), and the exporter adapts what it read
// into Evidence in one place (scrape/verdict.go). It sits under kubeview as a package of its own: it is not
// the API view itself but what the API view and the node's evidence mean together, and kubeview imports neither.
//
// The rule is documented in docs/metrics.md ("The blackhole verdict"); TestFrontEndsAgree
// (cmd/kubectl-localtraffic/internal/placement/frontends_test.go) runs one set of fixtures through both front
// ends and requires the same answer, or the plugin's explicit "cannot tell".
package verdict

import (
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// Source is what decided which entries are dropped (localtraffic_blackhole_source_info's source).
type Source string

// Verdict sources.
const (
	SourceRules Source = "rules" // kube-proxy's rules, read on the node
	SourceAPI   Source = "api"   // the API view, counted as kube-proxy counts
)

// Kind is how external traffic enters the node for a Service.
type Kind string

// Entry kinds.
const (
	NodePort       Kind = "node_port"        // a NodePort on any of the node's addresses
	LoadBalancerIP Kind = "load_balancer_ip" // a status.loadBalancer.ingress IP kube-proxy programs
	ExternalIP     Kind = "external_ip"      // a spec.externalIPs address
)

// Destination is one way in: the traffic of one IP family to one address and port of one Service port. Node
// evidence is asked about destinations, so every source of evidence (rules, counters, assigned addresses, and
// later packets seen on the wire) keys on the same thing.
type Destination struct {
	Namespace, Service string
	Port               string // the Service port's name, "" when unnamed (kube-proxy's key)
	Protocol           corev1.Protocol
	Family             corev1.IPFamily
	Kind               Kind
	Address            string // "" for a NodePort (any node address)
	DestPort           int32  // the NodePort, or the Service port for an address
}

// String names the destination for a person: "NodePort 30090/TCP", "externalIP 192.0.2.70:80/TCP".
func (d Destination) String() string {
	switch d.Kind {
	case NodePort:
		return fmt.Sprintf("NodePort %d/%s", d.DestPort, d.Protocol)
	case LoadBalancerIP:
		return fmt.Sprintf("load balancer IP %s/%s", hostPort(d.Address, d.DestPort), d.Protocol)
	}
	return fmt.Sprintf("externalIP %s/%s", hostPort(d.Address, d.DestPort), d.Protocol)
}

func hostPort(addr string, port int32) string {
	if kubeview.IPFamilyOf(addr) == corev1.IPv6Protocol {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// Rotation says whether an entry's traffic is sent to the node.
type Rotation string

// Rotations.
const (
	In  Rotation = "in"
	Out Rotation = "out"
	// Unknown: only the node can tell (the plugin has no node evidence); the exporter never answers it.
	Unknown Rotation = "unknown"
)

// Evidence is what the node itself shows. The exporter gathers it on the node each scrape; the plugin, which
// sees the API alone, passes none (a nil *Evidence), and gets Unknown where the answer needs it.
type Evidence struct {
	// HealthChecks is the answer of the Service's health check node port on this node, per family; a family
	// absent was not probed.
	HealthChecks map[corev1.IPFamily]HealthCheck
	// Rules is what kube-proxy programmed; nil when its rules could not be read (the API view decides drops).
	Rules Rules
	// Addresses is what the node's interfaces hold; nil: not known (no address counts as assigned, and every
	// family as having NodePort addresses).
	Addresses Addresses
	// Arrivals is evidence from kube-proxy's drop rule counters that a destination's traffic reaches this node
	// and is dropped (iptables modes); nil: none. It puts an externalIP in rotation only where the meter does
	// not watch it, and it makes a blackhole traffic_lost only where the meter cannot see: a working meter sees
	// every attempt a counter counts, and its arrivals are subject to the grace window.
	Arrivals Arrivals
	// Observed is what the node's arrivals meter saw on the wire; nil: no meter (disabled), and rotation rests
	// on the declared model and the counters alone.
	Observed Observed
	// Grace is how long new connection attempts must keep arriving at a destination this node drops before
	// they put the node in rotation for it: longer than a load balancer takes to deregister a node whose
	// health check fails (docs/rotation.md).
	Grace time.Duration
	// LossHold is how long a blackhole stays traffic_lost after the last attempt the meter saw arrive at the
	// destination while it was dropped: longer than the pause between a rare client's attempts, so the reason
	// does not fall back to no_traffic_seen between them and restart the alerts' for: each time
	// (docs/rotation.md, "Loss hold"). 0: only while the run of arrivals is ongoing.
	LossHold time.Duration
	// Now is the time of the scrape the observations were taken at.
	Now time.Time
}

// Addresses is what the node's own interfaces hold.
type Addresses interface {
	// Assigned reports whether addr is assigned to a real interface of this node, one the network delivers it
	// to (kube-vip in ARP mode, keepalived, an announcer, a static configuration). Addresses on kube-ipvs0,
	// kube-dummy-if or any NOARP dummy are not: IPVS and kube-router bind every Service address there on every
	// node, and that routes nothing to the node.
	Assigned(addr string) bool
	// NodePorts reports whether this node has an address of family f inside kube-proxy's nodePortAddresses:
	// without one, kube-proxy serves no NodePort of that family here and no client can use one.
	NodePorts(f corev1.IPFamily) bool
}

// Observed is the arrivals meter's view of the node's destinations.
type Observed interface {
	// Observe returns what the meter saw of d's traffic.
	Observe(d Destination) Observation
}

// Observation is what the arrivals meter saw of one destination: new connection attempts from outside the
// cluster (TCP SYN, SCTP INIT, UDP datagrams).
type Observation struct {
	// Watched: the meter is counting d. False when it is blind (not running, permission denied, failed): then
	// nothing below means anything, and nothing is concluded from silence.
	Watched  bool
	Attempts uint64
	// ActiveSince is the first attempt of the current run (no pause of the meter's quiet period), LastSeen the
	// latest; zero when none arrived.
	ActiveSince, LastSeen time.Time
	// Ongoing: the run has not ended (the latest attempt is more recent than the meter's quiet period).
	Ongoing bool
	// Silent: the meter has watched d for longer than its quiet period and nothing arrived within it but
	// single attempts of sources not seen again (a port scan: Repeats).
	Silent bool
	// DroppedSince is when the exporter first found d dropped, in every scrape since; zero when it was not
	// dropped in the previous scrape.
	DroppedSince time.Time
	// SetAside: at d (a NodePort) the meter set some arrivals aside, those of Checkers and of sources still
	// proving their cadence, and Clients counts the others. False: every arrival is a client's.
	SetAside bool
	Clients  ClientAttempts
	// Repeats: the meter told at d the attempts that repeated their source within a few seconds (a client
	// whose dropped SYN the kernel retransmits, or that tries again) from those that did not (a port scan's
	// single SYN, a datagram from a source never seen again), and Repeated counts the former; Clients.Repeated
	// is their part of the clients'. A lost attempt, and rotation by arrivals at a dropped destination, rest on
	// repeated attempts alone. False: nothing tells them apart, and every attempt counts.
	Repeats  bool
	Repeated Repeated
	// Checkers are the sources that arrive at d at a steady cadence, like a load balancer's health checker.
	Checkers []Checker
	// LastNewFlow (UDP) is the latest datagram that started a flow (a source address and port not seen
	// recently); zero when none did since the meter began looking, and for other protocols.
	LastNewFlow time.Time
}

// ClientAttempts is an Observation's count of what clients sent.
type ClientAttempts struct {
	Attempts              uint64
	ActiveSince, LastSeen time.Time
	Ongoing               bool
	Repeated              Repeated
	// Silent is Observation.Silent of the clients' arrivals alone: what the steady sources and the ones still
	// proving their cadence sent does not break it.
	Silent bool
}

// Repeated is the part of a count whose source came again within a few seconds, as a run of its own.
type Repeated struct {
	Attempts              uint64
	ActiveSince, LastSeen time.Time
	Ongoing               bool
}

// Checker is a source that arrives at a NodePort at a steady cadence.
type Checker struct {
	Addr     string
	Interval time.Duration
}

// HealthCheck is one family's answer of a health check node port.
type HealthCheck struct {
	StatusCode int    // the HTTP status; 0 when no HTTP answer came
	Result     string // the probe's result word (ok, unavailable, refused, timeout, no_address, ...)
}

// Rules is kube-proxy's programmed state as read on the node.
type Rules interface {
	// HasFamily reports whether that family's rules were read.
	HasFamily(f corev1.IPFamily) bool
	// Drops reports whether the family's rules drop d's traffic for lack of a local endpoint.
	Drops(d Destination) bool
}

// Arrivals is kube-proxy's counters' evidence that traffic for a destination reaches this node: a drop rule
// counter that grew within the evidence window (iptables modes; sampled, reset by every sync). Only a drop
// rule counts, so growth is attempts the node dropped: lost traffic.
type Arrivals interface {
	// Arriving returns why d's traffic is seen reaching this node; ok is false when nothing shows it.
	Arriving(d Destination) (why string, ok bool)
}

// Input is everything one decision reads: the API view of one node and one Service, and the node's evidence.
type Input struct {
	Service kubeview.ServiceState
	Node    kubeview.NodeState
	// Evidence is nil when there is none (the plugin).
	Evidence *Evidence
}

// Basis is what put an entry in rotation.
type Basis string

// Bases: declared first, then observed.
const (
	BasisHealthCheck Basis = "health_check" // the node's health check node port answers 200 (declared)
	BasisEligible    Basis = "eligible"     // an eligible node with a NodePort address, or a load balancer target without a health check (declared)
	BasisAddress     Basis = "address"      // the address is assigned to a real interface of this node (declared)
	BasisCounter     Basis = "drop_counter" // kube-proxy's drop rule counter grew (observed)
	BasisArrivals    Basis = "arrivals"     // new connection attempts kept arriving longer than the grace window (observed)
)

// Reason says what a blackhole rests on: the alerts' severity follows it (docs/rotation.md).
type Reason string

// Reasons, strongest first. The first five page as critical: traffic is lost now, or the node's own health
// check or an announcer keeps it in rotation. The others are warnings: a blackhole nothing has reached yet.
const (
	// ReasonHealthCheckIgnored: new connection attempts keep arriving past the grace window while the node's
	// health check node port fails: the load balancer does not honour healthCheckNodePort.
	ReasonHealthCheckIgnored Reason = "health_check_ignored"
	// ReasonUDPFlowPinned: UDP datagrams keep arriving past the grace window while the node's health check
	// node port fails, and every one of them belongs to a flow that was already arriving before the node
	// began dropping: the load balancer keeps existing flows on the node it chose (its flow idle timeout, or
	// connection draining), it does not send new ones. The datagrams are lost all the same.
	ReasonUDPFlowPinned Reason = "udp_flow_pinned"
	// ReasonTrafficLost: attempts are observed arriving at a destination this node drops: the meter saw one
	// within the loss hold, or (the meter off or blind) a drop rule counter grew within the evidence window.
	ReasonTrafficLost Reason = "traffic_lost"
	// ReasonHealthCheckPassing: the node's own health check answers 200, so its load balancer keeps it, and
	// some port or family that reaches it that way is dropped.
	ReasonHealthCheckPassing Reason = "health_check_passing"
	// ReasonNoTrafficSeen: declared in rotation (an eligible NodePort, an assigned address) and the meter sees
	// nothing arrive: clients would be dropped, none is yet.
	ReasonNoTrafficSeen Reason = "no_traffic_seen"
	// ReasonNotObserved: declared in rotation, and nothing can see arrivals: the meter is off or blind and no
	// drop rule counter grew (nftables mode has none), or the plugin.
	ReasonNotObserved Reason = "not_observed"
)

// Critical reports whether a blackhole for reason r pages as critical.
func (r Reason) Critical() bool {
	return r == ReasonHealthCheckIgnored || r == ReasonUDPFlowPinned || r == ReasonTrafficLost || r == ReasonAnnouncedHere ||
		r == ReasonHealthCheckPassing
}

// Reasons lists every reason, strongest first.
var Reasons = []Reason{ReasonHealthCheckIgnored, ReasonUDPFlowPinned, ReasonTrafficLost, ReasonAnnouncedHere, ReasonHealthCheckPassing,
	ReasonNoTrafficSeen, ReasonNotObserved}

func stronger(a, b Reason) Reason {
	rank := func(r Reason) int {
		for i, x := range Reasons {
			if x == r {
				return len(Reasons) - i
			}
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// Entry is one destination and what was decided about it.
type Entry struct {
	Destination
	Rotation Rotation
	Why      string // what decided Rotation
	// Basis is what put the entry in rotation ("" when it is not).
	Basis Basis
	// Dropped: kube-proxy drops this destination's traffic for lack of a local endpoint (rules, or the API
	// view counted as kube-proxy counts).
	Dropped bool
	// Losing: attempts to this dropped destination are being lost: the meter saw one arrive since it was
	// dropped, within the loss hold (Evidence.LossHold) or the ongoing run, or, where the meter cannot see
	// the destination, kube-proxy's drop rule counter for it grew within the evidence window.
	Losing bool
	// Checkers are the steady sources whose arrivals were taken as a load balancer's health checks, not as
	// clients, although the Service does not declare its check (announce.AnnotationHealthCheck settles it):
	// set at a dropped NodePort only.
	Checkers []Checker
	// Reason is what a blackhole of this entry rests on ("" unless it is in rotation and dropped).
	Reason Reason
}

// FamilyVerdict is the verdict of one IP family of a Service.
type FamilyVerdict struct {
	Family corev1.IPFamily
	// Source is what decided Dropped: SourceRules when this family's rules were read, else SourceAPI.
	Source     Source
	Entries    []Entry
	InRotation bool // some entry is in rotation
	Drops      bool // some entry is dropped
	Blackhole  bool // some entry is in rotation and dropped
	// CannotTell: some dropped entry's rotation is Unknown (only without node evidence).
	CannotTell bool
	// Reason is the strongest reason of the family's blackholed entries.
	Reason Reason
}

// Verdict is the answer for one node and one Service.
type Verdict struct {
	// InRotation: external traffic for the Service is sent to this node, in some family.
	InRotation bool
	// Drops: this node drops some of the Service's external traffic for lack of a local endpoint.
	Drops bool
	// Blackhole: some family has an entry that is in rotation and dropped. Traffic arrives and vanishes
	// without a reset.
	Blackhole bool
	// CannotTell: no blackhole is known, but a dropped entry's rotation cannot be told without node evidence
	// (the plugin, for an externalIP): the node drops that traffic if the network sends it there.
	CannotTell bool
	Source     Source
	Families   []FamilyVerdict
	// Reason is the strongest reason of a blackhole ("" without one).
	Reason Reason
}

// Decide computes the verdict, family by family, as kube-proxy's per-family proxiers decide.
func Decide(in Input) Verdict {
	v := Verdict{Source: SourceAPI}
	if in.Evidence != nil && in.Evidence.Rules != nil {
		v.Source = SourceRules
	}
	for _, fam := range in.Service.Families {
		fv := decideFamily(in, fam)
		v.InRotation = v.InRotation || fv.InRotation
		v.Drops = v.Drops || fv.Drops
		v.Blackhole = v.Blackhole || fv.Blackhole
		v.CannotTell = v.CannotTell || fv.CannotTell
		v.Reason = stronger(v.Reason, fv.Reason)
		v.Families = append(v.Families, fv)
	}
	v.CannotTell = v.CannotTell && !v.Blackhole
	return v
}

// Receiver reports whether the node is a target of the Service's external traffic as the API shows it,
// before any health check: a load balancer's target set for a health-checked LoadBalancer Service, every
// node a client may address otherwise. A virtual node (no kube-proxy) is never one.
func Receiver(svc kubeview.ServiceState, node kubeview.NodeState) bool {
	if healthChecked(svc) {
		return node.LoadBalancerEligible()
	}
	return node.NodePortEligible()
}

func healthChecked(svc kubeview.ServiceState) bool {
	return svc.Type == corev1.ServiceTypeLoadBalancer && svc.HealthCheckNodePort != 0
}

func decideFamily(in Input, fam kubeview.FamilyEndpoints) FamilyVerdict {
	svc, family, ev := in.Service, fam.Family, in.Evidence
	fv := FamilyVerdict{Family: family, Source: SourceAPI}
	var rules Rules
	if ev != nil && ev.Rules != nil && ev.Rules.HasFamily(family) {
		rules, fv.Source = ev.Rules, SourceRules
	}
	lbIPs, extIPs := svc.AddressesOf(family)
	for _, p := range fam.Ports {
		add := func(kind Kind, addr string, port int32) {
			e := Entry{Destination: Destination{Namespace: svc.Namespace, Service: svc.Name, Port: p.Name,
				Protocol: p.Protocol, Family: family, Kind: kind, Address: addr, DestPort: port}}
			if rules != nil {
				e.Dropped = rules.Drops(e.Destination)
			} else {
				// A port with no endpoint anywhere is rejected on every node: an outage, not this node's blackhole.
				e.Dropped = p.ClusterWide && p.Local == 0
			}
			e.Rotation, e.Why, e.Basis = declared(in, fam, e.Destination)
			observe(in, &e)
			counted(in, &e)
			if e.Rotation == In && e.Dropped {
				e.Reason = reasonOf(in, e)
				fv.Reason = stronger(fv.Reason, e.Reason)
			}
			fv.Entries = append(fv.Entries, e)
			fv.InRotation = fv.InRotation || e.Rotation == In
			fv.Drops = fv.Drops || e.Dropped
			fv.Blackhole = fv.Blackhole || e.Rotation == In && e.Dropped
			fv.CannotTell = fv.CannotTell || e.Rotation == Unknown && e.Dropped
		}
		if p.NodePort != 0 {
			add(NodePort, "", p.NodePort)
		}
		if svc.Type == corev1.ServiceTypeLoadBalancer {
			for _, ip := range lbIPs {
				add(LoadBalancerIP, ip, p.Port)
			}
		}
		for _, ip := range extIPs {
			add(ExternalIP, ip, p.Port)
		}
	}
	return fv
}

// declared is the rotation the declared model gives a destination: the health check's answer, eligibility,
// kube-proxy's nodePortAddresses, an address on the node's own interface. Without node evidence (the plugin) it
// is Unknown where only arrivals can tell.
func declared(in Input, fam kubeview.FamilyEndpoints, d Destination) (Rotation, string, Basis) {
	node, ev, svc := in.Node, in.Evidence, in.Service
	if node.Virtual {
		return Out, virtualWhy, ""
	}
	in1 := func(why string, b Basis) (Rotation, string, Basis) { return In, why, b }
	// An announcer's record naming this node decides first (kube-vip in ARP mode and PureLB also put the address
	// on the interface: the record says the same, with the announcer's own reason); one naming another node
	// decides after the node's own interfaces, which the network delivers to whatever a record says.
	var (
		annRot    Rotation
		annWhy    string
		annBasis  Basis
		announcer bool
	)
	if d.Kind == LoadBalancerIP || d.Kind == ExternalIP {
		annRot, annWhy, annBasis, announcer = announced(node, svc, d, ev)
		if announcer && annRot == In {
			return annRot, annWhy, annBasis
		}
	}
	if d.Kind != NodePort && ev != nil && ev.Addresses != nil && ev.Addresses.Assigned(d.Address) {
		// An announcer (kube-vip in ARP mode, keepalived, PureLB, OpenELB) or a static configuration holds the
		// address here: the network delivers its traffic to this node, whatever the health check says.
		return in1("address assigned to an interface of this node", BasisAddress)
	}
	if announcer {
		return annRot, annWhy, annBasis
	}
	switch d.Kind {
	case ExternalIP:
		return externalIPRotation(ev, d)
	case NodePort:
		if ev != nil && ev.Addresses != nil && !ev.Addresses.NodePorts(d.Family) {
			return Out, fmt.Sprintf("no %s address of this node is inside kube-proxy's nodePortAddresses: no NodePort is served here", d.Family), ""
		}
	}
	if healthChecked(svc) {
		rot, why := loadBalancerRotation(node, ev, fam)
		switch {
		case rot == In:
			return in1(why, BasisHealthCheck)
		case ev == nil && node.LoadBalancerEligible() && svc.LBCheckOn(node) == announce.LBCheckMisdirected:
			return Unknown, "cannot observe from the API: the load balancer's health check does not ask healthCheckNodePort over HTTP, " +
				"so whether it keeps sending here only the node sees (the exporter on each node observes arrivals)", ""
		}
		return rot, why, ""
	}
	if d.Kind == LoadBalancerIP {
		if node.LoadBalancerEligible() {
			return in1(loadBalancerEligibleWhy(node), BasisEligible)
		}
		return Out, loadBalancerEligibleWhy(node), ""
	}
	if node.NodePortEligible() {
		return in1(nodePortWhy(node), BasisEligible)
	}
	if ev == nil {
		// The exclude label and a drain take a node out of load balancers; kube-proxy ignores both, so a client
		// that uses this node's address is still served or dropped here.
		return Unknown, "cannot observe from the API: " + nodePortWhy(node) + " takes the node out of load balancers only; " +
			"NodePort clients that use its address still reach it (the exporter on the node observes them)", ""
	}
	return Out, nodePortWhy(node), ""
}

// observe adds what the arrivals meter saw: a destination not declared in rotation is in rotation when new
// connection attempts keep arriving for longer than the grace window (counted from when the node started
// dropping them, so a load balancer that deregisters the node within the window is no evidence). Arrivals at
// the NodePort of a Service whose load balancer checks the traffic port are its health checks, never
// evidence: a node they find dropping is drained by the load balancer itself.
func observe(in Input, e *Entry) {
	ev := in.Evidence
	if ev == nil || ev.Observed == nil || in.Node.Virtual {
		return
	}
	o := ev.Observed.Observe(e.Destination)
	if !o.Watched {
		return
	}
	o = clientsOnly(in, e, o)
	if e.Dropped && o.Repeats {
		// A port scan is not a client: where the meter tells them, only attempts that repeated their source
		// are lost ones, and only they keep arriving for rotation's sake. A destination the node serves keeps
		// every arrival: nothing is lost there, and no SYN of a served client is retransmitted.
		o.Attempts, o.ActiveSince, o.LastSeen, o.Ongoing = o.Repeated.Attempts, o.Repeated.ActiveSince, o.Repeated.LastSeen, o.Repeated.Ongoing
	}
	dropStart := ev.Now
	if !o.DroppedSince.IsZero() {
		dropStart = o.DroppedSince
	}
	// A lost attempt is one that arrived after the first scrape that found the destination dropped. The hold
	// keeps an entry losing between a rare client's attempts; it never starts a loss (it needs a lost attempt),
	// ends when the destination is served (DroppedSince is forgotten then, and an attempt before a new drop is
	// no lost one), and changes no rotation: an entry in rotation by arrivals alone leaves it when its run
	// ends, hold or not.
	lost := e.Dropped && !o.DroppedSince.IsZero() && o.LastSeen.After(o.DroppedSince)
	e.Losing = lost && (o.Ongoing || ev.Now.Sub(o.LastSeen) < ev.LossHold)
	if e.Rotation == In || o.Attempts == 0 || !o.Ongoing {
		return
	}
	if e.Kind == NodePort && trafficPortChecked(in) {
		e.Why += "; the attempts arriving at the NodePort are the load balancer's traffic-port health checks"
		return
	}
	start := o.ActiveSince
	if e.Dropped && dropStart.After(start) {
		start = dropStart
	}
	if lasted := o.LastSeen.Sub(start); lasted >= ev.Grace {
		e.Rotation, e.Basis = In, BasisArrivals
		e.Why = fmt.Sprintf("new connection attempts kept arriving for %s, longer than the grace window %s (declared: %s)",
			lasted.Round(time.Second), ev.Grace, e.Why)
	}
}

// watched reports whether the arrivals meter sees d's traffic.
func watched(ev *Evidence, d Destination) bool {
	return ev != nil && ev.Observed != nil && ev.Observed.Observe(d).Watched
}

// counted adds kube-proxy's drop counters where the meter cannot see: a dropped destination whose drop rule
// counter grew within the evidence window is losing traffic. Where the meter watches, it alone decides: it
// counts every attempt the counter counts, from the first one, and holds them to the grace window.
func counted(in Input, e *Entry) {
	ev := in.Evidence
	if !e.Dropped || e.Losing || ev == nil || ev.Arrivals == nil || in.Node.Virtual || watched(ev, e.Destination) {
		return
	}
	if _, ok := ev.Arrivals.Arriving(e.Destination); ok {
		e.Losing = true
	}
}

// reasonOf is what a blackholed entry rests on.
func reasonOf(in Input, e Entry) Reason {
	ev := in.Evidence
	switch {
	case e.Basis == BasisAnnouncer:
		return ReasonAnnouncedHere
	case e.Basis == BasisArrivals && healthChecked(in.Service) && ev != nil && ev.HealthChecks[e.Family].StatusCode != http.StatusOK:
		if pinnedFlowsOnly(ev, e) {
			return ReasonUDPFlowPinned
		}
		return ReasonHealthCheckIgnored
	case e.Losing || e.Basis == BasisArrivals || e.Basis == BasisCounter:
		return ReasonTrafficLost
	case e.Basis == BasisHealthCheck && unsentByHealthCheck(in, e):
		return ReasonNoTrafficSeen
	case e.Basis == BasisHealthCheck:
		return ReasonHealthCheckPassing
	case watched(ev, e.Destination):
		return ReasonNoTrafficSeen
	}
	return ReasonNotObserved
}

// pinnedFlowsOnly: a UDP destination where no flow has started since the node was first found dropping: what
// keeps arriving are flows the load balancer chose before the health check failed, not new ones it sends
// despite the check.
func pinnedFlowsOnly(ev *Evidence, e Entry) bool {
	if e.Protocol != corev1.ProtocolUDP || ev.Observed == nil {
		return false
	}
	o := ev.Observed.Observe(e.Destination)
	return o.Watched && !o.DroppedSince.IsZero() && !o.LastNewFlow.After(o.DroppedSince)
}

// unsentByHealthCheck: a destination in rotation by its health check's 200 whose load balancer is not known
// to honour that check (an announcer, a controller this project does not know: kubeview's
// HealthCheckContract), where the meter has seen nothing arrive for its quiet period. The 200 alone says
// nothing then: MetalLB's or Cilium's L2 announcer sends a VIP to one node, whatever every node's check
// answers. A warning (no_traffic_seen) until attempts arrive, which make it traffic_lost; where the contract
// holds, the load balancer keeps the node for its 200 and the blackhole stays critical.
func unsentByHealthCheck(in Input, e Entry) bool {
	if in.Service.HealthCheckContract(in.Node) || !watched(in.Evidence, e.Destination) {
		return false
	}
	o := in.Evidence.Observed.Observe(e.Destination)
	// A checker that probes the traffic port is no reason to think the load balancer sends clients here: its
	// own probes, dropped like any SYN, are not what the 200 keeps coming.
	return o.Silent || checkersAside(in, e, o) && o.Clients.Silent
}

// externalIPRotation: kube-proxy writes an externalIP's drop on every node without a local endpoint, but the
// network routes the address to some nodes only (a VIP held by keepalived or kube-vip, a static route, BGP). It
// is in rotation only with evidence that its traffic arrives here (an assigned address is decided before);
// without node evidence nobody can tell. Its drop counter is that evidence only where the meter does not watch
// the address: where it does, the meter's arrivals decide (observe) and are held to the grace window, so a
// route withdrawn seconds after the node lost its endpoint is no rotation, though the counter grew meanwhile.
func externalIPRotation(ev *Evidence, d Destination) (Rotation, string, Basis) {
	if ev == nil {
		return Unknown, "cannot tell from the API: an externalIP reaches only the nodes the network routes it to", ""
	}
	if ev.Arrivals != nil && !watched(ev, d) {
		if why, ok := ev.Arrivals.Arriving(d); ok {
			return In, why, BasisCounter
		}
	}
	return Out, "no evidence the address is routed here", ""
}

// loadBalancerRotation: a load balancer that checks the health check node port keeps the node for the family
// only while that family's check answers 200; a refusal, a timeout, a 503 or any other status drains it
// (docs/kube-proxy.md, Health check node port). The cloud service controller also takes a node that is not
// LoadBalancerEligible out of the target set. Without node evidence the answer is the one kube-proxy gives from the API's count: 200 when
// the family has a ready local endpoint, else 503.
func loadBalancerRotation(node kubeview.NodeState, ev *Evidence, fam kubeview.FamilyEndpoints) (Rotation, string) {
	if !node.LoadBalancerEligible() {
		return Out, loadBalancerEligibleWhy(node)
	}
	if ev == nil {
		if fam.LocalReadyEndpoints > 0 {
			return In, "health check answers 200 (ready local endpoints)"
		}
		return Out, "health check answers 503 (no ready local endpoint)"
	}
	hc, ok := ev.HealthChecks[fam.Family]
	switch {
	case !ok:
		return Out, "health check not probed"
	case hc.StatusCode == http.StatusOK:
		return In, "health check answered 200"
	case hc.Result == "no_address":
		return Out, "no address to probe the health check on"
	case hc.StatusCode != 0:
		return Out, fmt.Sprintf("health check answered %d", hc.StatusCode)
	}
	return Out, "health check " + hc.Result
}

const virtualWhy = "virtual node: no kube-proxy, no node port"

func loadBalancerEligibleWhy(n kubeview.NodeState) string {
	switch {
	case n.Virtual:
		return virtualWhy
	case !n.Found:
		return "Node object missing"
	case n.Excluded:
		return "node excluded from external load balancers"
	case n.Draining():
		return "node being deleted"
	}
	return "node eligible for load balancers"
}

func nodePortWhy(n kubeview.NodeState) string {
	switch {
	case n.Virtual:
		return virtualWhy
	case n.Excluded:
		return "node excluded from external load balancers"
	case n.Draining():
		return "node being deleted"
	}
	return "NodePort reaches every node"
}
