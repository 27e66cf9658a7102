package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// DrainReport is what draining one node (kubectl drain: cordon, then evict every pod but DaemonSets' and those a
// PodDisruptionBudget holds) does to the Local Services with an endpoint on it.
type DrainReport struct {
	Node     string         `json:"node"`
	Services []DrainService `json:"services"`
	// Loses: some Service loses traffic (DrainService.Loses).
	Loses bool `json:"loses"`
	// ObservedBlackholes counts the Services some node's exporter reports blackholed now (DrainService.Observed,
	// drain-check --prometheus): draining adds to a loss already under way, and fails the check as Loses does.
	ObservedBlackholes int `json:"observedBlackholes,omitempty"`
}

// DrainService is one Local Service with an endpoint on the drained node.
type DrainService struct {
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	Type      corev1.ServiceType `json:"type"`
	// LocalEndpoints on the node now.
	LocalEndpoints int `json:"localEndpoints"`
	// InRotation is whether the node receives the Service's traffic now: "yes", "no", or "unknown" (only the
	// node's exporter can tell: status's cannot-tell).
	InRotation string `json:"inRotation"`
	// Evicted names the backing pods on the node a drain evicts; Blocked the ones it cannot (a
	// PodDisruptionBudget allows no disruption now: the drain waits) and Stay the DaemonSets' (kubectl drain
	// --ignore-daemonsets leaves them).
	Evicted []string `json:"evicted,omitempty"`
	Blocked []string `json:"blocked,omitempty"`
	Stay    []string `json:"stay,omitempty"`
	// Elsewhere is where the scheduler can put the evicted pods' workloads (the audit's placement reading:
	// nodeSelector, affinity, taints, spread labels); empty when nowhere.
	Elsewhere []string `json:"elsewhere"`
	// ServingAfter is how many nodes serve the Service once the evicted pods are gone, before any replacement
	// runs.
	ServingAfter int `json:"servingAfter"`
	// Loses: draining loses traffic; Why says how (every reason, one per line of the text output).
	Loses bool     `json:"loses"`
	Why   []string `json:"why,omitempty"`
	// Unknown names what only a node can tell after the drain (status's cannot-tell).
	Unknown []string `json:"unknown,omitempty"`
	// Observed (drain-check --prometheus): per blackhole reason the nodes' exporters report for the Service now,
	// before the drain, the nodes reporting it; absent when none does or nothing was read.
	Observed map[string][]string `json:"observed,omitempty"`
	// LoadBalancerCheck is how long the Service's load balancer keeps sending to the node once its health
	// check fails; nil when the Service has none or it is not known.
	LoadBalancerCheck *LBCheckWindow `json:"loadBalancerCheck,omitempty"`
	// MeasuredDrain (drain-check --prometheus, --from-exporters): how long the Service's load balancers kept
	// sending to nodes whose health check answered 503, as the exporters measured it; nil when they have no
	// episode of it.
	MeasuredDrain *MeasuredDrain `json:"measuredDrain,omitempty"`
	// LoadBalancerWindow is the time the load balancer keeps sending to the node after its pods stop that the
	// verdict line uses: the measured drain's p95 where there is one, else the check window of the annotations;
	// nil when neither is known or no load balancer sends to the node (LoadBalancerCheck's conditions).
	LoadBalancerWindow *LBWindow `json:"loadBalancerWindow,omitempty"`
	// PreStop (with a measured drain): the preStop sleep and termination grace period the Service's pods need to
	// serve until the load balancers stop sending, per workload.
	PreStop *PreStopAdvice `json:"preStop,omitempty"`
	// AnnouncerFailover: announcers that follow local endpoints announce the Service's load balancer IP from
	// the node, and other nodes with a ready local endpoint remain to take it: they move it there once the
	// node's endpoints go, a failover window (as the load balancer's check window), not a loss. nil when no
	// such announcer names the node, or none remains (then Why says the address is lost).
	AnnouncerFailover *AnnouncerFailover `json:"announcerFailover,omitempty"`

	// lbSends: a load balancer's health check decides whether the node gets the Service's traffic (a
	// LoadBalancer Service, the node in rotation or maybe, no announcer's failover): its window applies.
	lbSends bool
}

// AnnouncerFailover is where announcers move a load balancer IP off a drained node.
type AnnouncerFailover struct {
	// Sources are the announcers whose records name the drained node (announce.Source, as the exporter's
	// localtraffic_announcer_source_state names them).
	Sources []announce.Source `json:"sources"`
	// Announces names the addresses they announce from it: "load balancer IP", "externalIP" (a Cilium policy's
	// externalIPs), or "load balancer IP and externalIP".
	Announces string `json:"announces"`
	// To lists the nodes with a ready local endpoint after the drain that the load balancers may use: the
	// announcers' candidates (layer 2 elects one, BGP has each advertise).
	To []string `json:"to"`
	// LocalBackendGate: Cilium's L2 announcer is among them, which moves the address only with its local-backend
	// gate (1.20.2 and later); the plugin cannot tell the release, an earlier agent keeps the lease on the node.
	LocalBackendGate bool `json:"localBackendGate,omitempty"`
}

// LBWindow is how long a load balancer keeps sending to a node once its health check fails, and what it was read
// from: "measured" (the exporters' measured drain, its p95) or "annotations" (LBCheckWindow).
type LBWindow struct {
	Seconds float64 `json:"seconds"`
	Source  string  `json:"source"`
}

// The LBWindow sources.
const (
	WindowMeasured    = "measured"
	WindowAnnotations = "annotations"
)

// LBCheckWindow is a load balancer's time to take a node out: its health check interval × unhealthy threshold.
type LBCheckWindow struct {
	Interval  metav1.Duration `json:"interval"`
	Threshold int             `json:"threshold"`
	Seconds   float64         `json:"seconds"`
	// Source names the annotations it was read from.
	Source string `json:"source"`
}

// lbCheckWindow reads the Service's health check window from its annotations (announce.CheckWindowOf, the
// table the exporter reads too); nil when they do not say both.
func lbCheckWindow(svc *corev1.Service) *LBCheckWindow {
	w, ok := announce.CheckWindowOf(svc.Annotations)
	if !ok {
		return nil
	}
	return &LBCheckWindow{Interval: metav1.Duration{Duration: w.Interval}, Threshold: w.Threshold, Seconds: w.Seconds(),
		Source: w.Source}
}

// DrainCheck predicts what draining node does to every Local Service with an endpoint on it: the node's
// endpoints of evicted pods disappear (a PodDisruptionBudget that allows no disruption holds its pods, and
// DaemonSets' pods stay), the node is cordoned, and the verdict (Status) is taken again. A Service loses
// traffic when the drain leaves it no endpoint anywhere, or makes some node that receives its traffic drop it;
// whether and where its evicted pods can run again is reported beside.
func DrainCheck(c *Cluster, node string) (DrainReport, error) {
	var target *corev1.Node
	for _, n := range c.Nodes {
		if n.Name == node {
			target = n
		}
	}
	if target == nil {
		return DrainReport{}, fmt.Errorf("no node %q", node)
	}
	before := Status(c)
	all := workloads(c)
	ix := newBackingIndex(c, all)
	svcs := map[string]*corev1.Service{}
	for _, s := range c.Services {
		svcs[s.Namespace+"/"+s.Name] = s
	}

	// The pods the drain evicts, and the ones it leaves.
	evicted, blocked, stay := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, p := range c.Pods {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := p.Namespace + "/" + p.Name
		switch {
		case isDaemonPod(p):
			stay[key] = true
		case len(blockingPDBs(c, p)) > 0:
			blocked[key] = true
		default:
			evicted[key] = true
		}
	}

	// After: the node cordoned, the evicted pods' endpoints gone, and the announcers that follow local
	// endpoints moved off it (AnnouncersLeave; whether one remains to take the address is judged below).
	after := *c
	after.AnnouncersLeave = node
	after.Nodes = make([]*corev1.Node, len(c.Nodes))
	for i, n := range c.Nodes {
		if n.Name == node {
			n = n.DeepCopy()
			n.Spec.Unschedulable = true
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		}
		after.Nodes[i] = n
	}
	after.EndpointSlices = make([]*discoveryv1.EndpointSlice, 0, len(c.EndpointSlices))
	gone := func(ep discoveryv1.Endpoint, ns string) bool {
		return ep.NodeName != nil && *ep.NodeName == node && evictedEndpoint(ep, ns, evicted)
	}
	for _, s := range c.EndpointSlices {
		if !slices.ContainsFunc(s.Endpoints, func(ep discoveryv1.Endpoint) bool { return gone(ep, s.Namespace) }) {
			after.EndpointSlices = append(after.EndpointSlices, s)
			continue
		}
		kept := s.DeepCopy()
		kept.Endpoints = slices.DeleteFunc(kept.Endpoints, func(ep discoveryv1.Endpoint) bool { return gone(ep, s.Namespace) })
		after.EndpointSlices = append(after.EndpointSlices, kept)
	}
	// The nodes a load balancer (an announcer among them) may use after the drain.
	eligible := map[string]bool{}
	for _, n := range after.Nodes {
		eligible[n.Name] = kubeview.NodeStateOf(n).LoadBalancerEligible()
	}
	afterBy := map[string]ServiceStatus{}
	for _, s := range Status(&after) {
		afterBy[s.Namespace+"/"+s.Name] = s
	}

	rep := DrainReport{Node: node, Services: []DrainService{}}
	for _, b := range before {
		key := b.Namespace + "/" + b.Name
		var here NodeStatus
		for _, n := range b.Nodes {
			if n.Node == node {
				here = n
			}
		}
		svc := svcs[key]
		ws, _, _ := ix.backing(svc)
		podsHere := backingPodsOn(ix, svc, node)
		if here.LocalEndpoints == 0 && len(podsHere) == 0 {
			continue
		}
		a := afterBy[key]
		d := DrainService{Namespace: b.Namespace, Name: b.Name, Type: b.Type, LocalEndpoints: here.LocalEndpoints,
			InRotation: "no", ServingAfter: a.Serving, Elsewhere: []string{}}
		switch {
		case len(here.CannotTell) > 0 || here.RotationUnknown && !here.InRotation:
			d.InRotation = "unknown"
		case here.InRotation:
			d.InRotation = "yes"
		}
		for _, p := range podsHere {
			k := p.Namespace + "/" + p.Name
			switch {
			case evicted[k]:
				d.Evicted = append(d.Evicted, p.Name)
			case blocked[k]:
				d.Blocked = append(d.Blocked, p.Name+" ("+strings.Join(blockingPDBs(c, p), ", ")+" allows no disruption)")
			case stay[k]:
				d.Stay = append(d.Stay, p.Name)
			}
		}
		elsewhere := map[string]bool{}
		for _, w := range ws {
			if w.DaemonSet != nil {
				continue
			}
			for _, n := range after.Nodes {
				if n.Name == node {
					continue
				}
				if ok, _ := fit(w, n); ok {
					elsewhere[n.Name] = true
				}
			}
		}
		d.Elsewhere = sortedKeys(elsewhere)
		if leaving, what := leavingAnnouncements(svc, c.Announcers, node); len(leaving) > 0 {
			d.AnnouncerFailover, d.Why = announcerFailover(leaving, what, a, eligible, node, d.Why)
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && d.InRotation != "no" && d.AnnouncerFailover == nil {
			d.lbSends = true
			d.LoadBalancerCheck = lbCheckWindow(svc)
			if d.LoadBalancerCheck != nil {
				d.LoadBalancerWindow = &LBWindow{Seconds: d.LoadBalancerCheck.Seconds, Source: WindowAnnotations}
			}
		}

		// What the drain changes: an outage it causes, or nodes that drop after it and did not before.
		if a.Outage && !b.Outage {
			where := "and the scheduler can place them nowhere else (" + strings.Join(notFit(ws, after.Nodes, node), "; ") + ")"
			if len(d.Elsewhere) > 0 {
				where = "until replacements run elsewhere (" + strings.Join(d.Elsewhere, ", ") + ")"
			}
			d.Why = append(d.Why, "no endpoint left anywhere once "+node+"'s pods are evicted: every node rejects the Service's traffic "+where)
		}
		holesBefore := map[string]bool{}
		for _, n := range b.Nodes {
			holesBefore[n.Node] = n.Blackhole
		}
		for _, n := range a.Nodes {
			if n.Blackhole && !holesBefore[n.Node] {
				d.Why = append(d.Why, fmt.Sprintf("%s would drop %s: it still receives the Service's traffic without a local endpoint", n.Node, strings.Join(n.dropsReceived, ", ")))
			}
			if n.Node == node && len(n.CannotTell) > 0 {
				d.Unknown = append(d.Unknown, fmt.Sprintf("%s would drop %s if it still reaches it (only the node can tell)", n.Node, strings.Join(n.CannotTell, ", ")))
			}
			if n.Node == node && len(n.AnnouncerUnknown) > 0 {
				d.Unknown = append(d.Unknown, fmt.Sprintf("%s would drop %s if its announcer still sends it there (not MetalLB-announced: "+
					"who announces it the API does not show)", n.Node, strings.Join(n.AnnouncerUnknown, ", ")))
			}
		}
		d.Loses = len(d.Why) > 0
		rep.Loses = rep.Loses || d.Loses
		rep.Services = append(rep.Services, d)
	}
	return rep, nil
}

// announcerFailover decides a drain of node for the announcers that follow local endpoints and announce the
// Service's load balancer IP from it (leaving). While the node keeps a ready local endpoint (pods the drain
// leaves) they stay, and it serves. Otherwise they move the address to a node with a ready local endpoint that
// load balancers may use (not excluded, not going away): connections sent to node meanwhile are lost for the
// failover (layer 2: until the new holder's gratuitous ARP; BGP: until routers withdraw node's route), a window
// like a load balancer's health check's, not a loss. With no such node left nobody announces the address and
// every client is lost: why gets that reason, unless the drain leaves no endpoint at all (an outage, which why
// already names).
func announcerFailover(leaving []announce.Announcement, what string, after ServiceStatus, eligible map[string]bool, node string,
	why []string) (*AnnouncerFailover, []string) {
	var to []string
	for _, n := range after.Nodes {
		if n.Node == node && n.LocalReadyEndpoints > 0 {
			return nil, why
		}
		if n.Node != node && n.LocalReadyEndpoints > 0 && eligible[n.Node] {
			to = append(to, n.Node)
		}
	}
	var sources []announce.Source
	for _, a := range leaving {
		if !slices.Contains(sources, a.Source) {
			sources = append(sources, a.Source)
		}
	}
	if len(to) > 0 {
		return &AnnouncerFailover{Sources: sources, Announces: what, To: to, LocalBackendGate: slices.Contains(sources, announce.SourceCiliumL2)}, why
	}
	if after.Outage {
		return nil, why
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = string(s)
	}
	return nil, append(why, fmt.Sprintf("%s announces the %s from %s and moves it only to a node with a ready local "+
		"endpoint: none that load balancers may use remains once %s's pods are evicted, so nobody announces the address and every "+
		"client of it is lost", strings.Join(names, ", "), what, node, node))
}

// evictedEndpoint tells whether the endpoint is one of an evicted pod's (an endpoint without a pod reference is
// kept: nothing evicts it).
func evictedEndpoint(ep discoveryv1.Endpoint, ns string, evicted map[string]bool) bool {
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
		return false
	}
	return evicted[cmp.Or(ep.TargetRef.Namespace, ns)+"/"+ep.TargetRef.Name]
}

// isDaemonPod: a DaemonSet's pod, which kubectl drain --ignore-daemonsets leaves (the DaemonSet would put it
// back at once anyway).
func isDaemonPod(p *corev1.Pod) bool {
	o := controllerOf(p.OwnerReferences)
	return o != nil && o.Kind == "DaemonSet"
}

// blockingPDBs names the PodDisruptionBudgets that select the pod and allow no disruption now: the eviction API
// refuses the pod, and the drain waits.
func blockingPDBs(c *Cluster, p *corev1.Pod) []string {
	var out []string
	for _, b := range c.PDBs {
		if b.Namespace != p.Namespace || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if b.Status.DisruptionsAllowed <= 0 {
			out = append(out, "PodDisruptionBudget "+b.Name)
		}
	}
	return out
}

// backingPodsOn lists the pods on node the Service selects, by name.
func backingPodsOn(ix *backingIndex, svc *corev1.Service, node string) []*corev1.Pod {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var out []*corev1.Pod
	for _, p := range ix.pods.candidates(svc.Namespace, svc.Spec.Selector) {
		if p.Spec.NodeName == node && sel.Matches(labels.Set(p.Labels)) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// notFit says, per workload, why the first other node does not take its pods.
func notFit(ws []*Workload, nodes []*corev1.Node, drained string) []string {
	var out []string
	for _, w := range ws {
		for _, n := range nodes {
			if n.Name == drained {
				continue
			}
			if ok, why := fit(w, n); !ok {
				out = append(out, fmt.Sprintf("%s %s: %s on %s", w.Kind, w.Name, why, n.Name))
				break
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "no workload found behind the Service")
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// AddObserved records, for each Service of the report, the blackholes the nodes' exporters report now.
func (r *DrainReport) AddObserved(obs Observed) {
	for i := range r.Services {
		d := &r.Services[i]
		key := d.Namespace + "/" + d.Name
		for node, o := range obs {
			if reason, ok := o.Reasons[key]; ok {
				if d.Observed == nil {
					d.Observed = map[string][]string{}
				}
				d.Observed[reason] = append(d.Observed[reason], node)
			}
		}
		for _, nodes := range d.Observed {
			slices.Sort(nodes)
		}
		if len(d.Observed) > 0 {
			r.ObservedBlackholes++
		}
	}
}

// AddMeasuredDrains records, for each Service of the report with a measured drain, the drain and its preStop
// advice; where a load balancer sends to the node, the measured drain replaces the annotations' check window as
// the time it keeps sending (LoadBalancerWindow): what the load balancer did, not what it was configured to do.
func (r *DrainReport) AddMeasuredDrains(drains MeasuredDrains, advice map[string]*PreStopAdvice) {
	for i := range r.Services {
		d := &r.Services[i]
		key := d.Namespace + "/" + d.Name
		m, ok := drains[key]
		if !ok {
			continue
		}
		d.MeasuredDrain, d.PreStop = &m, advice[key]
		if d.lbSends {
			d.LoadBalancerWindow = &LBWindow{Seconds: m.P95Seconds, Source: WindowMeasured}
		}
	}
}
