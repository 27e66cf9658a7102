package placement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Fixes are concrete patches a person can paste: kubectl commands against the object the finding names.

// pinFix removes what pins the replicas (the reason names it) and spreads them instead, the drill's fix.
func pinFix(ws []*Workload, reason string) string {
	w := firstReplicated(ws)
	kind := strings.ToLower(w.Kind)
	switch {
	case strings.HasPrefix(reason, "nodeSelector"):
		return fmt.Sprintf("kubectl -n %s patch %s %s --type=json -p='[{\"op\":\"remove\",\"path\":\"/spec/template/spec/nodeSelector\"}]'; then %s",
			w.Namespace, kind, w.Name, spreadPatch(w))
	case strings.HasPrefix(reason, "nodeName"):
		return fmt.Sprintf("kubectl -n %s patch %s %s --type=json -p='[{\"op\":\"remove\",\"path\":\"/spec/template/spec/nodeName\"}]'; then %s",
			w.Namespace, kind, w.Name, spreadPatch(w))
	case strings.HasPrefix(reason, "required node affinity"):
		return fmt.Sprintf("kubectl -n %s patch %s %s --type=json -p='[{\"op\":\"remove\",\"path\":\"/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution\"}]'; then %s",
			w.Namespace, kind, w.Name, spreadPatch(w))
	case strings.HasPrefix(reason, "taint"):
		return fmt.Sprintf("either tolerate the taint (add to /spec/template/spec/tolerations of %s %s) or take those nodes out of the traffic: kubectl label node <node> node.kubernetes.io/exclude-from-external-load-balancers=true",
			w.Kind, w.Name)
	}
	return fmt.Sprintf("let %s %s run on every node that receives the traffic (%s), or exclude the others with the label node.kubernetes.io/exclude-from-external-load-balancers",
		w.Kind, w.Name, reason)
}

func firstReplicated(ws []*Workload) *Workload {
	for _, w := range ws {
		if w.DaemonSet == nil {
			return w
		}
	}
	return ws[0]
}

// spreadPatch is the drill's spread: one replica per node, Honor taints, and no surge.
func spreadPatch(w *Workload) string {
	sel := labelsJSON(w.Template.Labels)
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","nodeTaintsPolicy":"Honor","labelSelector":{"matchLabels":%s}}]}}}}`, sel)
	if w.Deployment != nil {
		patch = fmt.Sprintf(`{"spec":{"strategy":{"rollingUpdate":{"maxSurge":0,"maxUnavailable":1}},"template":{"spec":{"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","nodeTaintsPolicy":"Honor","labelSelector":{"matchLabels":%s},"matchLabelKeys":["pod-template-hash"]}]}}}}`, sel)
	}
	return fmt.Sprintf("kubectl -n %s patch %s %s --type=merge -p '%s'", w.Namespace, strings.ToLower(w.Kind), w.Name, patch)
}

func labelsJSON(l map[string]string) string { return "{" + joinSorted(l, "%q:%q", ",") + "}" }

// daemonFix lets the DaemonSet run on the nodes it misses: drop the selector, or tolerate the taints there.
func daemonFix(w *Workload, nodes []*corev1.Node, missing []string) string {
	spec := w.Template.Spec
	if len(spec.NodeSelector) > 0 {
		return fmt.Sprintf("kubectl -n %s patch daemonset %s --type=json -p='[{\"op\":\"remove\",\"path\":\"/spec/template/spec/nodeSelector\"}]'",
			w.Namespace, w.Name)
	}
	var tols []string
	seen := map[string]bool{}
	for _, n := range nodes {
		if !contains(missing, n.Name) {
			continue
		}
		if t, bad := untolerated(n, daemonTolerations(&spec)); bad && !seen[t.Key+string(t.Effect)] {
			seen[t.Key+string(t.Effect)] = true
			tols = append(tols, fmt.Sprintf(`{"key":%q,"operator":"Exists","effect":%q}`, t.Key, t.Effect))
		}
	}
	if len(tols) > 0 {
		var ops []string
		if len(spec.Tolerations) == 0 {
			ops = append(ops, `{"op":"add","path":"/spec/template/spec/tolerations","value":[]}`)
		}
		for _, t := range tols {
			ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/tolerations/-","value":%s}`, t))
		}
		return fmt.Sprintf("kubectl -n %s patch daemonset %s --type=json -p='[%s]'", w.Namespace, w.Name, strings.Join(ops, ","))
	}
	return fmt.Sprintf("relax the node affinity of DaemonSet %s so it matches %s, or label those nodes node.kubernetes.io/exclude-from-external-load-balancers",
		w.Name, strings.Join(missing, ", "))
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
