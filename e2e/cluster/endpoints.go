package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Endpoint is one pod in a Service's EndpointSlice. Nil conditions follow the API's defaults: ready and
// serving true, terminating false.
type Endpoint struct {
	Pod                         *Pod
	Ready, Serving, Terminating *bool
}

// Bool returns a pointer to v, for Endpoint conditions.
func Bool(v bool) *bool { return &v }

// ManagedBy is the endpointslice.kubernetes.io/managed-by value on slices the harness writes.
const ManagedBy = "e2e.localtraffic.io"

// SliceName is the name of the EndpointSlice SetEndpoints writes for a Service.
func SliceName(service string) string { return service + "-e2e" }

// SetEndpoints plays the endpoint controller: it writes the Service's EndpointSlice so it lists exactly eps,
// with the Service's ports resolved to the pods' target ports. An empty eps leaves an empty slice (a Service
// with no endpoints anywhere).
func (c *Cluster) SetEndpoints(ctx context.Context, namespace, service string, eps []Endpoint) error {
	svc, err := c.admin.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set endpoints of %s/%s: %w", namespace, service, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SliceName(service),
			Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       slicePorts(svc),
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, ep := range eps {
		node := ep.Pod.Node
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ep.Pod.IP},
			NodeName:  &node,
			Conditions: discoveryv1.EndpointConditions{
				Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating,
			},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ep.Pod.Namespace, Name: ep.Pod.Name},
		})
	}
	slices := c.admin.DiscoveryV1().EndpointSlices(namespace)
	existing, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = existing.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write EndpointSlice %s/%s: %w", namespace, slice.Name, err)
	}
	return nil
}

func slicePorts(svc *corev1.Service) []discoveryv1.EndpointPort {
	ports := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for _, sp := range svc.Spec.Ports {
		name, proto := sp.Name, sp.Protocol
		port := sp.TargetPort.IntVal
		if sp.TargetPort.Type == intstr.String || port == 0 {
			// Named target ports would need the pod spec; the harness's pods use numeric ports.
			port = sp.Port
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
	}
	return ports
}
