package kubeview

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// TestLBCheckKept: the exporter's Service state, built after the informers' transform, has the load balancer
// check the plugin reads from the whole Service (announce.LBCheckOf, whose classes announce's
// TestDeclaredHealthCheck pins) and the declaration: the transform keeps every annotation the check's class
// depends on.
func TestLBCheckKept(t *testing.T) {
	lb := func(ann map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: 32000,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}}}
	}
	for _, c := range []struct {
		ann   map[string]string
		nodes string // the nodes' providerID
	}{
		{nil, ""},
		{nil, "hcloud://1"},
		{map[string]string{announce.AnnotationHealthCheck: "traffic-port"}, ""},
		{map[string]string{announce.AnnotationHealthCheck: "health-check-node-port"}, "hcloud://1"},
		{map[string]string{announce.AnnotationHealthCheck: " None ", announce.AnnAWSType: "nlb"}, "aws://x"},
		{map[string]string{announce.AnnotationHealthCheck: "traffic-port", announce.AnnAWSHCPort: "10256"}, ""},
		{map[string]string{announce.AnnotationHealthCheck: "tcp", announce.AnnAWSHCPort: "traffic-port"}, ""},
	} {
		svc := lb(c.ann)
		want := announce.LBCheckOf(svc, c.nodes).Class
		declared, _ := announce.DeclaredCheckOf(svc.Annotations)
		kept := svc.DeepCopy()
		kept.Annotations = keptAnnotations(svc.Annotations)
		st := ServiceStateOf(kept, nil)
		if got := st.LBCheckOn(NodeState{ProviderID: c.nodes}); got != want || st.HealthCheck != declared {
			t.Errorf("%v on %q: exporter class %v declared %q, plugin %v %q", c.ann, c.nodes, got, st.HealthCheck, want, declared)
		}
	}
	// Any Service type carries the declaration: a NodePort Service behind HAProxy.
	np := lb(map[string]string{announce.AnnotationHealthCheck: "traffic-port"})
	np.Spec.Type, np.Spec.HealthCheckNodePort = corev1.ServiceTypeNodePort, 0
	np.Annotations = keptAnnotations(np.Annotations)
	if st := ServiceStateOf(np, nil); st.HealthCheck != announce.CheckTrafficPort {
		t.Errorf("NodePort Service: declared %q, want traffic-port", st.HealthCheck)
	}
}

// Probes of the health check node port are expected only where a load balancer is known to send them: a known
// cloud controller that asks it over HTTP, or the Service's declaration. An announcer's or an unknown
// controller's Service (no cloud annotation, nodes without a cloud providerID) expects none, nor does a check of
// the traffic port or a misdirected one.
func TestHealthCheckContract(t *testing.T) {
	svc := func(ann map[string]string, hcnp int32) ServiceState {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: hcnp,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}}}
		s.Annotations = keptAnnotations(s.Annotations)
		return ServiceStateOf(s, nil)
	}
	for _, c := range []struct {
		name  string
		ann   map[string]string
		hcnp  int32
		nodes string
		want  bool
	}{
		{"bare metal, no annotation (MetalLB, kube-vip, Cilium)", nil, 32000, "", false},
		{"bare metal, kind's providerID", nil, 32000, "kind://docker/kind/node", false},
		{"GCE nodes", nil, 32000, "gce://project/zone/node", true},
		{"AWS annotations", map[string]string{announce.AnnAWSType: "nlb"}, 32000, "", true},
		{"AWS traffic port", map[string]string{announce.AnnAWSHCPort: "traffic-port"}, 32000, "aws://x", false},
		{"Hetzner nodes: the traffic port", nil, 32000, "hcloud://1", false},
		{"declared on bare metal", map[string]string{announce.AnnotationHealthCheck: "health-check-node-port"}, 32000, "", true},
		{"declared none on GCE", map[string]string{announce.AnnotationHealthCheck: "none"}, 32000, "gce://p/z/n", false},
		{"no health check node port", nil, 0, "gce://p/z/n", false},
	} {
		if got := svc(c.ann, c.hcnp).HealthCheckContract(NodeState{ProviderID: c.nodes}); got != c.want {
			t.Errorf("%s: contract %v, want %v", c.name, got, c.want)
		}
	}
}

// The announcers' objects as the tracker's tests need them (announce's tests have their own, beside the
// internals they inspect).

func unstr(gvr schema.GroupVersionResource, kind, ns, name string, labels map[string]string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func l2Status(name, node, svcNS, svc string) *unstructured.Unstructured {
	return unstr(announce.GVRServiceL2Status, "ServiceL2Status", "metallb-system", name,
		map[string]string{announce.LabelMetalLBNode: node, announce.LabelMetalLBServiceName: svc, announce.LabelMetalLBServiceNamespace: svcNS},
		map[string]any{"status": map[string]any{"node": node, "serviceName": svc, "serviceNamespace": svcNS}})
}

func lease(ns, name, holder string, renew time.Time, seconds int64) *unstructured.Unstructured {
	return unstr(announce.GVRLease, "Lease", ns, name, nil, map[string]any{"spec": map[string]any{
		"holderIdentity": holder, "renewTime": renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		"leaseDurationSeconds": seconds}})
}

func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		announce.GVRServiceL2Status: "ServiceL2StatusList", announce.GVRServiceBGPStatus: "ServiceBGPStatusList", announce.GVRLease: "LeaseList",
		announce.GVRCiliumL2Policy: "CiliumL2AnnouncementPolicyList",
	}, objs...)
}

// waitAnnouncers takes snapshots at now until the sources' states are want: the leases are first seen at now.
func waitAnnouncers(t *testing.T, a *announce.Informers, now time.Time, want map[announce.Source]announce.SourceState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := a.Snapshot(now)
		if reflect.DeepEqual(s.States, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("source states %v, want %v", s.States, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
