package announce

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Service's own declaration of its load balancer's check wins over the cloud controllers' annotations and
// the nodes' provider (LBCheckOf); an unknown value is ignored. kubeview's TestLBCheckKept holds the exporter's
// Service state (after the informers' transform) to LBCheckOf's answer.
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
			if d, _ := DeclaredCheckOf(svc.Annotations); d != c.declared {
				t.Errorf("declared %q, want %q", d, c.declared)
			}
		})
	}
}
