package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/e2e/nodeagent"
)

// TestNodeAgentReadinessOnDemand: the node agent reports a pod Running and Ready with its IP in the node's pod
// CIDR, makes it not ready when the test sets the readiness annotation to "false" (the EndpointSlice controller
// follows) and ready again when it is set back.
func TestNodeAgentReadinessOnDemand(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-agent", "agent"
	svc := localNodePortService(t, c, ns, name, 0)
	pods := c.Admin().CoreV1().Pods(ns)
	tmpl := workloadPodSpec(name, 0)
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-2"}
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	for i, want := range []bool{true, false, true, false, true, true, false, true} {
		if i == 5 {
			// A pod of the same name again (as a StatefulSet or the benchmark's second run makes one).
			zero := int64(0)
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				fatalln(t, err)
			}
			eventually(t, time.Minute, "pod gone", func() error {
				if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil {
					return fmt.Errorf("still there")
				}
				return nil
			})
			if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}, metav1.CreateOptions{}); err != nil {
				fatalln(t, err)
			}
		} else if i > 0 {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%v"}}}`, nodeagent.ReadyAnnotation, want)
			if _, err := pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				fatalln(t, err)
			}
		}
		eventually(t, time.Minute, fmt.Sprintf("step %d: pod ready=%v, endpoint ready=%v", i, want, want), func() error {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning || podReady(p) != want || len(p.Status.PodIPs) == 0 {
				return fmt.Errorf("pod phase %s ready %v podIPs %v conditions %+v", p.Status.Phase, podReady(p), p.Status.PodIPs, p.Status.Conditions)
			}
			ep, err := endpointOn(ctx, c, svc, "node-2")
			if err != nil {
				return err
			}
			if ep == nil || isTrue(ep.Conditions.Ready) != want || ep.Addresses[0] != p.Status.PodIP {
				return fmt.Errorf("endpoint on node-2: %+v, want ready=%v at %s", ep, want, p.Status.PodIP)
			}
			return nil
		})
	}
}
