package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// Summary is one Local Service across the judged nodes, without a struct per node: on a cluster of thousands
// of nodes almost every node hosts none of a Service's endpoints and looks like the next one to the verdict,
// so the verdict is computed once per class of node (nodeClasses) and once per node the Service singles out
// (one hosting an endpoint, one its state names), and the nodes are counted. Each gives every node's verdict
// back when the output asks for the grid.
type Summary struct {
	Namespace           string
	Name                string
	Type                corev1.ServiceType
	HealthCheckNodePort int32
	// Outage: a port has no usable endpoint anywhere (ServiceStatus.Outage).
	Outage        bool
	Ignored       bool
	IgnoredReason string
	// Nodes judged, and of them: receiving its external traffic, serving it, dropping it (blackholes), dropping
	// what only the node can tell reaches it (cannot tell), and taken out by the health check (drained).
	Nodes, Receiving, Serving, Dropping, CannotTell, Drained int
	// Drops lists what the dropping nodes drop of what they receive ("NodePort 30090/TCP"), each once, in order
	// of appearance: what is lost. A dropping node's destinations out of its rotation (a NodePort its load
	// balancer's health check drains while an announcer sends it the load balancer IP) lose nothing and are left
	// out; NodeStatus.Drops still names them per node.
	Drops []string
	// Unannounced lists the load balancer IPs and externalIPs no live announcer holds while the Service has
	// endpoints (ServiceStatus.Unannounced): lost on every node, however many serve.
	Unannounced []string
	// AnnouncerUnknown and AnnouncerUnknownWhy: the load balancer IPs MetalLB allocated and, seeing no speaker,
	// does not announce (ServiceStatus.AnnouncerUnknown); the nodes that would drop them count as CannotTell.
	AnnouncerUnknown    []string
	AnnouncerUnknownWhy string

	classes *nodeClasses
	shared  []NodeStatus       // the verdict of each class's nodes that the Service does not single out
	own     map[int]NodeStatus // index into classes.nodes → that node's own verdict
}

// Failing: a node drops the Service's traffic and the Service is not ignored (as ServiceStatus.Failing).
func (s *Summary) Failing() bool { return !s.Ignored && (s.Dropping > 0 || len(s.Unannounced) > 0) }

// Each calls fn with every judged node's verdict, in node name order.
func (s *Summary) Each(fn func(NodeStatus)) {
	for i, n := range s.classes.nodes {
		v, ok := s.own[i]
		if !ok {
			v = s.shared[s.classes.class[i]]
			v.Node = n.Name
		}
		fn(v)
	}
}

// DroppingNodes lists the first limit nodes (by name) that drop the Service's traffic; limit < 0: all.
func (s *Summary) DroppingNodes(limit int) []string {
	if s.Dropping == 0 {
		return nil
	}
	var out []string
	for i, n := range s.classes.nodes {
		if limit >= 0 && len(out) >= limit {
			break
		}
		v, ok := s.own[i]
		if !ok {
			v = s.shared[s.classes.class[i]]
		}
		if v.Blackhole {
			out = append(out, n.Name)
		}
	}
	return out
}

// Expand is the per-node ServiceStatus (Status's), for outputs that show every judged node.
func (s *Summary) Expand() ServiceStatus {
	st := ServiceStatus{Namespace: s.Namespace, Name: s.Name, Type: s.Type, HealthCheckNodePort: s.HealthCheckNodePort,
		Outage: s.Outage, Receiving: s.Receiving, Serving: s.Serving, Ignored: s.Ignored, IgnoredReason: s.IgnoredReason,
		Nodes: make([]NodeStatus, 0, s.Nodes), Unannounced: s.Unannounced, AnnouncerUnknown: s.AnnouncerUnknown,
		AnnouncerUnknownWhy: s.AnnouncerUnknownWhy}
	s.Each(func(v NodeStatus) { st.Nodes = append(st.Nodes, v) })
	st.Summary = summary(st) + unannouncedSummary(st.Unannounced)
	return st
}

// nodeClasses partitions the judged nodes into classes whose members the verdict cannot tell apart unless a
// Service singles one out: equal NodeState but for the name and the address lists, and the same outcome of
// kube-proxy's nodePortAddresses. From the API alone the verdict reads no node address (those are node
// evidence, which the plugin has not); the addresses count only through nodePortAddresses, which the key holds.
type nodeClasses struct {
	nodes  []*corev1.Node // sorted by name
	states []kubeview.NodeState
	// outside is each node's nodePortsOutside, class its class; reps holds one member of each class.
	outside []map[corev1.IPFamily]bool
	class   []int
	reps    []int
	index   map[string]int // node name → index into nodes
}

// classKey is what of a node the verdict reads besides its name: the NodeState without the name and the
// address lists, and the families whose NodePorts kube-proxy's nodePortAddresses leaves out. A field added to
// NodeState is part of the key unless removed here (TestClassKeyCoversNodeState), so a new input splits
// classes rather than being lost.
func classKey(ns kubeview.NodeState, outside map[corev1.IPFamily]bool) string {
	ns.Name, ns.InternalIPs, ns.ExternalIPs, ns.PodCIDRs = "", nil, nil, nil
	return fmt.Sprintf("%+v|v4out=%t|v6out=%t|prefixes=%t", ns, outside[corev1.IPv4Protocol], outside[corev1.IPv6Protocol], outside != nil)
}

func classify(nodes []*corev1.Node, c *Cluster) *nodeClasses {
	nc := &nodeClasses{nodes: sortedNodes(nodes), index: map[string]int{}}
	keys := map[string]int{}
	for i, n := range nc.nodes {
		ns := kubeview.NodeStateOf(n)
		out := nodePortsOutside(n, c.NodePortAddresses)
		key := classKey(ns, out)
		k, ok := keys[key]
		if !ok {
			k = len(nc.reps)
			keys[key] = k
			nc.reps = append(nc.reps, i)
		}
		nc.states = append(nc.states, ns)
		nc.outside = append(nc.outside, out)
		nc.class = append(nc.class, k)
		nc.index[n.Name] = i
	}
	return nc
}

// singledOut lists the nodes whose verdict for the Service may differ from their class's although they host
// none of its endpoints: the nodes the Service's own state names (an announcer's record names the node that
// announces a load balancer IP, and the verdict's announcer rules read that name).
func singledOut(ss kubeview.ServiceState) []string {
	var out []string
	for _, a := range ss.Announcements {
		out = append(out, a.Node)
	}
	return out
}

// Summarize is Status without a struct per node and per Service: every Local Service's verdict on every node of
// c, computed once per class of node (see Summary), sorted worst first (SortWorstFirst).
func Summarize(c *Cluster) []Summary {
	bySvc := slicesByService(c.EndpointSlices)
	nc := classify(c.Nodes, c)
	var out []Summary
	for _, svc := range c.Services {
		if !kubeview.IsExternalLocal(svc) {
			continue
		}
		s := summarize(svc, nc, bySvc[svc.Namespace+"/"+svc.Name], c.Announcers, c.AnnouncersLeave)
		s.IgnoredReason, s.Ignored = kubeview.IgnoredReason(svc, c.IgnoreSelector)
		out = append(out, s)
	}
	SortWorstFirst(out)
	return out
}

func summarize(svc *corev1.Service, nc *nodeClasses, eps []*discoveryv1.EndpointSlice, ann announce.Snapshot, leaving string) Summary {
	states, elsewhere := perNodeStates(svc, eps)
	elsewhere = withAnnouncers(states, elsewhere, svc, ann, leaving)
	s := Summary{Namespace: svc.Namespace, Name: svc.Name, Type: svc.Spec.Type, HealthCheckNodePort: svc.Spec.HealthCheckNodePort,
		Nodes: len(nc.nodes), classes: nc, own: map[int]NodeStatus{}}
	s.Outage = outage(elsewhere)
	s.Unannounced = verdict.UnannouncedIPs(elsewhere)
	s.AnnouncerUnknown, s.AnnouncerUnknownWhy = allocatedOnly(svc, elsewhere, ann)
	// The nodes the Service singles out get their own verdict; the others their class's, computed on one member.
	for name, ss := range states {
		if i, ok := nc.index[name]; ok {
			s.own[i] = verdictOn(ss, nc.states[i], nc.outside[i], s.AnnouncerUnknown)
		}
	}
	for _, name := range singledOut(elsewhere) {
		if i, ok := nc.index[name]; ok {
			if _, done := s.own[i]; !done {
				s.own[i] = verdictOn(elsewhere, nc.states[i], nc.outside[i], s.AnnouncerUnknown)
			}
		}
	}
	s.shared = make([]NodeStatus, len(nc.reps))
	members := make([]int, len(nc.reps))
	// rep is the member each class's verdict is computed on: one the Service does not single out, since a
	// singled-out node's name changes its verdict (an announcer naming it) and so cannot stand for the others.
	rep := make([]int, len(nc.reps))
	for i := range nc.nodes {
		if _, ok := s.own[i]; !ok {
			if members[nc.class[i]] == 0 {
				rep[nc.class[i]] = i
			}
			members[nc.class[i]]++
		}
	}
	healthChecked := s.Type == corev1.ServiceTypeLoadBalancer && s.HealthCheckNodePort != 0
	count := func(v NodeStatus, n int) {
		if v.Receives {
			s.Receiving += n
		}
		if v.Serves {
			s.Serving += n
		}
		if v.Blackhole {
			s.Dropping += n
			for _, d := range v.dropsReceived {
				if !slices.Contains(s.Drops, d) {
					s.Drops = append(s.Drops, d)
				}
			}
		}
		switch {
		case len(v.CannotTell) > 0 || len(v.AnnouncerUnknown) > 0:
			s.CannotTell += n
		case v.Receives && !v.InRotation && healthChecked:
			s.Drained += n
		}
	}
	for k := range nc.reps {
		if members[k] == 0 {
			continue // every member singled out: no shared verdict to compute
		}
		v := verdictOn(elsewhere, nc.states[rep[k]], nc.outside[rep[k]], s.AnnouncerUnknown)
		v.Node = ""
		s.shared[k] = v
		count(v, members[k])
	}
	// In node order, so that Drops lists what is dropped in the same order on every run.
	for i := range nc.nodes {
		if v, ok := s.own[i]; ok {
			count(v, 1)
		}
	}
	return s
}

// Status of the Service for a person: Failing (a node drops it), Outage (rejected everywhere), Ignored (placed
// so on purpose; its drops fail nothing), CannotTell (a node would drop what only the node can tell reaches
// it), OK.
func (s *Summary) Status() string {
	switch {
	case s.Ignored:
		return "Ignored"
	case s.Dropping > 0 || len(s.Unannounced) > 0:
		return "Failing"
	case s.Outage:
		return "Outage"
	case s.CannotTell > 0:
		return "CannotTell"
	}
	return "OK"
}

// SortWorstFirst orders Services as an operator reads them: failing first, then those in an outage (rejected
// on every node, which fails no node but serves nobody), then the most dropping nodes, then namespace and name.
func SortWorstFirst(s []Summary) {
	rank := func(x *Summary) int {
		switch {
		case x.Failing():
			return 0
		case x.Outage && !x.Ignored:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(s, func(a, b Summary) int {
		return cmp.Or(cmp.Compare(rank(&a), rank(&b)), cmp.Compare(b.Dropping, a.Dropping),
			strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
}
