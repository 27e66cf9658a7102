// Package dataplane is the seam between what serves Services on a node and the exporter's node model: the
// values one read of a dataplane gives (per IP family, what each Service port's destinations do: forward to
// which local endpoints, drop, reject, or nothing programmed) and what the read says of itself (its kind, mode,
// time, health). A reader of a dataplane (nodeprobe/kernelrules: kube-proxy's iptables and nftables rules)
// returns a Rules; the gatherer (scrape) and the collectors name only these types, never a reader's own.
//
// It is a leaf: it imports nothing of the module, so any reader may implement it and any consumer name it.
package dataplane

import (
	"errors"
	"net/netip"
	"time"
)

// Kind is what serves Services on the node, as exported in localtraffic_dataplane_info.
type Kind string

// The dataplanes.
const (
	// KindKubeProxy: kube-proxy in iptables or nftables mode; its rules decide the verdict.
	KindKubeProxy Kind = "kube-proxy"
	// KindIPVS: kube-proxy in IPVS mode; the API view and the health check node ports decide.
	KindIPVS Kind = "ipvs"
	// KindReplacement: no kube-proxy (Cilium, Calico eBPF, OVN-Kubernetes, kube-router); the API view and the
	// health check node ports decide.
	KindReplacement Kind = "replacement"
	// KindCilium: Cilium's kube-proxy replacement, whose service table is read (nodeprobe/ciliumsvc); what
	// Cilium programmed decides the verdict, as kube-proxy's rules do.
	KindCilium Kind = "cilium"
)

// ReplacesKubeProxy reports whether no kube-proxy serves Services on a node of this kind: none of kube-proxy's
// own settings, health server or series apply there.
func (k Kind) ReplacesKubeProxy() bool { return k == KindReplacement || k == KindCilium }

// Read names what a reader of this kind reads, for the errors of its reads: an operator's first question of a
// failed read is which dataplane it asked. Every kind but Cilium's is read (when at all) from kube-proxy's
// rules; "" (not yet detected) too.
func (k Kind) Read() string {
	if k == KindCilium {
		return "Cilium's service table"
	}
	return "kube-proxy's rules"
}

// Families as Rules names them (the values of Kubernetes' IPFamily).
const (
	FamilyIPv4 = "IPv4"
	FamilyIPv6 = "IPv6"
)

var (
	// ErrUnsupported means the dataplane runs in a mode whose rules its reader cannot judge (kube-proxy's IPVS,
	// or a mode it does not know). The Rules returned with it carry the kind and mode; callers must fall back
	// to another signal, never read it as "no drop".
	ErrUnsupported = errors.New("kube-proxy mode not supported by the rule reader")
	// ErrNoRules means no rules of the dataplane were found where they were looked for (kube-proxy not
	// running, another mode, or another backend than detected): a node not programmed, unless something else
	// serves its Services.
	ErrNoRules = errors.New("no kube-proxy rules found")
)

// WatchState says what vouched for the parts of a read kept from earlier reads (Info.Watch): the reader's own
// health, as localtraffic_rules_watch_state exports it.
type WatchState string

// Watch states.
const (
	// WatchNotified: change notifications cover what is read: a kept part is used while no relevant change
	// was notified since it was read.
	WatchNotified WatchState = "notified"
	// WatchPolled: no notifications here; a cheap change signal is read and compared.
	WatchPolled WatchState = "polled"
	// WatchNone: the reader has no change signal; every read reads everything.
	WatchNone WatchState = "none"
)

// WatchStates lists every WatchState, in export order.
var WatchStates = []WatchState{WatchNotified, WatchPolled, WatchNone}

// Rules is one read of a dataplane. It is immutable and may be shared between concurrent callers.
type Rules interface {
	// HasFamily reports whether that family's rules were found and read.
	HasFamily(family string) bool
	// Family returns what the dataplane does with sp's external traffic in one family (FamilyIPv4 or
	// FamilyIPv6). The zero PortState means nothing is programmed for sp there (or the family was not read:
	// see HasFamily).
	Family(sp ServicePort, family string) PortState
	// Info is what the read says of itself.
	Info() Info
}

// Info is what one read says of itself and of its reader.
type Info struct {
	// Kind is the dataplane the reader found (KindIPVS comes with ErrUnsupported).
	Kind Kind
	// Mode is the reader's mode (kube-proxy's "iptables", "nftables", "ipvs"); Backend the tool family it read
	// with ("legacy" or "nft" for kube-proxy's iptables mode), "" when the mode has none.
	Mode, Backend string
	// Families are the families whose rules were found and read, IPv4 first. Shared: do not modify.
	Families []string
	// ReadAt is when the read started; Duration how long it took.
	ReadAt   time.Time
	Duration time.Duration
	// Watch is what vouched for the parts kept from earlier reads; "" when the reader keeps nothing (or a
	// read built by hand). Resyncs counts the full reads forced since the reader started because its kept
	// view may have drifted.
	Watch   WatchState
	Resyncs uint64
	// Counted: some drop rule carries a packet counter. Its count moves without the rules changing, so only
	// reading again follows it; a read with none changes only when the rules do.
	Counted bool
}

// ServicePort names one port of a Service.
type ServicePort struct {
	Namespace string
	Name      string
	Port      string // the port's name; "" when unnamed
	Protocol  string // "TCP", "UDP" or "SCTP" as in the Kubernetes API (case does not matter)
}

// String gives kube-proxy's spelling "ns/name" or "ns/name:port" (without protocol).
func (sp ServicePort) String() string {
	s := sp.Namespace + "/" + sp.Name
	if sp.Port != "" {
		s += ":" + sp.Port
	}
	return s
}

// PortState is what the dataplane does with one Service port's external traffic in one IP family: nothing
// (!Programmed: absent), drop it for lack of a local endpoint (Drop: per destination in Drops), reject it for
// lack of any endpoint (Reject), or forward it to LocalEndpoints local endpoints (Endpoints says which).
type PortState struct {
	// Programmed: any rule for this Service port exists.
	Programmed bool
	// Drop: external traffic is dropped for lack of local endpoints: len(Drops) > 0, or (a state built by
	// hand) every destination.
	Drop bool
	// Reject: "has no endpoints" — no endpoints anywhere (an outage, not a per-node blackhole).
	Reject bool
	// LocalEndpoints: the local endpoints external traffic is sent to.
	LocalEndpoints int
	// Endpoints says which endpoints those are, one entry per local endpoint counted (sorted). Compare them
	// with the API's endpoints with Endpoint.Is. Shared by every caller of the read: do not modify.
	Endpoints []Endpoint
	// DropPackets: the sum of Drops[].Packets. Raw: kube-proxy rewrites the rules on every sync, which
	// resets the counters. 0 where the dataplane counts nothing.
	DropPackets uint64
	// Drops: one entry per drop rule, the rule for all destinations first, then the NodePort rule
	// (Address ""), then by address and port. Shared by every caller of the read: do not modify.
	Drops []DropRule
}

// DropsTo reports whether the port's external traffic to one destination is dropped: address "" and the
// NodePort, or a load balancer IP or externalIP (canonical form) and the Service port.
func (st PortState) DropsTo(address string, port int32) bool {
	if st.Drop && len(st.Drops) == 0 {
		return true // a state that says it drops without saying where: every destination
	}
	for _, d := range st.Drops {
		if d.AllDestinations || d.Address == address && d.Port == port {
			return true
		}
	}
	return false
}

// DropRule is one rule that drops external traffic of a Service port for lack of local endpoints.
type DropRule struct {
	// Address is the destination the rule drops: "" for the NodePort rule (any local address), else a load
	// balancer ingress IP or externalIP in canonical form (netip.Addr.String: IPv6 compressed, lower case).
	Address string
	// Port is the destination port: the NodePort, or the Service port for an address. 0 with
	// AllDestinations.
	Port int32
	// Packets is the rule's packet counter (raw); 0 when !Counted.
	Packets uint64
	// Counted: the rule carries a counter.
	Counted bool
	// AllDestinations: one rule drops every external destination of the Service port at once — the NodePort
	// and every LB ingress IP and externalIP (kube-proxy ≤1.24). The rule names no destination, so Address
	// is "" and Port 0, and its counter counts the traffic of all of them together.
	AllDestinations bool
}

// Endpoint is one local endpoint a Service port's external traffic is sent to, by identity: which pod address
// and port, not only how many. With the dataplane's agent stopped or stuck, a pod replaced on the same node
// leaves rules that send traffic to the deleted pod's address: the count still matches the API, the identity
// does not.
type Endpoint struct {
	// Addr is where the traffic is sent; invalid when the rules do not spell it (Name identifies the
	// endpoint then). Port 0 means the rule gives the address only.
	Addr netip.AddrPort
	// Name identifies the endpoint when Addr is invalid: the reader's name for it (kube-proxy's hash of the
	// endpoint's chain); nil when Addr is valid.
	Name EndpointName
}

// EndpointName is a reader's name of an endpoint whose address its rules do not spell. A reader's names
// should be comparable values (Rules are compared with reflect.DeepEqual to tell what changed).
type EndpointName interface {
	// Is reports whether the name is the API's endpoint ep (its address and target port) of sp.
	Is(sp ServicePort, ep netip.AddrPort) bool
	// String is the name as the rules spell it.
	String() string
}

// Is reports whether e is the API's endpoint ep (its address and target port) of the Service port sp.
func (e Endpoint) Is(sp ServicePort, ep netip.AddrPort) bool {
	ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
	switch {
	case e.Addr.IsValid() && e.Addr.Port() == 0:
		return e.Addr.Addr() == ep.Addr()
	case e.Addr.IsValid():
		return e.Addr == ep
	case e.Name != nil:
		return e.Name.Is(sp, ep)
	}
	return false
}

// String is where the traffic is sent, or the reader's name of the endpoint when the rules do not spell it.
func (e Endpoint) String() string {
	switch {
	case e.Addr.IsValid() && e.Addr.Port() == 0:
		return e.Addr.Addr().String()
	case e.Addr.IsValid():
		return e.Addr.String()
	case e.Name != nil:
		return e.Name.String()
	}
	return "?"
}
