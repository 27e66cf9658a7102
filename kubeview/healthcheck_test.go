package kubeview

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Service's own declaration of its load balancer's check wins over the cloud controllers' annotations and
// the nodes' provider, for the exporter (ServiceStateOf, after the informers' transform) and the plugin
// (LBCheckOf) alike; an unknown value is ignored.
func TestDeclaredHealthCheck(t *testing.T) {
	lb := func(ann map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: 32000,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}}}
	}
	for _, c := range []struct {
		name     string
		ann      map[string]string
		nodes    string // the nodes' providerID
		class    LBCheckClass
		declared DeclaredCheck
		detail   string
	}{
		{"undeclared, unknown controller: kube-proxy's contract", nil, "", LBCheckNodePort, CheckUndeclared, "assumed"},
		{"undeclared, Hetzner nodes: the traffic port", nil, "hcloud://1", LBCheckTrafficPort, CheckUndeclared, "destination NodePort"},
		{"traffic-port", map[string]string{AnnotationHealthCheck: "traffic-port"}, "", LBCheckTrafficPort, CheckTrafficPort, "declared"},
		{"health-check-node-port over Hetzner's default", map[string]string{AnnotationHealthCheck: "health-check-node-port"}, "hcloud://1",
			LBCheckNodePort, CheckHealthCheckNodePort, "declared"},
		{"none over AWS's healthCheckNodePort default", map[string]string{AnnotationHealthCheck: " None ", AnnAWSType: "nlb"}, "aws://x",
			LBCheckMisdirected, CheckNone, "declared absent"},
		{"traffic-port over AWS's annotation", map[string]string{AnnotationHealthCheck: "traffic-port", AnnAWSHCPort: "10256"}, "",
			LBCheckTrafficPort, CheckTrafficPort, "declared"},
		{"an unknown value is ignored", map[string]string{AnnotationHealthCheck: "tcp", AnnAWSHCPort: "traffic-port"}, "",
			LBCheckTrafficPort, CheckUndeclared, "healthcheck-port: traffic-port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := lb(c.ann)
			hc := LBCheckOf(svc, c.nodes)
			if hc.Class != c.class || !strings.Contains(hc.Detail, c.detail) {
				t.Errorf("plugin: class %v detail %q, want %v containing %q", hc.Class, hc.Detail, c.class, c.detail)
			}
			kept := svc.DeepCopy()
			kept.Annotations = keptAnnotations(svc.Annotations)
			st := ServiceStateOf(kept, nil)
			if got := st.LBCheckOn(NodeState{ProviderID: c.nodes}); got != c.class || st.HealthCheck != c.declared {
				t.Errorf("exporter: class %v declared %q, want %v %q", got, st.HealthCheck, c.class, c.declared)
			}
		})
	}
	// Any Service type carries the declaration: a NodePort Service behind HAProxy.
	np := lb(map[string]string{AnnotationHealthCheck: "traffic-port"})
	np.Spec.Type, np.Spec.HealthCheckNodePort = corev1.ServiceTypeNodePort, 0
	np.Annotations = keptAnnotations(np.Annotations)
	if st := ServiceStateOf(np, nil); st.HealthCheck != CheckTrafficPort {
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
		{"AWS annotations", map[string]string{AnnAWSType: "nlb"}, 32000, "", true},
		{"AWS traffic port", map[string]string{AnnAWSHCPort: "traffic-port"}, 32000, "aws://x", false},
		{"Hetzner nodes: the traffic port", nil, 32000, "hcloud://1", false},
		{"declared on bare metal", map[string]string{AnnotationHealthCheck: "health-check-node-port"}, 32000, "", true},
		{"declared none on GCE", map[string]string{AnnotationHealthCheck: "none"}, 32000, "gce://p/z/n", false},
		{"no health check node port", nil, 0, "gce://p/z/n", false},
	} {
		if got := svc(c.ann, c.hcnp).HealthCheckContract(NodeState{ProviderID: c.nodes}); got != c.want {
			t.Errorf("%s: contract %v, want %v", c.name, got, c.want)
		}
	}
}
