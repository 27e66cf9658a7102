package placement

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// What the scheduler decides per node from the node alone, with kube-scheduler's own helpers
// (component-helpers: the NodeAffinity and TaintToleration plugins call the same functions).

// taintUnschedulable is what the node lifecycle controller turns spec.unschedulable (a cordon) into.
const taintUnschedulable = corev1.TaintNodeUnschedulable

// effectiveTaints are the node's taints plus the cordon's taint, which the controller adds for a cordoned node.
func effectiveTaints(n *corev1.Node) []corev1.Taint {
	t := n.Spec.Taints
	if n.Spec.Unschedulable && !slices.ContainsFunc(t, func(x corev1.Taint) bool { return x.Key == taintUnschedulable }) {
		t = append(append([]corev1.Taint(nil), t...), corev1.Taint{Key: taintUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	return t
}

// daemonTolerations are the tolerations the DaemonSet controller adds to every daemon pod
// (pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations): node conditions and the cordon never keep a
// daemon pod off a node.
func daemonTolerations(spec *corev1.PodSpec) []corev1.Toleration {
	add := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if spec.HostNetwork {
		add = append(add, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoSchedule})
	}
	return append(append([]corev1.Toleration(nil), spec.Tolerations...), add...)
}

func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// untolerated returns the first NoSchedule/NoExecute taint of the node the tolerations do not tolerate.
func untolerated(n *corev1.Node, tolerations []corev1.Toleration) (corev1.Taint, bool) {
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), effectiveTaints(n), tolerations, doNotSchedule, false)
}

// affinityOf is the template's required node affinity (nodeSelector and requiredDuringScheduling terms).
func affinityOf(spec *corev1.PodSpec) nodeaffinity.RequiredNodeAffinity {
	return nodeaffinity.NewRequiredNodeAffinity(spec.NodeSelector, spec.Affinity)
}

// fit tells whether the template's pod can land on the node, and if not, why (for the finding's message).
func fit(w *Workload, n *corev1.Node) (bool, string) {
	spec := &w.Template.Spec
	if spec.NodeName != "" && spec.NodeName != n.Name {
		return false, "nodeName " + spec.NodeName
	}
	if w.affinity == nil {
		a := affinityOf(spec)
		w.affinity = &a
	}
	if ok, err := w.affinity.Match(n); err != nil || !ok {
		switch {
		case err != nil:
			return false, "invalid node affinity: " + err.Error()
		case len(spec.NodeSelector) > 0 && !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(n.Labels)):
			return false, "nodeSelector " + labels.Set(spec.NodeSelector).String()
		default:
			return false, "required node affinity"
		}
	}
	tol := spec.Tolerations
	if w.DaemonSet != nil {
		tol = daemonTolerations(spec)
	}
	if t, bad := untolerated(n, tol); bad {
		return false, "taint " + taintString(t)
	}
	for _, c := range hardHostnameSpreads(w) {
		if _, ok := n.Labels[c.TopologyKey]; !ok {
			return false, "no " + c.TopologyKey + " label (the spread constraint needs it)"
		}
	}
	return true, ""
}

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return fmt.Sprintf("%s:%s", t.Key, t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

// hardHostnameSpreads are the template's DoNotSchedule spread constraints over kubernetes.io/hostname whose
// selector counts the pods themselves: the only spreads that bound how many replicas share a node.
func hardHostnameSpreads(w *Workload) []corev1.TopologySpreadConstraint {
	var out []corev1.TopologySpreadConstraint
	for _, c := range w.Template.Spec.TopologySpreadConstraints {
		if c.TopologyKey != corev1.LabelHostname || c.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		if c.LabelSelector == nil {
			continue // matches no pod: the constraint counts nothing
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || !sel.Matches(labels.Set(w.Template.Labels)) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// hostnameAntiAffinity: a required pod anti-affinity over kubernetes.io/hostname that matches the pods
// themselves (at most one replica per node).
func hostnameAntiAffinity(w *Workload) bool {
	a := w.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey != corev1.LabelHostname || t.LabelSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err == nil && sel.Matches(labels.Set(w.Template.Labels)) {
			return true
		}
	}
	return false
}

// spreadDomains returns the nodes PodTopologySpread counts as domains for the constraint
// (pkg/scheduler/framework/plugins/podtopologyspread: nodes with the topology label that pass the node
// inclusion policies: nodeAffinityPolicy, default Honor; nodeTaintsPolicy, default Ignore).
func spreadDomains(w *Workload, c corev1.TopologySpreadConstraint, nodes []*corev1.Node) []*corev1.Node {
	spec := &w.Template.Spec
	aff := affinityOf(spec)
	var out []*corev1.Node
	for _, n := range nodes {
		if _, ok := n.Labels[c.TopologyKey]; !ok {
			continue
		}
		if c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor {
			if ok, _ := aff.Match(n); !ok {
				continue
			}
		}
		if c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
			if _, bad := untolerated(n, spec.Tolerations); bad {
				continue
			}
		}
		out = append(out, n)
	}
	return out
}

// spreadBound is what a hard hostname constraint implies for the workload on the schedulable nodes.
type spreadBound struct {
	constraint *corev1.TopologySpreadConstraint // nil for anti-affinity
	// stuck: counted domains the pods can never land on (the global minimum stays 0), with why.
	stuck map[string]string
	// minDomainsShort: fewer domains than minDomains, which the scheduler also treats as a global minimum of 0.
	minDomainsShort bool
	// perNode is the most matching pods one node can hold while the constraint's minimum stays 0 (maxSkew), or
	// 1 for anti-affinity; capacity = perNode × schedulable nodes then. 0 when unbounded.
	perNode int
	// coverage: with r replicas every schedulable node holds one (hard spread: r > maxSkew × (n−1);
	// anti-affinity: r ≥ n).
	coverage func(r, n int) bool
	// countsOldPods: the constraint also counts the previous revision's pods during a rollout (no
	// pod-template-hash in matchLabelKeys).
	countsOldPods bool
}

// bounds returns the bounds of every hard per-node constraint of the workload.
func bounds(w *Workload, nodes []*corev1.Node, schedulable map[string]bool, why map[string]string) []spreadBound {
	var out []spreadBound
	for _, c := range hardHostnameSpreads(w) {
		c := c
		b := spreadBound{constraint: &c, stuck: map[string]string{},
			countsOldPods: !slices.Contains(c.MatchLabelKeys, appsDefaultHashKey)}
		domains := spreadDomains(w, c, nodes)
		for _, d := range domains {
			if !schedulable[d.Name] {
				b.stuck[d.Name] = why[d.Name]
			}
		}
		if c.MinDomains != nil && int(*c.MinDomains) > len(domains) {
			b.minDomainsShort = true
		}
		if len(b.stuck) > 0 || b.minDomainsShort {
			b.perNode = int(c.MaxSkew)
		}
		k := int(c.MaxSkew)
		b.coverage = func(r, n int) bool { return n > 0 && r > k*(n-1) }
		out = append(out, b)
	}
	if hostnameAntiAffinity(w) {
		out = append(out, spreadBound{perNode: 1, countsOldPods: true,
			coverage: func(r, n int) bool { return r >= n }})
	}
	return out
}

// appsDefaultHashKey is the label the Deployment controller puts on each revision's pods.
const appsDefaultHashKey = "pod-template-hash"
