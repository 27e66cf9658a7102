package placement

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// ServiceReport is one Local Service's placement story and what is wrong with it.
type ServiceReport struct {
	Service ObjectRef          `json:"service"`
	Type    corev1.ServiceType `json:"type"`
	// HealthChecked: a LoadBalancer Service whose load balancer (as far as its annotations tell) checks
	// healthCheckNodePort over HTTP, so nodes without a ready local endpoint are taken out of rotation.
	HealthChecked bool `json:"healthChecked"`
	// Receiving are the nodes that receive its external traffic (load balancer targets, or every node a client
	// may send a NodePort or externalIP packet to).
	Receiving []string       `json:"receiving"`
	Workloads []ObjectRef    `json:"workloads"`
	Story     string         `json:"story"`
	Status    *ServiceStatus `json:"status,omitempty"` // live mode
	// HealthCheck says where the load balancer health-checks the nodes, as read from the annotations.
	HealthCheck string    `json:"healthCheck,omitempty"`
	Findings    []Finding `json:"findings"`
	// Ignored: the Service carries localtraffic.io/intentional-placement (IgnoredReason is its value): its
	// findings are reported as ignored and do not count towards --fail-on.
	Ignored       bool   `json:"ignored,omitempty"`
	IgnoredReason string `json:"ignoredReason,omitempty"`
}

// Report is the audit of a cluster or a set of manifests.
type Report struct {
	Live     bool            `json:"live"`
	Nodes    []string        `json:"nodes"`
	Services []ServiceReport `json:"services"`
}

// Findings returns every finding of the report: those that count first, then the ignored ones; each most
// severe first, then by Service and ID.
func (r Report) Findings() []Finding {
	var out []Finding
	for _, s := range r.Services {
		out = append(out, s.Findings...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Ignored != out[j].Ignored {
			return !out[i].Ignored // what fails before what is ignored
		}
		if out[i].Severity != out[j].Severity {
			return out[i].Severity > out[j].Severity
		}
		if out[i].Service != out[j].Service {
			return out[i].Service.Namespace+"/"+out[i].Service.Name < out[j].Service.Namespace+"/"+out[j].Service.Name
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Worst is the highest severity among the findings that are not ignored, 0 when there are none: what --fail-on
// compares.
func (r Report) Worst() Severity {
	var w Severity
	for _, s := range r.Services {
		for _, f := range s.Findings {
			if !f.Ignored {
				w = max(w, f.Severity)
			}
		}
	}
	return w
}

// Audit judges every Service with externalTrafficPolicy Local in the cluster (or manifests).
func Audit(c *Cluster) Report {
	nodes := sortedNodes(c.Nodes)
	rep := Report{Live: c.Live, Nodes: nodeNames(nodes)}
	all := workloads(c)
	index := newBackingIndex(c, all)
	var statuses map[string]ServiceStatus
	if c.Live {
		statuses = map[string]ServiceStatus{}
		for _, st := range Status(c) {
			statuses[st.Namespace+"/"+st.Name] = st
		}
	}
	for _, svc := range c.Services {
		if !kubeview.IsExternalLocal(svc) {
			continue
		}
		a := auditor{c: c, svc: svc, nodes: nodes}
		var st *ServiceStatus
		if s, ok := statuses[svc.Namespace+"/"+svc.Name]; ok {
			st = &s
		}
		rep.Services = append(rep.Services, a.run(index, st))
	}
	sort.Slice(rep.Services, func(i, j int) bool {
		a, b := rep.Services[i].Service, rep.Services[j].Service
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return rep
}

type auditor struct {
	c     *Cluster
	svc   *corev1.Service
	nodes []*corev1.Node
	ref   ObjectRef
	// guarded: the load balancer drains nodes without a ready local endpoint (health-checked LoadBalancer), so a
	// node without a replica costs capacity, not packets.
	guarded   bool
	receiving []*corev1.Node
	findings  []Finding
}

// severity is the finding's severity for a placement problem: as given when nodes that lack a replica drop
// packets, info (capacity advice) when a health check drains them.
func (a *auditor) severity(unguarded Severity) Severity {
	if a.guarded {
		return Info
	}
	return unguarded
}

func (a *auditor) add(id RuleID, sev Severity, objs []ObjectRef, nodes []string, msg, why, fix string) {
	r, _ := RuleByID(id)
	a.findings = append(a.findings, Finding{ID: id, Name: r.Name, Severity: sev, Service: a.ref,
		Objects: append([]ObjectRef{a.ref}, objs...), Nodes: nodes, Message: msg, Why: why, Fix: fix})
}

func (a *auditor) run(index *backingIndex, st *ServiceStatus) ServiceReport {
	svc := a.svc
	a.ref = a.c.ref("Service", svc.Namespace, svc.Name)
	providerID := ""
	for _, n := range a.nodes {
		if n.Spec.ProviderID != "" {
			providerID = n.Spec.ProviderID
			break
		}
	}
	lb := svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	var hc announce.LBCheck
	if lb {
		hc = announce.LBCheckOf(svc, providerID)
	}
	a.guarded = lb && hc.Class != announce.LBCheckMisdirected
	a.receiving = receivingNodes(svc, a.nodes)
	rep := ServiceReport{Service: a.ref, Type: svc.Spec.Type, HealthChecked: a.guarded,
		Receiving: nodeNames(a.receiving), Status: st}
	if lb {
		rep.HealthCheck = strings.TrimSpace(orDefault(hc.Provider, "unknown provider") + ": " + hc.Detail)
	}
	switch {
	case lb && hc.Class == announce.LBCheckMisdirected:
		a.add(HealthCheckMisdirect, Warning, nil, nil,
			fmt.Sprintf("%s: the load balancer's health check %s", orDefault(hc.Provider, "load balancer"), hc.Detail),
			"A health check that passes whether or not the node has a ready local endpoint keeps such nodes in rotation: "+
				"the load balancer sends them connections that kube-proxy drops.",
			hc.Fix)
	case lb && hc.Class == announce.LBCheckTrafficPort:
		a.add(HealthCheckMisdirect, Info, nil, nil,
			fmt.Sprintf("%s: the load balancer's health check %s, not healthCheckNodePort", orDefault(hc.Provider, "load balancer"), hc.Detail),
			"kube-proxy drops the check's connection on a node without a local endpoint, so the node is drained, but only "+
				"after the check times out unhealthy-threshold times: new connections blackhole meanwhile, and the 503 that "+
				"healthCheckNodePort gives while pods terminate is never seen.",
			hc.Fix)
	}
	if st != nil {
		a.blackholeNow(*st)
	}
	ws, pods, hasSelector := index.backing(svc)
	a.announcerFindings(st, ws)
	for _, w := range ws {
		rep.Workloads = append(rep.Workloads, w.ref(a.c))
	}
	switch {
	case !hasSelector:
		rep.Story = a.storyPrefix() + "no selector: endpoints are managed by hand, no placement to judge"
	case len(ws) == 0:
		if pods == 0 {
			a.add(SelectorMatchesNone, Warning, nil, nil,
				fmt.Sprintf("selector %s matches no workload's pod template%s in namespace %s",
					selectorString(svc.Spec.Selector), map[bool]string{true: " and no pod", false: ""}[a.c.Live], svc.Namespace),
				"With no pod behind it the Service has no endpoint anywhere: kube-proxy rejects its traffic on every node, "+
					"and a workload applied later with other labels never joins it.",
				fmt.Sprintf("Make the selector match the workload's template labels, e.g. kubectl -n %s patch service %s --type=merge -p '{\"spec\":{\"selector\":{...the template's labels...}}}'",
					svc.Namespace, svc.Name))
		}
		rep.Story = a.storyPrefix() + "no workload behind it"
	default:
		rep.Story = a.storyPrefix() + a.placement(ws)
	}
	if !a.guarded && svc.Spec.Type != corev1.ServiceTypeLoadBalancer && hasSelector && !allDaemonSets(ws) {
		a.add(NodePortNoHealthCheck, Info, nil, nil,
			"no load balancer health check can tell which nodes have a local endpoint (NodePort/externalIPs with Local)",
			"Every node that clients send to must host a ready replica at every moment: a drain, a rollout or a rescheduled "+
				"pod blackholes that node until it has one again, and nothing takes it out of rotation.",
			"Run the workload as a DaemonSet (one endpoint per node is structural), or put a LoadBalancer Service in front, whose load "+
				"balancer health-checks spec.healthCheckNodePort.")
	}
	sort.SliceStable(a.findings, func(i, j int) bool { return a.findings[i].ID < a.findings[j].ID })
	if reason, ok := kubeview.IgnoredReason(svc, nil); ok {
		rep.Ignored, rep.IgnoredReason = true, reason
		for i := range a.findings {
			a.findings[i].Ignored, a.findings[i].IgnoredReason = true, reason
		}
	}
	rep.Findings = a.findings
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	return rep
}

func (a *auditor) storyPrefix() string {
	var in []string
	for _, p := range a.svc.Spec.Ports {
		if p.NodePort != 0 {
			in = append(in, fmt.Sprintf("NodePort %d/%s", p.NodePort, p.Protocol))
		} else {
			in = append(in, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	how := fmt.Sprintf("%d nodes receive %s", len(a.receiving), strings.Join(in, ", "))
	if a.guarded {
		how += " (load balancer targets; its health check drains nodes without a ready local endpoint)"
	}
	return how + "; "
}

func allDaemonSets(ws []*Workload) bool {
	for _, w := range ws {
		if w.DaemonSet == nil {
			return false
		}
	}
	return len(ws) > 0
}

// receivingNodes are the nodes that receive the Service's external traffic: the shared decision's receivers
// (package verdict), the exporter's in-rotation rule without what only a node can see.
func receivingNodes(svc *corev1.Service, nodes []*corev1.Node) []*corev1.Node {
	ss := kubeview.ServiceState{Type: svc.Spec.Type, HealthCheckNodePort: svc.Spec.HealthCheckNodePort}
	var out []*corev1.Node
	for _, n := range nodes {
		if verdict.Receiver(ss, kubeview.NodeStateOf(n)) {
			out = append(out, n)
		}
	}
	return out
}

func (a *auditor) blackholeNow(st ServiceStatus) {
	holes := st.Blackholes()
	if len(holes) == 0 {
		return
	}
	a.add(BlackholeNow, Critical, nil, holes,
		fmt.Sprintf("%s; %s", st.Summary, "these nodes receive its external traffic and have no local endpoint"),
		"kube-proxy drops new connections for a Local Service on a node without a local endpoint: no reset, no log line.",
		"Give every listed node a ready replica (see the placement findings below for why it has none), or take it out of the "+
			"load balancer (label node.kubernetes.io/exclude-from-external-load-balancers).")
}

// placement judges the workloads behind the Service and returns the story line.
func (a *auditor) placement(ws []*Workload) string {
	receiving := map[string]bool{}
	for _, n := range a.receiving {
		receiving[n.Name] = true
	}
	type fitInfo struct {
		ok  map[string]bool
		why map[string]string
	}
	fits := map[*Workload]fitInfo{}
	covered := map[string]bool{} // receiving nodes some workload can run on
	byDaemon := map[string]bool{}
	var objs []ObjectRef
	var replicas int32
	var story []string
	for _, w := range ws {
		fi := fitInfo{ok: map[string]bool{}, why: map[string]string{}}
		for _, n := range a.nodes {
			ok, why := fit(w, n)
			fi.ok[n.Name], fi.why[n.Name] = ok, why
			if ok && receiving[n.Name] {
				covered[n.Name] = true
				if w.DaemonSet != nil {
					byDaemon[n.Name] = true
				}
			}
		}
		fits[w] = fi
		objs = append(objs, w.ref(a.c))
		if w.DaemonSet == nil {
			replicas += w.Replicas
			story = append(story, fmt.Sprintf("%s %s: %d replicas, can run on %d of them", w.Kind, w.Name, w.Replicas, countIn(fi.ok, receiving)))
		} else {
			story = append(story, fmt.Sprintf("DaemonSet %s: runs on %d of them", w.Name, countIn(fi.ok, receiving)))
		}
	}

	// Receiving nodes no workload can ever run on.
	var missing []string
	reasons := map[string][]string{}
	for _, n := range a.receiving {
		if covered[n.Name] {
			continue
		}
		missing = append(missing, n.Name)
		why := fits[ws[0]].why[n.Name]
		reasons[why] = append(reasons[why], n.Name)
	}
	if len(missing) > 0 {
		var parts []string
		for why, ns := range reasons {
			parts = append(parts, fmt.Sprintf("%s (%s)", strings.Join(ns, ", "), why))
		}
		sort.Strings(parts)
		if allDaemonSets(ws) {
			a.add(DaemonSetMissesNodes, a.severity(Critical), objs, missing,
				fmt.Sprintf("the DaemonSet runs on %d of the %d nodes that receive the Service's traffic; no daemon pod on %s",
					len(a.receiving)-len(missing), len(a.receiving), strings.Join(parts, "; ")),
				"A node that receives the traffic but runs no daemon pod has no local endpoint, ever.",
				daemonFix(ws[0], a.nodes, missing))
		} else {
			a.add(PinnedPlacement, a.severity(Critical), objs, missing,
				fmt.Sprintf("replicas can run on %d of the %d nodes that receive the Service's traffic; never on %s",
					len(a.receiving)-len(missing), len(a.receiving), strings.Join(parts, "; ")),
				"A node that receives the traffic but can never host a replica has no local endpoint: with Local, kube-proxy "+
					"drops every new connection there.",
				pinFix(ws, fits[ws[0]].why[missing[0]]))
		}
	}

	// Nodes left to the replicated workloads: covered, and not already served by a DaemonSet.
	need := 0
	for _, n := range a.receiving {
		if covered[n.Name] && !byDaemon[n.Name] {
			need++
		}
	}
	var replicated []*Workload
	for _, w := range ws {
		if w.DaemonSet == nil {
			replicated = append(replicated, w)
		}
	}
	if len(replicated) > 0 && need > 0 {
		a.replicaFindings(replicated, objs, int(replicas), need, fits[replicated[0]].ok)
	}
	for _, w := range ws {
		fi := fits[w]
		a.spreadFindings(w, fi.ok, fi.why)
		if w.Deployment != nil {
			a.strategyFindings(w)
		}
	}
	return strings.Join(story, "; ")
}

func countIn(ok map[string]bool, in map[string]bool) int {
	n := 0
	for name, yes := range ok {
		if yes && in[name] {
			n++
		}
	}
	return n
}

// replicaFindings: too few replicas for the nodes, no per-node spread, an autoscaler that scales below.
func (a *auditor) replicaFindings(ws []*Workload, objs []ObjectRef, replicas, need int, schedulable map[string]bool) {
	if replicas < need {
		a.add(ReplicasBelowNodes, a.severity(Critical), objs, nil,
			fmt.Sprintf("%d replicas for %d nodes that receive the Service's traffic: at least %d of them have no local endpoint",
				replicas, need, need-replicas),
			"With fewer replicas than nodes, some node that receives the traffic hosts none, whatever the scheduler does.",
			fmt.Sprintf("kubectl -n %s scale %s/%s --replicas=%d (and spread them: one per node), or run it as a DaemonSet",
				ws[0].Namespace, strings.ToLower(ws[0].Kind), ws[0].Name, need))
	} else {
		guaranteed := need == 1 // one node to cover: any replica lands there
		n := 0
		for _, ok := range schedulable {
			if ok {
				n++
			}
		}
		for _, w := range ws {
			for _, b := range bounds(w, a.nodes, schedulable, nil) {
				if b.coverage(int(w.Replicas), n) {
					guaranteed = true
				}
			}
		}
		if !guaranteed {
			a.add(NoSpread, a.severity(Warning), objs, nil,
				fmt.Sprintf("%d replicas for %d nodes, but no DoNotSchedule hostname spread (or required anti-affinity) forces one onto every node",
					replicas, need),
				"The scheduler's default spreading is a preference (ScheduleAnyway): resource fit, image locality or a rollout can "+
					"pack replicas and leave a node that receives the traffic with none.",
				spreadPatch(ws[0]))
		}
	}
	for _, w := range ws {
		if w.HPA == nil {
			continue
		}
		minR := int32(1)
		if w.HPA.Spec.MinReplicas != nil {
			minR = *w.HPA.Spec.MinReplicas
		}
		if int(minR) < need {
			a.add(HPAMinBelowNodes, a.severity(Warning),
				[]ObjectRef{w.ref(a.c), a.c.ref("HorizontalPodAutoscaler", w.HPA.Namespace, w.HPA.Name)}, nil,
				fmt.Sprintf("HorizontalPodAutoscaler %s may scale %s %s down to %d replicas; %d nodes receive the traffic",
					w.HPA.Name, w.Kind, w.Name, minR, need),
				"A scale-down below the number of nodes that receive the traffic leaves nodes without a local endpoint: they "+
					"blackhole until the next scale-up.",
				fmt.Sprintf("kubectl -n %s patch hpa %s --type=merge -p '{\"spec\":{\"minReplicas\":%d}}'", w.HPA.Namespace, w.HPA.Name, need))
		}
	}
}

// spreadFindings: a hard hostname spread that counts nodes the pods can never land on, and the surge deadlock.
func (a *auditor) spreadFindings(w *Workload, schedulable map[string]bool, why map[string]string) {
	n := 0
	for _, ok := range schedulable {
		if ok {
			n++
		}
	}
	for _, b := range bounds(w, a.nodes, schedulable, why) {
		if b.constraint != nil && (len(b.stuck) > 0 || b.minDomainsShort) {
			var parts []string
			var stuck []string
			for node, reason := range b.stuck {
				stuck = append(stuck, node)
				parts = append(parts, fmt.Sprintf("%s (%s)", node, reason))
			}
			sort.Strings(stuck)
			sort.Strings(parts)
			capacity := b.perNode * n
			msg := ""
			if len(parts) > 0 {
				msg = fmt.Sprintf("the DoNotSchedule spread over %s counts %s as domains, but the pods can never land there",
					b.constraint.TopologyKey, strings.Join(parts, ", "))
			} else {
				msg = fmt.Sprintf("minDomains %d exceeds the %d nodes the spread counts", *b.constraint.MinDomains, n)
			}
			msg += fmt.Sprintf(": the global minimum stays 0, so at most %d matching pods fit (maxSkew %d × %d nodes)",
				capacity, b.constraint.MaxSkew, n)
			if w.DaemonSet == nil && int(w.Replicas) > capacity {
				msg += fmt.Sprintf("; %d of %d replicas stay Pending", int(w.Replicas)-capacity, w.Replicas)
			} else if w.DaemonSet == nil && b.countsOldPods {
				msg += "; during a rollout the old revision's pods count too, so the last new replica stays Pending"
			}
			fix := fmt.Sprintf("kubectl -n %s patch %s %s --type=json -p '[{\"op\":\"add\",\"path\":\"/spec/template/spec/topologySpreadConstraints/%d/nodeTaintsPolicy\",\"value\":\"Honor\"}]'",
				w.Namespace, strings.ToLower(w.Kind), w.Name, spreadIndex(w, b.constraint))
			if b.minDomainsShort && len(parts) == 0 {
				fix = fmt.Sprintf("lower minDomains to at most %d, or remove it", n)
			}
			a.add(SpreadIgnoresTaints, a.severity(Warning), []ObjectRef{w.ref(a.c)}, stuck, msg,
				"PodTopologySpread counts every node with the topology label that passes nodeAffinityPolicy (default Honor) and "+
					"nodeTaintsPolicy (default Ignore): a tainted node the pods do not tolerate is an empty domain forever, which "+
					"caps every other node at maxSkew matching pods. Replicas beyond that, and new pods while old ones still count, "+
					"stay Pending, and the nodes they were meant for receive traffic with no local endpoint.",
				fix)
		}
		if w.Deployment != nil && b.perNode > 0 && b.countsOldPods {
			surge, unavailable := rollingBudget(w.Deployment)
			capacity := b.perNode * n
			if surge > 0 && unavailable == 0 && int(w.Replicas)+1 > capacity {
				what := "required pod anti-affinity over kubernetes.io/hostname"
				if b.constraint != nil {
					what = fmt.Sprintf("DoNotSchedule spread (maxSkew %d, global minimum pinned at 0)", b.constraint.MaxSkew)
				}
				a.add(SurgeDeadlock, a.severity(Warning), []ObjectRef{w.ref(a.c)}, nil,
					fmt.Sprintf("%d replicas fill the %d places the %s leaves; maxSurge %d with maxUnavailable 0 needs one more: the surge pod stays Pending and the rollout parks",
						w.Replicas, capacity, what, surge),
					"The Deployment controller creates the surge pod before it removes an old one (maxUnavailable 0); the old "+
						"revision's pods still count for the constraint, so the surge pod has nowhere legal to go and nothing "+
						"is ever removed: the rollout parks until progressDeadlineSeconds and a change that needed to ship "+
						"does not.",
					fmt.Sprintf("kubectl -n %s patch deployment %s --type=merge -p '{\"spec\":{\"strategy\":{\"rollingUpdate\":{\"maxSurge\":0,\"maxUnavailable\":1}}}}'",
						w.Namespace, w.Name))
			}
		}
	}
}

func spreadIndex(w *Workload, c *corev1.TopologySpreadConstraint) int {
	for i, x := range w.Template.Spec.TopologySpreadConstraints {
		if x.TopologyKey == c.TopologyKey && x.WhenUnsatisfiable == c.WhenUnsatisfiable && x.MaxSkew == c.MaxSkew {
			return i
		}
	}
	return 0
}

// rollingBudget resolves a Deployment's maxSurge (rounded up) and maxUnavailable (rounded down) against its
// replicas, as the Deployment controller does (deploymentutil.ResolveFenceposts): both 0 means 1 unavailable.
func rollingBudget(d *appsv1.Deployment) (surge, unavailable int) {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0, int(replicas(d.Spec.Replicas))
	}
	def := intstr.FromString("25%")
	ms, mu := &def, &def
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			ms = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			mu = ru.MaxUnavailable
		}
	}
	r := int(replicas(d.Spec.Replicas))
	surge, err1 := intstr.GetScaledValueFromIntOrPercent(ms, r, true)
	unavailable, err2 := intstr.GetScaledValueFromIntOrPercent(mu, r, false)
	if err1 != nil || err2 != nil {
		return 0, 1
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable
}

// strategyFindings: a Recreate strategy or a budget that lets every replica go at once.
func (a *auditor) strategyFindings(w *Workload) {
	d := w.Deployment
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		a.add(DisruptionEmptiesNode, a.severity(Warning), []ObjectRef{w.ref(a.c)}, nil,
			fmt.Sprintf("Deployment %s uses the Recreate strategy: every update stops all replicas before starting new ones", w.Name),
			"Between the last old pod's exit and the first new pod's readiness no node has a local endpoint (terminating "+
				"endpoints do not help: Recreate waits until they are gone). Every node that receives the traffic drops it.",
			fmt.Sprintf("kubectl -n %s patch deployment %s --type=merge -p '{\"spec\":{\"strategy\":{\"type\":\"RollingUpdate\",\"rollingUpdate\":{\"maxSurge\":0,\"maxUnavailable\":1}}}}'",
				w.Namespace, w.Name))
	}
	for _, p := range w.PDBs {
		allowed := pdbAllowsAll(p, int(w.Replicas))
		if !allowed {
			continue
		}
		a.add(DisruptionEmptiesNode, a.severity(Warning),
			[]ObjectRef{w.ref(a.c), a.c.ref("PodDisruptionBudget", p.Namespace, p.Name)}, nil,
			fmt.Sprintf("PodDisruptionBudget %s lets evictions take all %d replicas of %s %s at once", p.Name, w.Replicas, w.Kind, w.Name),
			"Voluntary disruptions (parallel drains, a node-pool upgrade, the cluster autoscaler's consolidation) may then "+
				"evict every replica together: every node that receives the traffic loses its local endpoint at once.",
			fmt.Sprintf("kubectl -n %s patch pdb %s --type=merge -p '{\"spec\":{\"maxUnavailable\":1,\"minAvailable\":null}}'", p.Namespace, p.Name))
	}
}

// pdbAllowsAll: the budget's minAvailable is 0 (or 0%) or its maxUnavailable covers every replica (the
// disruption controller rounds both percentages up).
func pdbAllowsAll(p *policyv1.PodDisruptionBudget, r int) bool {
	if mu := p.Spec.MaxUnavailable; mu != nil {
		v, err := intstr.GetScaledValueFromIntOrPercent(mu, r, true)
		return err == nil && v >= r
	}
	if ma := p.Spec.MinAvailable; ma != nil {
		v, err := intstr.GetScaledValueFromIntOrPercent(ma, r, true)
		return err == nil && v == 0
	}
	return false
}

// selectorString prints a selector as kubectl does, keys sorted: "app=checkout,tier=web".
func selectorString(sel map[string]string) string { return joinSorted(sel, "%s=%s", ",") }

// joinSorted formats each key and value of m with format, in key order, joined by sep.
func joinSorted(m map[string]string, format, sep string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, sep)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
