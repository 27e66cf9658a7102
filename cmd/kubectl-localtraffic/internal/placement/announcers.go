package placement

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// withAnnouncers adds the announcers' records of the Service to each of its per-node states, as the exporter
// adds them to its snapshot's (kubeview.ServiceState.AddAnnouncers): the records are the cluster's, the same on
// every node. The records naming leaving (Cluster.AnnouncersLeave) of announcers that follow local endpoints
// are moved to another node with a ready local endpoint, the first by name, as those announcers move (or
// dropped where none has one), unless leaving keeps a ready local endpoint. It returns elsewhere with them.
func withAnnouncers(states map[string]kubeview.ServiceState, elsewhere kubeview.ServiceState, svc *corev1.Service,
	ann announce.Snapshot, leaving string) kubeview.ServiceState {
	if ss, ok := states[leaving]; ok && readyHere(ss) {
		leaving = "" // endpoints the drain leaves there: the announcers stay
	}
	successor := ""
	if leaving != "" {
		for node, ss := range states {
			if node != leaving && readyHere(ss) && (successor == "" || node < successor) {
				successor = node
			}
		}
	}
	add := func(ss kubeview.ServiceState) kubeview.ServiceState {
		ss.AddAnnouncers(ann, svc)
		if leaving == "" {
			return ss
		}
		moved := make([]announce.Announcement, 0, len(ss.Announcements))
		for _, a := range ss.Announcements {
			if a.Node == leaving && a.Source.FollowsLocalEndpoints() {
				if successor == "" {
					continue
				}
				a.Node = successor
			}
			moved = append(moved, a)
		}
		ss.Announcements = moved
		return ss
	}
	for node, ss := range states {
		states[node] = add(ss)
	}
	return add(elsewhere)
}

// readyHere: the state's node has a ready local endpoint of the Service in some family.
func readyHere(ss kubeview.ServiceState) bool {
	for _, f := range ss.Families {
		if f.LocalReadyEndpoints > 0 {
			return true
		}
	}
	return false
}

// leavingAnnouncements lists the Service's live announcements naming node by announcers that follow local
// endpoints: what a drain of node moves elsewhere. Its load balancer IPs' records, and its externalIPs' (a
// Cilium lease's holder announces those a policy selects, whatever the Service's type); what names the
// addresses they announce: "load balancer IP", "externalIP", or both.
func leavingAnnouncements(svc *corev1.Service, ann announce.Snapshot, node string) (leaving []announce.Announcement, what string) {
	keep := func(records []announce.Announcement) bool {
		n := len(leaving)
		for _, a := range records {
			if a.Node == node && !a.Expired && a.Source.FollowsLocalEndpoints() {
				leaving = append(leaving, a)
			}
		}
		return len(leaving) > n
	}
	ext := keep(ann.CiliumExternalIPAnnouncements(svc))
	lb := svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		keep(append(announce.FromAnnotations(svc.Annotations), ann.AnnouncementsFor(svc.Namespace, svc.Name)...))
	switch {
	case lb && ext:
		return leaving, "load balancer IP and externalIP"
	case ext:
		return leaving, "externalIP"
	}
	return leaving, "load balancer IP"
}

// unannouncedSummary is the summary's part for the addresses nobody announces ("" when none).
func unannouncedSummary(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return "; unannounced: no node announces " + strings.Join(ips, ", ") +
		" (its announcer's record names no live holder): every client of it is lost, however many nodes serve"
}

// announcerFindings: a layer 2 announcer that announces from a node without a ready local endpoint (live: its
// records against the status), and MetalLB with too few nodes to announce from.
func (a *auditor) announcerFindings(st *ServiceStatus, ws []*Workload) {
	if a.svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return
	}
	anns := a.c.Announcers.AnnouncementsFor(a.svc.Namespace, a.svc.Name)
	if st != nil {
		a.announcedWithoutLocal(*st, anns)
	}
	// A cluster where the plugin saw no MetalLB speaker (its Calico setup) has MetalLB allocate, not announce:
	// the finding would name the wrong announcer.
	if usesMetalLB(a.svc, anns) && a.c.Announcers.Speakers != announce.SpeakersNone {
		a.metallbFewNodes(st, ws)
	}
}

// announcedWithoutLocal: a live MetalLB ServiceL2Status or Cilium L2 lease naming a node that has no ready
// endpoint of the Service.
func (a *auditor) announcedWithoutLocal(st ServiceStatus, anns []announce.Announcement) {
	ready := map[string]bool{}
	for _, n := range st.Nodes {
		ready[n.Node] = n.LocalReadyEndpoints > 0
	}
	bySource := map[announce.Source][]string{}
	for _, an := range anns {
		if an.Expired || (an.Source != announce.SourceMetalLBL2 && an.Source != announce.SourceCiliumL2) || ready[an.Node] {
			continue
		}
		if !slices.Contains(bySource[an.Source], an.Node) {
			bySource[an.Source] = append(bySource[an.Source], an.Node)
		}
	}
	for _, src := range []announce.Source{announce.SourceCiliumL2, announce.SourceMetalLBL2} {
		nodes := bySource[src]
		if len(nodes) == 0 {
			continue
		}
		slices.Sort(nodes)
		msg := fmt.Sprintf("%s announces the load balancer IP from %s, which has no ready endpoint of the Service: every client's "+
			"connection reaches that node and kube-proxy drops it", src, strings.Join(nodes, ", "))
		why := "A layer 2 announcer makes one node answer ARP and NDP for the address, and reads no healthCheckNodePort: with " +
			"externalTrafficPolicy Local the node it picks must have a ready local endpoint, or the whole address is dropped there. "
		fix := ""
		switch src {
		case announce.SourceCiliumL2:
			why += "Cilium's L2 announcer lets every node its CiliumL2AnnouncementPolicy selects take the Service's lease, " +
				"whatever externalTrafficPolicy says, unless its local-backend gate runs: only recent releases (1.20.2 and " +
				"later) withdraw a node without a local active backend from a Local Service's election."
			fix = fmt.Sprintf("Upgrade Cilium to a release whose L2 announcer gates Local Services on local backends; until then "+
				"restrict the CiliumL2AnnouncementPolicy's nodeSelector to the nodes that run the replicas (or run the workload on "+
				"every node it selects), or set externalTrafficPolicy: Cluster. kubectl -n %s get lease %s shows the holder.",
				announce.DefaultCiliumNamespace, announce.CiliumLeaseName(a.svc.Namespace, a.svc.Name))
		default:
			why += "MetalLB's layer 2 speaker announces a Local Service only from a node with a ready local endpoint, so a " +
				"ServiceL2Status naming a node without one is a failover under way (its endpoint just went away) or a " +
				"speaker that cannot see the endpoints."
			fix = fmt.Sprintf("Check the speaker on %s (kubectl -n metallb-system logs -l component=speaker) and that a "+
				"ready replica runs on some node; kubectl get servicel2statuses -A -l metallb.io/service-name=%s shows the holder.",
				nodes[0], a.svc.Name)
		}
		a.add(AnnouncedWithoutLocal, Warning, nil, nodes, msg, why, fix)
	}
}

// usesMetalLB: MetalLB's records name the Service, or its annotations configure MetalLB (manifest mode has no
// records).
func usesMetalLB(svc *corev1.Service, anns []announce.Announcement) bool {
	for _, an := range anns {
		if an.Source == announce.SourceMetalLBL2 || an.Source == announce.SourceMetalLBBGP {
			return true
		}
	}
	for k := range svc.Annotations {
		if strings.HasPrefix(k, "metallb.universe.tf/") || strings.HasPrefix(k, "metallb.io/") {
			return true
		}
	}
	return false
}

// metallbFewNodes: MetalLB with Local announces from the nodes with a ready local endpoint only; fewer than two
// such nodes now (live), fewer than two replicas, or fewer than two nodes the workloads can run on (the audit's
// placement reading) leaves one node between the Service and an outage.
func (a *auditor) metallbFewNodes(st *ServiceStatus, ws []*Workload) {
	var replicas int32
	daemon := false
	fitNodes := map[string]bool{}
	for _, w := range ws {
		if w.DaemonSet != nil {
			daemon = true
		} else {
			replicas += w.Replicas
		}
		for _, n := range a.nodes {
			if ok, _ := fit(w, n); ok {
				fitNodes[n.Name] = true
			}
		}
	}
	var why []string
	if st != nil {
		readyOn := 0
		for _, n := range st.Nodes {
			if n.LocalReadyEndpoints > 0 {
				readyOn++
			}
		}
		// None anywhere is an outage, which status reports; one is the single node this finding is about.
		if readyOn == 1 {
			why = append(why, "ready endpoints on one node now")
		}
	}
	if len(ws) > 0 && !daemon && replicas < 2 {
		why = append(why, fmt.Sprintf("%d replica(s)", replicas))
	}
	if len(ws) > 0 && len(fitNodes) < 2 {
		why = append(why, fmt.Sprintf("the workloads can run on %d node(s)", len(fitNodes)))
	}
	if len(why) == 0 {
		return
	}
	var objs []ObjectRef
	for _, w := range ws {
		objs = append(objs, w.ref(a.c))
	}
	fix := "Run at least two replicas on distinct nodes: a DoNotSchedule hostname spread, and a PodDisruptionBudget that keeps one; " +
		"or set externalTrafficPolicy: Cluster where the client source IP is not needed."
	if len(ws) > 0 && ws[0].DaemonSet == nil {
		fix = fmt.Sprintf("kubectl -n %s scale %s/%s --replicas=2, then %s", ws[0].Namespace, strings.ToLower(ws[0].Kind), ws[0].Name, spreadPatch(ws[0]))
	}
	a.add(MetalLBFewNodes, Warning, objs, nil,
		"MetalLB announces the Service with externalTrafficPolicy Local from too few nodes: "+strings.Join(why, "; "),
		"MetalLB announces a Local Service only from nodes with a ready local endpoint (layer 2: one of them answers ARP and "+
			"NDP; BGP: each of them advertises a route). With one such node, a drain, a crash or a rollout that stops the pod "+
			"first leaves no node to announce from: MetalLB withdraws the address, and every client is lost until a "+
			"replacement pod is scheduled, started and ready.",
		fix)
}
