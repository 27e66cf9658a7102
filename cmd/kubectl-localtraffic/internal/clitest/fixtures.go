package clitest

import (
	"testing"
	"time"

	"github.com/prometheus/common/version"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// BehindLoadBalancer makes the drill's Service a health-checked LoadBalancer of a cloud controller (its check
// interval and threshold annotated), on nodes that controller runs.
func BehindLoadBalancer(objs []runtime.Object) []runtime.Object {
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

// PDBAllowing is the drill's PodDisruptionBudget, allowing this many disruptions now.
func PDBAllowing(allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

// AnnouncedLoadBalancer makes the drill's Service (in objs) a LoadBalancer with a health check node port and the
// VIP 192.0.2.10, which an announcer (MetalLB, Cilium L2) may hold.
func AnnouncedLoadBalancer(objs []runtime.Object) []runtime.Object {
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Spec.Type, s.Spec.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		}
	}
	return objs
}

// L2Status is MetalLB's ServiceL2Status naming node as the announcer of the drill's Service.
func L2Status(node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"node": node, "serviceName": "checkout", "serviceNamespace": "kubelings"}}}
	u.SetAPIVersion("metallb.io/v1beta1")
	u.SetKind("ServiceL2Status")
	u.SetNamespace("metallb-system")
	u.SetName("l2-checkout")
	return u
}

// MetalLBAllocated annotates the drill's Service (in objs) as MetalLB's controller does when it allocates the
// Service's address from a pool.
func MetalLBAllocated(objs []runtime.Object) []runtime.Object {
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, "metallb.io/ip-allocated-from-pool", "default")
		}
	}
	return objs
}

// SpeakerPod is a MetalLB speaker's pod on node, labelled as MetalLB's manifests label it, for the announcers'
// fake (FakeAnnouncers): with one, MetalLB announces and its missing records mean nobody does.
func SpeakerPod(node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"nodeName": node}}}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	u.SetNamespace("metallb-system")
	u.SetName("speaker-" + node)
	u.SetLabels(map[string]string{"app": "metallb", "component": "speaker"})
	return u
}

// CiliumLease is Cilium's L2 announcement Lease of the drill's Service in namespace ns, held by holder and last
// renewed at renew, for 15 s.
func CiliumLease(ns, holder string, renew time.Time) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"holderIdentity": holder,
		"renewTime": renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "leaseDurationSeconds": int64(15)}}}
	u.SetAPIVersion("coordination.k8s.io/v1")
	u.SetKind("Lease")
	u.SetNamespace(ns)
	u.SetName(announce.CiliumLeaseName("kubelings", "checkout"))
	return u
}

// CiliumLeaseAs is Cilium's L2 announcement Lease of the drill's Service in namespace ns as Cilium's agent writes
// it: client-go's leader election over a resourcelock.LeaseLock (LeaderElectionRecordToLeaseSpec). CiliumHeld
// and CiliumReleased are its records.
func CiliumLeaseAs(t testing.TB, ns string, rec resourcelock.LeaderElectionRecord) *unstructured.Unstructured {
	t.Helper()
	l := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: announce.CiliumLeaseName("kubelings", "checkout")},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&rec)}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// CiliumHeld is the record of a lease holder acquired at acquired and last renewed at renew (by its own clock),
// for Cilium's default 15 s.
func CiliumHeld(holder string, acquired, renew time.Time) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15,
		AcquireTime: metav1.NewTime(acquired), RenewTime: metav1.NewTime(renew)}
}

// CiliumReleased is the record client-go's leader election writes when its holder releases the lease
// (ReleaseOnCancel): no holder, leaseDurationSeconds 1, acquireTime and renewTime at.
func CiliumReleased(at time.Time) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: metav1.NewTime(at), RenewTime: metav1.NewTime(at),
		LeaderTransitions: 1}
}

// CiliumPolicy is a CiliumL2AnnouncementPolicy (cilium.io/v2alpha1, cluster-scoped) that selects the drill's
// Service's load balancer IPs by the labels Cilium adds to it, announced from the nodes matching nodeSelector.
func CiliumPolicy(name string, nodeSelector map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"serviceSelector": map[string]any{"matchLabels": map[string]any{
			announce.LabelCiliumServiceNamespace: "kubelings", announce.LabelCiliumServiceName: "checkout"}},
		"nodeSelector":    nodeSelector,
		"interfaces":      []any{"^eth[0-9]+"},
		"loadBalancerIPs": true,
	}}}
	u.SetAPIVersion("cilium.io/v2alpha1")
	u.SetKind("CiliumL2AnnouncementPolicy")
	u.SetName(name)
	return u
}

// SetVersion sets what the release pipeline's -ldflags set, for the duration of the test.
func SetVersion(t testing.TB, v string) {
	t.Helper()
	keep := version.Version
	version.Version = v
	t.Cleanup(func() { version.Version = keep })
}

// IgnoredDrill is the pinned drill with its Service annotated as placed on purpose.
func IgnoredDrill(reason string) []runtime.Object {
	objs := DrillObjects(true)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Annotations = map[string]string{kubeview.AnnotationIntentionalPlacement: reason}
		}
	}
	return objs
}
