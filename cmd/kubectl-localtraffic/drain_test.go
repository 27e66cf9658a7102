package main

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// behindLoadBalancer makes the drill's Service a health-checked LoadBalancer of a cloud controller (its check
// interval and threshold annotated), on nodes that controller runs.
func behindLoadBalancer(objs []runtime.Object) []runtime.Object {
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Service:
			x.Spec.Type, x.Spec.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
			x.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
			x.Annotations = map[string]string{
				"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval":            "10",
				"service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold": "3",
			}
		case *corev1.Node:
			x.Spec.ProviderID = "aws:///eu-west-1a/i-" + x.Name
		}
	}
	return objs
}

// pdbAllowing is the drill's PodDisruptionBudget, allowing this many disruptions now.
func pdbAllowing(allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

// drain-check on the drill: the pinned Deployment's node cannot be drained without an outage (exit 1, naming
// the Service, its pods placed nowhere else); spread over three nodes with a PodDisruptionBudget that allows one
// disruption, draining node-1 leaves node-2 and node-3 serving and node-1 drained by the health check (exit 0),
// with the load balancer's window from the annotations. A PDB that allows none holds the pods: nothing is lost,
// the drain waits.
func TestDrainCheck(t *testing.T) {
	r := invoke(t, "", nil, false, behindLoadBalancer(drillObjects(true)), "drain-check", "node-1", "-n", "kubelings")
	if r.code != cli.ExitFindings || !strings.Contains(r.out, "kubelings/checkout") || !strings.Contains(r.out, "LOSES") ||
		!strings.Contains(r.out, "no endpoint left anywhere") || !strings.Contains(r.out, "nodeSelector kubernetes.io/hostname=node-1") {
		t.Errorf("pinned: exit %d, want 1 naming kubelings/checkout, the outage and the nodeSelector:\n%s%s", r.code, r.out, r.errOut)
	}

	pdb := pdbAllowing
	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(false)), pdb(1)), "drain-check", "node-1", "-n", "kubelings", "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil || r.code != cli.ExitClean || len(rep.Services) != 1 {
		t.Fatalf("spread: exit %d, %v\n%s%s", r.code, err, r.out, r.errOut)
	}
	s := rep.Services[0]
	if s.Loses || s.InRotation != "yes" || s.ServingAfter != 2 || len(s.Evicted) != 1 || s.LoadBalancerCheck == nil || s.LoadBalancerCheck.Seconds != 30 ||
		strings.Join(s.Elsewhere, ",") != "node-2,node-3" {
		t.Errorf("spread: %+v, want no loss, in rotation, 2 serving after, 1 evicted, elsewhere node-2,node-3, a 30 s window", s)
	}

	// ok is not "nothing lost": the text names the load balancer's window, in which it still sends to node-1.
	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(false)), pdb(1)), "drain-check", "node-1", "-n", "kubelings")
	if r.code != cli.ExitClean || !strings.Contains(r.out, "draining node-1 leaves every Local Service served; its load balancers keep sending new connections to node-1 for up to 30s") {
		t.Errorf("spread, text: exit %d, want 0 and the load balancer's window named:\n%s", r.code, r.out)
	}

	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(true)), pdb(0)), "drain-check", "node-1", "-n", "kubelings")
	if r.code != cli.ExitClean || !strings.Contains(r.out, "the drain waits for checkout-7c9f-0 (PodDisruptionBudget checkout allows no disruption)") {
		t.Errorf("a PDB allowing nothing: exit %d, want 0 and the wait named:\n%s", r.code, r.out)
	}

	// A NodePort Service: the drained node keeps receiving NodePort clients, and drops them once its pod is gone.
	r = invoke(t, "", nil, false, drillObjects(false), "drain-check", "node-1", "-n", "kubelings")
	if r.code != cli.ExitFindings || !strings.Contains(r.out, "node-1 would drop NodePort 30090/TCP") {
		t.Errorf("NodePort: exit %d, want 1 and node-1 dropping NodePort clients:\n%s", r.code, r.out)
	}
	if r := invoke(t, "", nil, false, drillObjects(false), "drain-check", "node-9", "-n", "kubelings"); r.code != cli.ExitError || !strings.Contains(r.errOut, `no node "node-9"`) {
		t.Errorf("unknown node: exit %d, stderr %q", r.code, r.errOut)
	}
}
