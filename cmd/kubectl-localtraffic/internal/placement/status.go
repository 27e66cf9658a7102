package placement

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// NodeStatus is one node's part of one Service's external traffic, as far as the API shows it.
type NodeStatus struct {
	Node string `json:"node"`
	// Receives: the node is a target of the Service's external traffic (kubeview's node rules).
	Receives bool `json:"receives"`
	// InRotation: it receives, and for a Service with a health check node port that check would answer 200
	// (a ready local endpoint): a load balancer that checks it keeps sending.
	InRotation bool `json:"inRotation"`
	// LocalEndpoints and LocalReadyEndpoints are the exporter's counts for this node.
	LocalEndpoints      int  `json:"localEndpoints"`
	LocalReadyEndpoints int  `json:"localReadyEndpoints"`
	Serves              bool `json:"serves"`
	Blackhole           bool `json:"blackhole"`
	// Drops names what kube-proxy drops on this node for lack of a local endpoint, e.g. "NodePort 30090/TCP".
	Drops []string `json:"drops,omitempty"`
	// CannotTell names the dropped destinations whose traffic the API cannot say reaches this node (an
	// externalIP goes where the network routes it): a blackhole if it does. The exporter on the node knows.
	CannotTell []string `json:"cannotTell,omitempty"`
	// AnnouncerUnknown names the dropped load balancer IPs whose announcer the API does not show: MetalLB
	// allocated them and no MetalLB speaker was seen (announce.Snapshot.AllocatedOnly; its Calico setup has
	// Calico advertise them). Whether they reach the node is that announcer's doing: not a blackhole, and not
	// the "cannot tell" of a known announcer (drop?) either.
	AnnouncerUnknown []string `json:"announcerUnknown,omitempty"`
	// RotationUnknown: some way in (an externalIP) reaches the node only if the network routes it there, which
	// the API does not show: InRotation counts only what the API can tell.
	RotationUnknown bool `json:"rotationUnknown,omitempty"`
	// Virtual: a virtual node (virtual-kubelet, Fargate): no kube-proxy, never a receiver.
	Virtual bool `json:"virtual,omitempty"`
	// dropsReceived is the part of Drops the node receives (in rotation): what a blackhole loses there.
	dropsReceived []string
	// Observed is what the node's exporter reports (status --from-exporters, with each node's verdict in -o json and -o yaml): its blackhole's
	// reason (traffic_lost, health_check_ignored, ...: docs/rotation.md) or no_blackhole; "" when not read.
	Observed Observation `json:"observed,omitempty"`
}

// ServiceStatus is one Local Service across the cluster's nodes.
type ServiceStatus struct {
	Namespace           string             `json:"namespace"`
	Name                string             `json:"name"`
	Type                corev1.ServiceType `json:"type"`
	HealthCheckNodePort int32              `json:"healthCheckNodePort,omitempty"`
	// Outage: a port has no usable endpoint anywhere, so kube-proxy rejects it on every node (not a per-node
	// blackhole; the exporter does not count it as one either).
	Outage    bool         `json:"outage,omitempty"`
	Receiving int          `json:"receiving"` // nodes that receive its external traffic
	Serving   int          `json:"serving"`   // of those, the nodes that serve it
	Nodes     []NodeStatus `json:"nodes"`     // every node, by name
	Summary   string       `json:"summary"`
	// Ignored: the Service is placed this way on purpose (annotation localtraffic.io/intentional-placement,
	// whose value is IgnoredReason). It is judged like any other, but its blackholes fail nothing.
	Ignored       bool   `json:"ignored,omitempty"`
	IgnoredReason string `json:"ignoredReason,omitempty"`
	// Unannounced lists the load balancer IPs and externalIPs whose announcer's record names no live holder
	// while the Service has endpoints (verdict.Unannounced): no node answers for them, every client is lost.
	Unannounced []string `json:"unannounced,omitempty"`
	// AnnouncerUnknown lists the load balancer IPs MetalLB allocated where no MetalLB speaker was seen
	// (announce.Snapshot.AllocatedOnly), AnnouncerUnknownWhy what was seen: not MetalLB-announced, so neither
	// unannounced nor failing; who announces them the API does not show.
	AnnouncerUnknown    []string `json:"announcerUnknown,omitempty"`
	AnnouncerUnknownWhy string   `json:"announcerUnknownWhy,omitempty"`
}

// Failing tells whether the Service's state fails `status`: a node blackholes, or nobody announces a load
// balancer IP, and the Service is not ignored.
func (s ServiceStatus) Failing() bool {
	return !s.Ignored && (len(s.Blackholes()) > 0 || len(s.Unannounced) > 0)
}

// Blackholes lists the nodes that blackhole the Service now.
func (s ServiceStatus) Blackholes() []string {
	var out []string
	for _, n := range s.Nodes {
		if n.Blackhole {
			out = append(out, n.Node)
		}
	}
	return out
}

// Status computes, for every Local Service, every node's verdict from EndpointSlices and Nodes alone: what the
// exporter on each node would decide from the API, minus what only a node can see (its health check's actual
// answer, the rules kube-proxy programmed). Services are sorted by namespace and name.
func Status(c *Cluster) []ServiceStatus {
	slices := slicesByService(c.EndpointSlices)
	nodes := sortedNodes(c.Nodes)
	nodeStates := make([]kubeview.NodeState, len(nodes))
	for i, n := range nodes {
		nodeStates[i] = kubeview.NodeStateOf(n)
	}
	var out []ServiceStatus
	for _, svc := range c.Services {
		if !kubeview.IsExternalLocal(svc) {
			continue
		}
		st := serviceStatus(svc, slices[svc.Namespace+"/"+svc.Name], nodes, nodeStates, c.NodePortAddresses, c.Announcers, c.AnnouncersLeave)
		st.IgnoredReason, st.Ignored = kubeview.IgnoredReason(svc, c.IgnoreSelector)
		out = append(out, st)
	}
	sortStatuses(out)
	return out
}

func sortStatuses(s []ServiceStatus) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Namespace != s[j].Namespace {
			return s[i].Namespace < s[j].Namespace
		}
		return s[i].Name < s[j].Name
	})
}

// slicesByService indexes the slices kube-proxy reads by "namespace/service".
func slicesByService(all []*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range all {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		if !kubeview.UsableSlice(s) {
			continue // the exporter's own filter: kube-proxy's slice informer drops these
		}
		key := s.Namespace + "/" + svc
		out[key] = append(out[key], s)
	}
	return out
}

// noNode is a node name no endpoint carries (node names are DNS subdomains): the state of every node that
// hosts none of the Service's endpoints.
const noNode = "\x00"

// perNodeStates counts the Service's endpoints once per node that hosts one, and once for all other nodes,
// with the exporter's own transform and counting: each node's exporter sees exactly these slices.
func perNodeStates(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) (map[string]kubeview.ServiceState, kubeview.ServiceState) {
	hosts := map[string]struct{}{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil {
				hosts[*ep.NodeName] = struct{}{}
			}
		}
	}
	stateOn := func(node string) kubeview.ServiceState {
		transform := kubeview.TransformEndpointSlice(node)
		local := make([]*discoveryv1.EndpointSlice, 0, len(slices))
		for _, s := range slices {
			t, _ := transform(s) // never fails for an EndpointSlice
			local = append(local, t.(*discoveryv1.EndpointSlice))
		}
		return kubeview.ServiceStateOf(svc, local)
	}
	states := make(map[string]kubeview.ServiceState, len(hosts))
	for h := range hosts {
		states[h] = stateOn(h)
	}
	return states, stateOn(noNode)
}

func serviceStatus(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, nodes []*corev1.Node, nodeStates []kubeview.NodeState,
	nodePortAddresses []netip.Prefix, ann announce.Snapshot, leaving string) ServiceStatus {
	states, elsewhere := perNodeStates(svc, slices)
	elsewhere = withAnnouncers(states, elsewhere, svc, ann, leaving)
	st := ServiceStatus{Namespace: svc.Namespace, Name: svc.Name, Type: svc.Spec.Type,
		HealthCheckNodePort: svc.Spec.HealthCheckNodePort}
	st.Outage = outage(elsewhere)
	st.AnnouncerUnknown, st.AnnouncerUnknownWhy = allocatedOnly(svc, elsewhere, ann)
	for i, n := range nodes {
		ss, ok := states[n.Name]
		if !ok {
			ss = elsewhere
		}
		v := verdictOn(ss, nodeStates[i], nodePortsOutside(n, nodePortAddresses), st.AnnouncerUnknown)
		st.Nodes = append(st.Nodes, v)
		if v.Receives {
			st.Receiving++
		}
		if v.Serves {
			st.Serving++
		}
	}
	st.Unannounced = verdict.UnannouncedIPs(elsewhere)
	st.Summary = summary(st) + unannouncedSummary(st.Unannounced)
	return st
}

// outage: some port of some family has no usable endpoint anywhere (ClusterWide false), which kube-proxy rejects
// on every node.
func outage(ss kubeview.ServiceState) bool {
	for _, fe := range ss.Families {
		for _, p := range fe.Ports {
			if !p.ClusterWide {
				return true
			}
		}
	}
	return false
}

// allocatedOnly is the Service's load balancer IPs MetalLB allocated and, seeing no MetalLB speaker, does not
// announce (announce.Snapshot.AllocatedOnly), with what the reader saw of the speakers.
func allocatedOnly(svc *corev1.Service, elsewhere kubeview.ServiceState, ann announce.Snapshot) ([]string, string) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil, ""
	}
	ips := ann.AllocatedOnly(svc, elsewhere.Announcements, elsewhere.LoadBalancerIPs)
	if len(ips) == 0 {
		return nil, ""
	}
	return ips, ann.SpeakersWhy()
}

// verdictOn is the shared decision (package verdict) for one node from the API alone: no node evidence, so a
// health check's answer is the one kube-proxy gives from the API's count (200 with a ready local endpoint of the
// family), and a dropped destination only the network decides (an externalIP) is "cannot tell", not a
// blackhole. A dropped load balancer IP in allocatedOnly (MetalLB allocated it and runs no speaker) is neither:
// its announcer is unknown (NodeStatus.AnnouncerUnknown).
//
// outside names the families none of whose Node addresses is inside kube-proxy's nodePortAddresses: the exporter
// decides a NodePort there from the node's interfaces (whether kube-proxy serves it at all), which the API does
// not show, so such a NodePort in rotation and dropped is "cannot tell", not a blackhole.
func verdictOn(ss kubeview.ServiceState, ns kubeview.NodeState, outside map[corev1.IPFamily]bool, allocatedOnly []string) NodeStatus {
	v := withoutNodePorts(verdict.Decide(verdict.Input{Service: ss, Node: ns}), outside)
	st := NodeStatus{Node: ns.Name, LocalEndpoints: ss.LocalEndpoints(), LocalReadyEndpoints: -1,
		Receives: verdict.Receiver(ss, ns), InRotation: v.InRotation, Blackhole: v.Blackhole, Virtual: ns.Virtual}
	dual := len(v.Families) > 1
	unknown := false
	for i, fv := range v.Families {
		if r := ss.Families[i].LocalReadyEndpoints; st.LocalReadyEndpoints < 0 || r < st.LocalReadyEndpoints {
			st.LocalReadyEndpoints = r
		}
		for _, e := range fv.Entries {
			unknown = unknown || e.Rotation == verdict.Unknown
			if !e.Dropped {
				continue
			}
			d := e.Destination.String()
			if dual {
				d += " (" + string(fv.Family) + ")"
			}
			if !slices.Contains(st.Drops, d) {
				st.Drops = append(st.Drops, d)
			}
			if e.Rotation == verdict.In && !slices.Contains(st.dropsReceived, d) {
				st.dropsReceived = append(st.dropsReceived, d)
			}
			if v.CannotTell && e.Rotation == verdict.Unknown && !slices.Contains(st.CannotTell, d) {
				st.CannotTell = append(st.CannotTell, d)
			}
		}
	}
	st.LocalReadyEndpoints = max(st.LocalReadyEndpoints, 0)
	if !v.Blackhole {
		for _, h := range heldElsewhere(v, ss, ns, dual) {
			unknown = true
			into := &st.CannotTell
			if slices.Contains(allocatedOnly, h.address) {
				into = &st.AnnouncerUnknown
			}
			if !slices.Contains(*into, h.what) {
				*into = append(*into, h.what)
			}
		}
	}
	st.RotationUnknown = unknown
	// Serves: whatever reaches the node is served (an externalIP the network may or may not route here counts
	// as reaching it).
	st.Serves = st.Receives && !st.Blackhole && len(st.CannotTell) == 0 && len(st.AnnouncerUnknown) == 0 && (st.InRotation || unknown)
	return st
}

// nodePortsOutside is the set of families in which none of the node's addresses is inside prefixes (nil when
// prefixes is: kube-proxy's defaults serve NodePorts on every node).
func nodePortsOutside(n *corev1.Node, prefixes []netip.Prefix) map[corev1.IPFamily]bool {
	if prefixes == nil {
		return nil
	}
	out := map[corev1.IPFamily]bool{corev1.IPv4Protocol: true, corev1.IPv6Protocol: true}
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		fam := corev1.IPv4Protocol
		if ip.Unmap().Is6() {
			fam = corev1.IPv6Protocol
		}
		for _, p := range prefixes {
			if p.Contains(ip.Unmap()) {
				out[fam] = false
			}
		}
	}
	return out
}

// withoutNodePorts turns the NodePort entries of the outside families from in rotation to unknown, and
// aggregates the verdict again as Decide does.
func withoutNodePorts(v verdict.Verdict, outside map[corev1.IPFamily]bool) verdict.Verdict {
	if len(outside) == 0 {
		return v
	}
	v.InRotation, v.Blackhole, v.CannotTell = false, false, false
	fams := make([]verdict.FamilyVerdict, len(v.Families))
	for i, fv := range v.Families {
		fv.Entries = slices.Clone(fv.Entries)
		fv.InRotation, fv.Blackhole, fv.CannotTell = false, false, false
		for j := range fv.Entries {
			e := &fv.Entries[j]
			if e.Kind == verdict.NodePort && outside[fv.Family] && e.Rotation == verdict.In {
				e.Rotation, e.Why, e.Basis = verdict.Unknown, "cannot observe from the API: no address the Node object lists is inside kube-proxy's nodePortAddresses, "+
					"so whether kube-proxy serves the NodePort here only the node's interfaces show", ""
			}
			fv.InRotation = fv.InRotation || e.Rotation == verdict.In
			fv.Blackhole = fv.Blackhole || e.Rotation == verdict.In && e.Dropped
			fv.CannotTell = fv.CannotTell || e.Rotation == verdict.Unknown && e.Dropped
		}
		v.InRotation = v.InRotation || fv.InRotation
		v.Blackhole = v.Blackhole || fv.Blackhole
		v.CannotTell = v.CannotTell || fv.CannotTell
		fams[i] = fv
	}
	v.Families = fams
	v.CannotTell = v.CannotTell && !v.Blackhole
	return v
}

// held is a load balancer IP heldElsewhere lists: the destination as status names it, and its address.
type held struct{ what, address string }

// heldElsewhere lists the load balancer IPs the node drops while its health check takes it out, where the API
// cannot say the address is not held on the node itself: an announcer (MetalLB or Cilium in L2 mode, kube-vip,
// OpenELB, PureLB, keepalived) puts a Service's VIP on one node's interface, and the network then delivers its
// traffic there whatever the health check answers; the exporter on that node sees the address and calls the node
// a blackhole. Only a load balancer a known cloud controller runs, which checks healthCheckNodePort over HTTP
// (kubeview's HealthCheckContract), never holds the VIP on a node: there "drained" is the answer.
func heldElsewhere(v verdict.Verdict, ss kubeview.ServiceState, ns kubeview.NodeState, dual bool) []held {
	if ns.Virtual || ss.HealthCheckContract(ns) {
		return nil
	}
	var out []held
	for _, fv := range v.Families {
		for _, e := range fv.Entries {
			if e.Kind != verdict.LoadBalancerIP || !e.Dropped || e.Rotation != verdict.Out {
				continue
			}
			if verdict.AnnouncedElsewhere(ns, ss, e.Destination) {
				continue // the announcer's record delivers the address to another node
			}
			d := e.Destination.String()
			if dual {
				d += " (" + string(fv.Family) + ")"
			}
			out = append(out, held{d, e.Destination.Address})
		}
	}
	return out
}

// summary is the one line a person reads: "2 of 5 nodes serve; node-c, node-d, node-e drop NodePort 30090/TCP".
func summary(st ServiceStatus) string {
	if st.Outage {
		return fmt.Sprintf("no endpoint anywhere for some port: rejected on every node (an outage, not a per-node blackhole); %d of %d nodes serve",
			st.Serving, st.Receiving)
	}
	s := fmt.Sprintf("%d of %d nodes serve", st.Serving, st.Receiving)
	byDrop := map[string][]string{}
	var drops []string
	for _, n := range st.Nodes {
		if !n.Blackhole {
			continue
		}
		d := strings.Join(n.Drops, ", ")
		if _, seen := byDrop[d]; !seen {
			drops = append(drops, d)
		}
		byDrop[d] = append(byDrop[d], n.Node)
	}
	for _, d := range drops {
		s += fmt.Sprintf("; %s drop %s", strings.Join(byDrop[d], ", "), d)
	}
	healthChecked := st.Type == corev1.ServiceTypeLoadBalancer && st.HealthCheckNodePort != 0
	byUnknown := map[string][]string{}
	var unknown []string
	drained := 0
	for _, n := range st.Nodes {
		if len(n.AnnouncerUnknown) > 0 && len(n.CannotTell) == 0 {
			continue // allocatedOnlySummary names them
		}
		if len(n.CannotTell) > 0 {
			d := strings.Join(n.CannotTell, ", ")
			if _, seen := byUnknown[d]; !seen {
				unknown = append(unknown, d)
			}
			byUnknown[d] = append(byUnknown[d], n.Node)
			continue
		}
		if n.Receives && !n.InRotation && healthChecked {
			drained++
		}
	}
	if drained > 0 {
		s += fmt.Sprintf("; %d drained by the health check (no ready local endpoint, answers 503)", drained)
	}
	for _, d := range unknown {
		s += fmt.Sprintf("; %s would drop %s: whether it reaches them only the network decides (cannot tell from the API; the exporter on each node can)",
			strings.Join(byUnknown[d], ", "), d)
	}
	return s + allocatedOnlySummary(st)
}

// allocatedOnlySummary is the summary's part for the load balancer IPs MetalLB allocated and does not announce
// ("" when none): who announces them, and so which nodes receive them, is unknown.
func allocatedOnlySummary(st ServiceStatus) string {
	if len(st.AnnouncerUnknown) == 0 {
		return ""
	}
	s := "; announcer of " + strings.Join(st.AnnouncerUnknown, ", ") + " unknown, not MetalLB-announced as far as the API shows: " +
		st.AnnouncerUnknownWhy + "; whoever announces it (Calico's BGP serviceLoadBalancerIPs, say) writes nothing the plugin reads, " +
		"so it is not called unannounced"
	var nodes []string
	for _, n := range st.Nodes {
		if len(n.AnnouncerUnknown) > 0 {
			nodes = append(nodes, n.Node)
		}
	}
	if len(nodes) > 0 {
		s += "; " + strings.Join(nodes, ", ") + " would drop it if it were sent there (no ready local endpoint; the exporter on each node sees what arrives)"
	}
	return s
}
