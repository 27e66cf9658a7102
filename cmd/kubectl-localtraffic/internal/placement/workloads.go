package placement

import (
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Workload is one controller whose pods may back a Service: its pod template is the pod-to-be.
type Workload struct {
	Kind, Namespace, Name string
	Template              *corev1.PodTemplateSpec
	Replicas              int32 // spec.replicas (defaulted to 1); unused for DaemonSets
	Deployment            *appsv1.Deployment
	DaemonSet             *appsv1.DaemonSet
	HPA                   *autoscalingv2.HorizontalPodAutoscaler // the autoscaler that targets it, if any
	PDBs                  []*policyv1.PodDisruptionBudget        // budgets whose selector matches its pods

	affinity *nodeaffinity.RequiredNodeAffinity // the template's, parsed once (fit asks it for every node)
}

func (w *Workload) ref(c *Cluster) ObjectRef { return c.ref(w.Kind, w.Namespace, w.Name) }

// workloads lists the controllers of the cluster: Deployments, StatefulSets, DaemonSets, and ReplicaSets no
// Deployment owns. In live mode a pod's owner chain (ReplicaSet → Deployment) also names the workload behind a
// Service whose selector matches pods but no template (templates changed since, or hand-made ReplicaSets).
func workloads(c *Cluster) []*Workload {
	var out []*Workload
	for _, d := range c.Deployments {
		out = append(out, &Workload{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name,
			Template: &d.Spec.Template, Replicas: replicas(d.Spec.Replicas), Deployment: d})
	}
	for _, s := range c.StatefulSets {
		out = append(out, &Workload{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name,
			Template: &s.Spec.Template, Replicas: replicas(s.Spec.Replicas)})
	}
	for _, d := range c.DaemonSets {
		out = append(out, &Workload{Kind: "DaemonSet", Namespace: d.Namespace, Name: d.Name,
			Template: &d.Spec.Template, DaemonSet: d})
	}
	deployments := map[string]bool{}
	for _, d := range c.Deployments {
		deployments[d.Namespace+"/"+d.Name] = true
	}
	for _, rs := range c.ReplicaSets {
		if owner := controllerOf(rs.OwnerReferences); owner != nil && owner.Kind == "Deployment" &&
			deployments[rs.Namespace+"/"+owner.Name] {
			continue // the Deployment stands for it
		}
		out = append(out, &Workload{Kind: "ReplicaSet", Namespace: rs.Namespace, Name: rs.Name,
			Template: &rs.Spec.Template, Replicas: replicas(rs.Spec.Replicas)})
	}
	for _, w := range out {
		w.HPA = hpaFor(c.HPAs, w)
		w.PDBs = pdbsFor(c.PDBs, w)
	}
	return out
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

func hpaFor(hpas []*autoscalingv2.HorizontalPodAutoscaler, w *Workload) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range hpas {
		if h.Namespace == w.Namespace && h.Spec.ScaleTargetRef.Kind == w.Kind && h.Spec.ScaleTargetRef.Name == w.Name {
			return h
		}
	}
	return nil
}

func pdbsFor(pdbs []*policyv1.PodDisruptionBudget, w *Workload) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, p := range pdbs {
		if p.Namespace != w.Namespace || p.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			continue // the disruption controller ignores an empty selector in policy/v1 (it matches nothing)
		}
		if sel.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// labelIndex finds candidates for a selector without matching every object: objects by namespace and by each
// of their labels (key=value). A Service selector is a set of equalities, so any one of them narrows the search
// to objects that carry it; the full selector is then matched on those alone.
type labelIndex[T any] map[string][]T

func indexKey(ns, k, v string) string { return ns + "\x00" + k + "=" + v }

func (ix labelIndex[T]) add(ns string, l map[string]string, x T) {
	for k, v := range l {
		ix[indexKey(ns, k, v)] = append(ix[indexKey(ns, k, v)], x)
	}
}

// candidates returns the objects carrying the selector's rarest equality.
func (ix labelIndex[T]) candidates(ns string, sel map[string]string) []T {
	var best []T
	first := true
	for k, v := range sel {
		c := ix[indexKey(ns, k, v)]
		if first || len(c) < len(best) {
			best, first = c, false
		}
	}
	return best
}

// backingIndex holds the workloads and pods by label, built once per audit.
type backingIndex struct {
	workloads labelIndex[*Workload]
	pods      labelIndex[*corev1.Pod]
	owners    map[string]*Workload
}

func newBackingIndex(c *Cluster, all []*Workload) *backingIndex {
	ix := &backingIndex{workloads: labelIndex[*Workload]{}, pods: labelIndex[*corev1.Pod]{}, owners: podOwners(c, all)}
	for _, w := range all {
		ix.workloads.add(w.Namespace, w.Template.Labels, w)
	}
	for _, p := range c.Pods {
		ix.pods.add(p.Namespace, p.Labels, p)
	}
	return ix
}

// backing returns the workloads whose pods the Service selects: templates the selector matches, plus (live
// mode) the owners of pods it matches. ok is false when the Service has no selector (its endpoints are managed
// by hand, so no workload is expected).
func (ix *backingIndex) backing(svc *corev1.Service) (ws []*Workload, pods int, ok bool) {
	if len(svc.Spec.Selector) == 0 {
		return nil, 0, false
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	seen := map[*Workload]bool{}
	for _, w := range ix.workloads.candidates(svc.Namespace, svc.Spec.Selector) {
		if sel.Matches(labels.Set(w.Template.Labels)) && !seen[w] {
			seen[w] = true
			ws = append(ws, w)
		}
	}
	for _, p := range ix.pods.candidates(svc.Namespace, svc.Spec.Selector) {
		if !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		pods++
		if w := ix.owners[p.Namespace+"/"+string(p.UID)]; w != nil && !seen[w] {
			seen[w] = true
			ws = append(ws, w)
		}
	}
	return ws, pods, true
}

// podOwners maps each pod (namespace/uid) to its workload through the controller chain Pod → ReplicaSet →
// Deployment, or Pod → StatefulSet / DaemonSet.
func podOwners(c *Cluster, all []*Workload) map[string]*Workload {
	byKey := map[string]*Workload{}
	for _, w := range all {
		byKey[w.Kind+"/"+w.Namespace+"/"+w.Name] = w
	}
	rsOwner := map[string]string{} // ReplicaSet name → its Deployment's key
	for _, rs := range c.ReplicaSets {
		if o := controllerOf(rs.OwnerReferences); o != nil && o.Kind == "Deployment" {
			rsOwner[rs.Namespace+"/"+rs.Name] = "Deployment/" + rs.Namespace + "/" + o.Name
		}
	}
	out := map[string]*Workload{}
	for _, p := range c.Pods {
		o := controllerOf(p.OwnerReferences)
		if o == nil {
			continue
		}
		key := o.Kind + "/" + p.Namespace + "/" + o.Name
		if o.Kind == "ReplicaSet" {
			if d, ok := rsOwner[p.Namespace+"/"+o.Name]; ok {
				key = d
			}
		}
		if w := byKey[key]; w != nil {
			out[p.Namespace+"/"+string(p.UID)] = w
		}
	}
	return out
}
