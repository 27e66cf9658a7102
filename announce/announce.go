// Package announce reads who sends a Service's external traffic to a node, where the node cannot see it
// before the first packet: the bare-metal announcers' records (MetalLB, Cilium L2, kube-vip, OpenELB, PureLB)
// of which node announces a load balancer IP, and the cloud load balancers' health checks (lbcheck.go), from
// the Service's annotations and the nodes' provider. kubeview adds both to each Service's state; verdict
// decides with them.
package announce

import (
	"cmp"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Source is one announcer's own record of which node announces a Service's load balancer IP. On bare
// metal the load balancer is such an announcer: it makes the network deliver the address to a node without
// putting it on the node's interface, and it reads no healthCheckNodePort. Its record says where the traffic
// goes better than anything the node can see before the first packet.
type Source string

// Announcer sources, as exported in localtraffic_announcer_source_state.
const (
	// SourceMetalLBL2: MetalLB's metallb.io/v1beta1 ServiceL2Status (since v0.14.2), one per Service, naming
	// the node that answers ARP and NDP for its addresses.
	SourceMetalLBL2 Source = "metallb_l2"
	// SourceMetalLBBGP: MetalLB's metallb.io/v1beta1 ServiceBGPStatus (since v0.15.0), one per node and
	// Service, naming the BGP peers the node advertises the Service to. Only this node's are read.
	SourceMetalLBBGP Source = "metallb_bgp"
	// SourceCiliumL2: Cilium's L2 announcement Lease cilium-l2announce-<namespace>-<service> in the agent's
	// namespace; its holderIdentity answers ARP for the Service's addresses while the lease is renewed.
	SourceCiliumL2 Source = "cilium_l2"
	// SourceCiliumL2Policy: Cilium's cilium.io/v2alpha1 CiliumL2AnnouncementPolicy objects, which Services its
	// agents elect a lease for (ciliumpolicy.go). They name no node: with the leases they tell a Service Cilium
	// announces from nowhere (no live lease) from one it does not announce at all.
	SourceCiliumL2Policy Source = "cilium_l2_policy"
	// SourceKubeVIP: kube-vip's kube-vip.io/vipHost Service annotation, the node that last took the Service
	// (ARP and BGP modes alike).
	SourceKubeVIP Source = "kube_vip"
	// SourceOpenELB: OpenELB's layer2.openelb.kubesphere.io/v1alpha1 Service annotation, the node its layer 2
	// speaker announces from (written up to v0.5; v0.6 no longer writes it).
	SourceOpenELB Source = "openelb"
	// SourcePureLB: PureLB's purelb.io/announcing-IPv4 and -IPv6 Service annotations, the node whose
	// interface holds each local address.
	SourcePureLB Source = "purelb"
)

// Sources lists every source, in export order.
var Sources = []Source{SourceMetalLBL2, SourceMetalLBBGP, SourceCiliumL2, SourceCiliumL2Policy, SourceKubeVIP, SourceOpenELB, SourcePureLB}

// FollowsLocalEndpoints reports whether the announcer announces an externalTrafficPolicy Local Service only
// from nodes with a ready local endpoint, and so moves its announcement off a node whose endpoints go (a drain)
// to one that has one: MetalLB's speakers in layer 2 (the elected node) and BGP (every such node advertises),
// kube-vip, and Cilium's L2 announcer with its local-backend gate (1.20.2 and later: without it the lease stays
// with its holder). OpenELB and PureLB are not known to.
func (s Source) FollowsLocalEndpoints() bool {
	switch s {
	case SourceMetalLBL2, SourceMetalLBBGP, SourceKubeVIP, SourceCiliumL2:
		return true
	}
	return false
}

// SourceState is whether a source's records can be believed now.
type SourceState string

// Source states. Only SourceOK's records reach the verdict: any other state leaves rotation to the rules
// without announcers, so an announcer that cannot be read never raises a page by itself.
const (
	SourceOK SourceState = "ok" // read, and current
	// SourceAbsent: the resource does not exist (no CRD installed), or no Service carries the annotation.
	SourceAbsent SourceState = "absent"
	// SourceForbidden: the API server refused the read (RBAC).
	SourceForbidden SourceState = "forbidden"
	// SourceStale: read once, but the API server has not answered its watch since a failure.
	SourceStale SourceState = "stale"
)

// Announcement is one announcer's record that a node announces (some of) a Service's load balancer IPs, or
// one of its externalIPs (Cilium, CiliumExternalIPAnnouncements).
type Announcement struct {
	Source Source
	Node   string
	// Address is the one address announced (canonical); "" for every load balancer IP of the Service (never
	// an externalIP).
	Address string
	// Exclusive: the announcer makes the network deliver the address to this node alone (layer 2: one node
	// answers ARP and NDP), so a node it does not name receives nothing but stale ARP caches. False for BGP,
	// where every node that advertises a route receives, and for a record that does not tell the mode.
	Exclusive bool
	// Peers are the BGP peers the node advertises the Service to (MetalLB BGP).
	Peers []string
	// Expired: a lease whose holder stopped renewing it (the Announcers saw it unchanged for
	// leaseDurationSeconds; List, reading once, goes by renewTime): nobody announces the address now.
	// Kept so that the Service can be found unannounced.
	Expired bool
}

// Covers reports whether a announces addr.
func (a Announcement) Covers(addr string) bool { return a.Address == "" || a.Address == addr }

// Announcer annotations on the Service.
const (
	AnnotationKubeVIPHost   = "kube-vip.io/vipHost"
	AnnotationOpenELBLayer2 = "layer2.openelb.kubesphere.io/v1alpha1"
	AnnotationPureLBIPv4    = "purelb.io/announcing-IPv4"
	AnnotationPureLBIPv6    = "purelb.io/announcing-IPv6"
)

var announcerAnnotations = []string{AnnotationKubeVIPHost, AnnotationOpenELBLayer2, AnnotationPureLBIPv4, AnnotationPureLBIPv6}

// KeepAnnotations copies the announcer annotations into out (allocated when needed): the Service transform
// keeps them.
func KeepAnnotations(ann, out map[string]string) map[string]string {
	for _, k := range announcerAnnotations {
		if v, ok := ann[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// FromAnnotations reads the announcers that record themselves on the Service: kube-vip, OpenELB and
// PureLB.
func FromAnnotations(ann map[string]string) []Announcement {
	var out []Announcement
	if n := strings.TrimSpace(ann[AnnotationKubeVIPHost]); n != "" {
		// kube-vip writes the same annotation in ARP and BGP mode, and in BGP mode every node may advertise:
		// the annotation names a receiving node, not the only one.
		out = append(out, Announcement{Source: SourceKubeVIP, Node: n})
	}
	if n := strings.TrimSpace(ann[AnnotationOpenELBLayer2]); n != "" {
		out = append(out, Announcement{Source: SourceOpenELB, Node: n, Exclusive: true})
	}
	for _, k := range []string{AnnotationPureLBIPv4, AnnotationPureLBIPv6} {
		out = append(out, parsePureLB(ann[k])...)
	}
	return out
}

// parsePureLB decodes PureLB's announcing annotation. Its current form is space-separated "node,interface,ip"
// entries, one per announced address (an interface name may hold commas: the node ends at the first comma,
// the address starts after the last). Older releases wrote one "node,interface" for all of the family's
// addresses; a single field (its virtual interface, kube-lb0) marks a remote address every node routes, which
// names no node.
func parsePureLB(v string) []Announcement {
	var out []Announcement
	for _, f := range strings.Fields(v) {
		first, last := strings.IndexByte(f, ','), strings.LastIndexByte(f, ',')
		if first <= 0 {
			continue
		}
		a := Announcement{Source: SourcePureLB, Node: f[:first], Exclusive: true}
		if first != last {
			addr, err := netip.ParseAddr(f[last+1:])
			if err != nil || addr.Zone() != "" {
				continue
			}
			a.Address = addr.Unmap().String()
		}
		out = append(out, a)
	}
	return out
}

// Lease fields the Cilium source reads, at the time of a snapshot.
type leaseRecord struct {
	holder string
	// renewRaw is spec.renewTime as written: the holder writes it on its own clock, so the reader compares it
	// only to tell a renewal from no change.
	renewRaw string
	renew    time.Time // renewRaw parsed; zero when missing or malformed
	duration time.Duration
	// observed is when this reader last saw the record change, by its own clock (client-go leader election's
	// observedTime): the lease expires duration after it.
	observed time.Time
}

// ciliumLeasePrefix names Cilium's L2 announcement leases: cilium-l2announce-<namespace>-<service>.
const ciliumLeasePrefix = "cilium-l2announce-"

// CiliumLeaseName is the Lease Cilium's agents elect the L2 announcer of a Service with.
func CiliumLeaseName(namespace, service string) string {
	return ciliumLeasePrefix + namespace + "-" + service
}

// sameRecord: nothing the holder writes on a renewal or a takeover differs. Cilium's agents renew through
// client-go's leader election, which writes a new renewTime on every renewal.
func (l leaseRecord) sameRecord(o leaseRecord) bool {
	return l.holder == o.holder && l.renewRaw == o.renewRaw && l.duration == o.duration
}

// expiresAt is when the lease expires unless the reader sees it change before: duration after the last
// change it saw, as client-go's leader election judges another holder's lease (isLeaseValid:
// observedTime + leaseDuration after now). Judging renewTime + duration against the reader's clock instead
// would expire a lease renewed on time by a holder whose clock runs behind, and keep one nobody renews alive
// while the holder's clock ran ahead.
func (l leaseRecord) expiresAt() time.Time { return l.observed.Add(l.duration) }

// validAt: a lease counts while its holder is seen renewing it.
func (l leaseRecord) validAt(now time.Time) bool {
	return l.holder != "" && !l.observed.IsZero() && now.Before(l.expiresAt())
}

// Snapshot is what the announcer sources said at one moment.
type Snapshot struct {
	// States holds every source's state; a source missing from it has not been read.
	States    map[Source]SourceState
	byService map[string][]Announcement
	leases    map[string]leaseRecord
	// policies are Cilium's L2 announcement policies, and unheld the reader's clock of the Services they
	// select without a live lease (nil for a one-shot List, which has no clock).
	policies []ciliumPolicy
	unheld   *unheldClock
	now      time.Time
	// clusterWide: every node's records were read (List), so the absence of a record means that no
	// node announces, where MetalLB's speakers run (Speakers).
	clusterWide bool
	// Speakers is what a cluster-wide reader saw of MetalLB's speakers (speakers.go); SpeakersNotLooked in a
	// node's snapshot.
	Speakers MetalLBSpeakers
}

// At is the same records read at now: a lease's validity depends on the time it is judged at.
func (s Snapshot) At(now time.Time) Snapshot {
	s.now = now
	return s
}

// AnnouncementsFor returns the announcements of the Service namespace/name in the announcers' own objects
// (those on its annotations are FromAnnotations'). A Cilium lease whose holder stopped renewing it is
// returned Expired.
func (s Snapshot) AnnouncementsFor(namespace, name string) []Announcement {
	out := append([]Announcement(nil), s.byService[namespace+"/"+name]...)
	if l, ok := s.leases[CiliumLeaseName(namespace, name)]; ok && l.holder != "" {
		out = append(out, Announcement{Source: SourceCiliumL2, Node: l.holder, Exclusive: true, Expired: !l.validAt(s.now)})
	}
	// In source order, then by node: the informers' stores list in no order, and what a person reads should
	// not change between scrapes.
	slices.SortStableFunc(out, func(a, b Announcement) int {
		if c := cmp.Compare(slices.Index(Sources, a.Source), slices.Index(Sources, b.Source)); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	return out
}

// LeaseExpiry is when the Cilium lease of the Service namespace/name expires unless the reader sees it
// renewed, and false when no such lease is held and live at the snapshot's time: its announcement changes
// then without an event.
func (s Snapshot) LeaseExpiry(namespace, name string) (time.Time, bool) {
	l, ok := s.leases[CiliumLeaseName(namespace, name)]
	if !ok || !l.validAt(s.now) {
		return time.Time{}, false
	}
	return l.expiresAt(), true
}

// AnnotationStates sets the annotation sources' states in states from the announcements of the Local
// Services: a source is ok when some Service carries its annotation, absent otherwise (there is nothing to be
// forbidden or stale: it comes with the Service).
func AnnotationStates(states map[Source]SourceState, announcements iter.Seq[Announcement]) {
	for _, src := range []Source{SourceKubeVIP, SourceOpenELB, SourcePureLB} {
		states[src] = SourceAbsent
	}
	for a := range announcements {
		switch a.Source {
		case SourceKubeVIP, SourceOpenELB, SourcePureLB:
			states[a.Source] = SourceOK
		}
	}
}

// MetalLB's annotation on a Service it allocated an address to, under its current and its former group.
var metallbAllocatedAnnotations = []string{"metallb.io/ip-allocated-from-pool", "metallb.universe.tf/ip-allocated-from-pool"}

// Unrecorded lists the Service's load balancer IPs (loadBalancerIPs) when MetalLB allocated them and, with both
// of its record kinds read cluster-wide and its speakers seen, none of the Service's announcements (its
// annotations' and AnnouncementsFor's) names a node: MetalLB writes a ServiceL2Status for the node that answers
// ARP and NDP, and a ServiceBGPStatus per node that advertises a route, so neither means no node announces (not
// elected, or no BGP session up). Anything less than both kinds read and current says nothing: MetalLB before
// v0.15.0 has no ServiceBGPStatus, and its BGP announcements would look unrecorded. Nor does a cluster where no
// speaker was seen: MetalLB only allocates there (AllocatedOnly), and another announcer may advertise the address.
func (s Snapshot) Unrecorded(svc *corev1.Service, announcements []Announcement, loadBalancerIPs []string) []string {
	if !s.clusterWide || s.States[SourceMetalLBL2] != SourceOK || s.States[SourceMetalLBBGP] != SourceOK || s.Speakers != SpeakersSeen {
		return nil
	}
	if !metallbAllocated(svc) {
		return nil
	}
	// A ServiceBGPStatus naming no peer advertises to nobody.
	if slices.ContainsFunc(announcements, func(a Announcement) bool {
		return a.Source == SourceMetalLBL2 || a.Source == SourceMetalLBBGP && len(a.Peers) > 0
	}) {
		return nil
	}
	return slices.Clone(loadBalancerIPs)
}
