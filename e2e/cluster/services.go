package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

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
