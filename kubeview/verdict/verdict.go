// Package verdict is the one decision behind localtraffic_blackhole and `kubectl localtraffic status`: for one
// node and one Service with externalTrafficPolicy Local, which ways in (entries) send the Service's external
// traffic to the node, and which of them kube-proxy drops there for lack of a local endpoint.
//
// Where it lives, and why: its two front ends are the exporter (package collector, which gathers what the node
// shows: the health check node port's answers, kube-proxy's rules, the node's addresses and rule counters) and
// the plugin (package kubeview/placement, which has the API alone). The decision reads the API view both already
// share (package kubeview) and its own small Evidence types, and imports nothing else of this module: the plugin
// gets it without pulling in the exporter's collector, nodeprobe (netlink, HTTP probes) or nodeprobe/rules
// (iptables and nft readers), and the exporter adapts what it read into Evidence in one place
// (collector/verdict.go). It sits under kubeview, beside placement, as a package of its own: it is not the API
// view itself but what the API view and the node's evidence mean together, and kubeview imports neither.
//
// The rule is documented in docs/metrics.md ("The blackhole verdict"); kubeview/verdict/frontends_test.go runs one set of
// fixtures through both front ends and requires the same answer, or the plugin's explicit "cannot tell".
package verdict

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// Verdict sources: what decided which entries are dropped.
const (
	SourceRules = "rules" // kube-proxy's rules, read on the node
	SourceAPI   = "api"   // the API view, counted as kube-proxy counts
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
	// Arrivals is evidence that a destination's traffic reaches this node; nil: nothing shows any.
	Arrivals Arrivals
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

// Arrivals is evidence that traffic for a destination reaches this node. The exporter's sources today are an
// address assigned to one of the node's interfaces and a drop rule counter that grew within the evidence
// window; observed new connection attempts (issue 20's packet meter) are one more source behind the same
// method.
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

// Entry is one destination and what was decided about it.
type Entry struct {
	Destination
	Rotation Rotation
	Why      string // what decided Rotation
	// Dropped: kube-proxy drops this destination's traffic for lack of a local endpoint (rules, or the API
	// view counted as kube-proxy counts).
	Dropped bool
}

// FamilyVerdict is the verdict of one IP family of a Service.
type FamilyVerdict struct {
	Family corev1.IPFamily
	// Source is what decided Dropped: SourceRules when this family's rules were read, else SourceAPI.
	Source     string
	Entries    []Entry
	InRotation bool // some entry is in rotation
	Drops      bool // some entry is dropped
	Blackhole  bool // some entry is in rotation and dropped
	// CannotTell: some dropped entry's rotation is Unknown (only without node evidence).
	CannotTell bool
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
	Source     string
	Families   []FamilyVerdict
}

// CannotTellEntries lists the dropped entries whose rotation is Unknown.
func (v Verdict) CannotTellEntries() []Entry {
	var out []Entry
	for _, f := range v.Families {
		for _, e := range f.Entries {
			if e.Dropped && e.Rotation == Unknown {
				out = append(out, e)
			}
		}
	}
	return out
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
	lbRot, lbWhy := loadBalancerRotation(in.Node, ev, fam)
	npRot, npWhy := lbRot, lbWhy
	if !healthChecked(svc) {
		// Without a health check node port nothing drains the node but its eligibility.
		npRot, npWhy = eligible(in.Node.NodePortEligible()), nodePortWhy(in.Node)
		lbRot, lbWhy = eligible(in.Node.LoadBalancerEligible()), loadBalancerEligibleWhy(in.Node)
	}
	for _, p := range fam.Ports {
		add := func(kind Kind, addr string, port int32, rot Rotation, why string) {
			e := Entry{Destination: Destination{Namespace: svc.Namespace, Service: svc.Name, Port: p.Name,
				Protocol: p.Protocol, Family: family, Kind: kind, Address: addr, DestPort: port},
				Rotation: rot, Why: why}
			if rules != nil {
				e.Dropped = rules.Drops(e.Destination)
			} else {
				// A port with no endpoint anywhere is rejected on every node: an outage, not this node's blackhole.
				e.Dropped = p.ClusterWide && p.Local == 0
			}
			fv.Entries = append(fv.Entries, e)
			fv.InRotation = fv.InRotation || rot == In
			fv.Drops = fv.Drops || e.Dropped
			fv.Blackhole = fv.Blackhole || rot == In && e.Dropped
			fv.CannotTell = fv.CannotTell || rot == Unknown && e.Dropped
		}
		if p.NodePort != 0 {
			add(NodePort, "", p.NodePort, npRot, npWhy)
		}
		if svc.Type == corev1.ServiceTypeLoadBalancer {
			for _, ip := range lbIPs {
				add(LoadBalancerIP, ip, p.Port, lbRot, lbWhy)
			}
		}
		for _, ip := range extIPs {
			d := Destination{Namespace: svc.Namespace, Service: svc.Name, Port: p.Name, Protocol: p.Protocol,
				Family: family, Kind: ExternalIP, Address: ip, DestPort: p.Port}
			rot, why := externalIPRotation(in.Node, ev, d)
			add(ExternalIP, ip, p.Port, rot, why)
		}
	}
	return fv
}

// externalIPRotation: kube-proxy writes an externalIP's drop on every node without a local endpoint, but the
// network routes the address to some nodes only (a VIP held by keepalived or kube-vip, a static route, BGP). It
// is in rotation only with evidence that its traffic arrives here; without node evidence nobody can tell.
func externalIPRotation(node kubeview.NodeState, ev *Evidence, d Destination) (Rotation, string) {
	if node.Virtual {
		return Out, virtualWhy
	}
	if ev == nil {
		return Unknown, "cannot tell from the API: an externalIP reaches only the nodes the network routes it to"
	}
	if ev.Arrivals != nil {
		if why, ok := ev.Arrivals.Arriving(d); ok {
			return In, why
		}
	}
	return Out, "no evidence the address is routed here"
}

// loadBalancerRotation: a load balancer that checks the health check node port keeps the node for the family
// only while that family's check answers 200; a refusal, a timeout, a 503 or any other status drains it
// (kube-proxy.md §5). The cloud service controller also takes a node that is not LoadBalancerEligible out of
// the target set. Without node evidence the answer is the one kube-proxy gives from the API's count: 200 when
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

func eligible(b bool) Rotation {
	if b {
		return In
	}
	return Out
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
