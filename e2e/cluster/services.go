package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// BackendPort is the port a harness pod serves HTTP on unless told otherwise (PodConfig.Ports), and every
// NewService's target port.
const BackendPort = 8080

// ServicePortName is the name of NewService's port.
const ServicePortName = "http"

// ServiceOption changes what NewService builds.
type ServiceOption func(*corev1.Service)

// NewService is the harness's Service, the one every scenario, tool and scale population starts from:
// namespace/name of type typ selecting app=<name>, one TCP port ServicePortName 80 → BackendPort, and
// externalTrafficPolicy Local unless typ is ClusterIP (the policy the exporter is about); then opts in order.
// It only builds the object: callers create it with the client and error handling they need.
func NewService(namespace, name string, typ corev1.ServiceType, opts ...ServiceOption) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{
				Name: ServicePortName, Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(BackendPort),
			}},
		},
	}
	if typ != corev1.ServiceTypeClusterIP {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	for _, opt := range opts {
		opt(svc)
	}
	return svc
}

// WithPolicy sets externalTrafficPolicy.
func WithPolicy(p corev1.ServiceExternalTrafficPolicy) ServiceOption {
	return func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = p }
}

// WithNodePort asks for a fixed node port on the Service's first port.
func WithNodePort(port int32) ServiceOption {
	return func(s *corev1.Service) { s.Spec.Ports[0].NodePort = port }
}

// WithHealthCheckNodePort asks for a fixed health check node port (a Local LoadBalancer Service's).
func WithHealthCheckNodePort(port int32) ServiceOption {
	return func(s *corev1.Service) { s.Spec.HealthCheckNodePort = port }
}

// WithExternalIPs sets spec.externalIPs.
func WithExternalIPs(ips ...string) ServiceOption {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
}

// WithClientIPAffinity sets sessionAffinity ClientIP.
func WithClientIPAffinity() ServiceOption {
	return func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }
}

// WithAppLabel labels the Service itself app=<name>, as a manifest usually does.
func WithAppLabel() ServiceOption {
	return func(s *corev1.Service) { s.Labels = map[string]string{"app": s.Name} }
}

// DualStack makes a Service require both IP families, IPv4 first.
func DualStack(s *corev1.Service) {
	policy := corev1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &policy
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

// SetLoadBalancerIngress plays the cloud service controller: it writes the Service's
// status.loadBalancer.ingress (through the status subresource) to exactly ingress. An ingress entry with
// IPMode Proxy (see ProxyIngress) is one kube-proxy must not program.
func (c *Cluster) SetLoadBalancerIngress(ctx context.Context, namespace, service string, ingress ...corev1.LoadBalancerIngress) error {
	services := c.admin.CoreV1().Services(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := services.Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = ingress
		_, err = services.UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set load balancer ingress of %s/%s: %w", namespace, service, err)
	}
	return nil
}

// VIPIngress is a load balancer ingress address with ipMode VIP: kube-proxy programs it on every node.
func VIPIngress(ip string) corev1.LoadBalancerIngress {
	mode := corev1.LoadBalancerIPModeVIP
	return corev1.LoadBalancerIngress{IP: ip, IPMode: &mode}
}

// ProxyIngress is a load balancer ingress address with ipMode Proxy: the load balancer proxies to node ports
// itself, and kube-proxy writes no rule for the address.
func ProxyIngress(ip string) corev1.LoadBalancerIngress {
	mode := corev1.LoadBalancerIPModeProxy
	return corev1.LoadBalancerIngress{IP: ip, IPMode: &mode}
}
