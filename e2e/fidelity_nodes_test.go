package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestFidelityDaemonSetKeepsOffWindowsAndVirtualNodes: on the controller cluster (the real
// DaemonSet controller), three more Nodes join: a Windows node, a virtual-kubelet node (labelled and tainted as
// its providers do) and an EKS Fargate node. The shipped DaemonSet (deploy/base, as rendered) gets a pod on every
// Linux machine and none on those three, so Prometheus' pod discovery finds no target there and
// LocalTrafficExporterDown cannot fire for them. The control, the same DaemonSet without its nodeSelector and
// affinity (what shipped before), is placed on all three: pods that would never run.
func TestFidelityDaemonSetKeepsOffWindowsAndVirtualNodes(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns = "e2e-fidelity-nodes"
	admin := c.Admin()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}

	odd := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-windows-1", Labels: map[string]string{
			corev1.LabelOSStable: "windows", corev1.LabelHostname: "e2e-windows-1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-virtual-kubelet-1", Labels: map[string]string{
			corev1.LabelOSStable: "linux", "type": "virtual-kubelet", "kubernetes.io/role": "agent"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "virtual-kubelet.io/provider", Value: "azure", Effect: corev1.TaintEffectNoSchedule}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "fargate-ip-10-0-1-5", Labels: map[string]string{
			corev1.LabelOSStable: "linux", "eks.amazonaws.com/compute-type": "fargate"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "eks.amazonaws.com/compute-type", Value: "fargate", Effect: corev1.TaintEffectNoSchedule}}}},
	}
	var oddNames []string
	for _, n := range odd {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			fatalln(t, err)
		}
		oddNames = append(oddNames, n.Name)
	}
	sort.Strings(oddNames)
	var machines []string
	for _, n := range c.Nodes() {
		machines = append(machines, n.Name)
	}
	sort.Strings(machines)

	shipped := renderedDaemonSet(t, c, "base")
	control := shipped.DeepCopy()
	control.Name = "without-placement"
	control.Spec.Template.Spec.NodeSelector, control.Spec.Template.Spec.Affinity = nil, nil
	control.Spec.Selector.MatchLabels["e2e.localtraffic.io/control"] = "true"
	control.Spec.Template.Labels["e2e.localtraffic.io/control"] = "true"
	t.Cleanup(func() { cleanupDaemonSets(t, c, ns, odd) })
	for _, ds := range []*appsv1.DaemonSet{shipped, control} {
		ds.Namespace = ns
		// Placement is what is tested; the exporter's own ServiceAccount lives in localtraffic-system.
		ds.Spec.Template.Spec.ServiceAccountName = "default"
		if _, err := admin.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			fatalln(t, err)
		}
	}

	placed := func(ds *appsv1.DaemonSet) ([]string, error) {
		got, err := admin.AppsV1().DaemonSets(ns).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		sel := metav1.FormatLabelSelector(got.Spec.Selector)
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		var nodes []string
		for _, p := range pods.Items {
			if p.Labels["e2e.localtraffic.io/control"] != ds.Spec.Template.Labels["e2e.localtraffic.io/control"] {
				continue
			}
			nodes = append(nodes, podNode(p))
		}
		sort.Strings(nodes)
		if int(got.Status.DesiredNumberScheduled) != len(nodes) {
			return nodes, fmt.Errorf("%s: desired %d, %d pods so far", ds.Name, got.Status.DesiredNumberScheduled, len(nodes))
		}
		return nodes, nil
	}
	all := append(slices.Clone(machines), oddNames...)
	sort.Strings(all)
	eventually(t, converge, "the DaemonSet controller places both DaemonSets", func() error {
		got, err := placed(shipped)
		if err != nil {
			return err
		}
		if !slices.Equal(got, machines) {
			return fmt.Errorf("the shipped DaemonSet is on %v, want the Linux machines %v only", got, machines)
		}
		got, err = placed(control)
		if err != nil {
			return err
		}
		if !slices.Equal(got, all) {
			return fmt.Errorf("the DaemonSet without placement is on %v, want every node %v", got, all)
		}
		return nil
	})
	t.Logf("shipped DaemonSet on %v; without nodeSelector and affinity also on %v", machines, oddNames)
}

// podNode is the node a DaemonSet pod is bound to: spec.nodeName, or the node its affinity pins it to before
// binding.
func podNode(p corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return "?"
}

// cleanupDaemonSets deletes the test's DaemonSets and their pods (by force on the odd nodes: no kubelet there
// confirms a deletion; the node agents finish theirs), then the odd Nodes. Namespaces stay: the controller
// cluster has no namespace controller.
func cleanupDaemonSets(t *testing.T, c *cluster.Cluster, ns string, odd []*corev1.Node) {
	ctx := context.Background()
	admin := c.Admin()
	var errs []error
	if err := admin.AppsV1().DaemonSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		errs = append(errs, err)
	}
	isOdd := map[string]bool{}
	for _, n := range odd {
		isOdd[n.Name] = true
	}
	err := waitUntil(ctx, converge, func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			opts := metav1.DeleteOptions{}
			if isOdd[podNode(p)] {
				opts.GracePeriodSeconds = ptr(int64(0))
			}
			if err := admin.CoreV1().Pods(ns).Delete(ctx, p.Name, opts); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
	errs = append(errs, err)
	for _, n := range odd {
		if err := admin.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		errorf(t, "cleanup: %v", err)
	}
}

// waitUntil polls cond every half second until it returns nil or timeout passes (its last error then).
func waitUntil(ctx context.Context, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
