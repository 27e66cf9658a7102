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

// Endpoint is one pod in a Service's EndpointSlices. Nil conditions follow the API's defaults: ready and
// serving true, terminating false.
type Endpoint struct {
	Pod                         *Pod
	Ready, Serving, Terminating *bool
	// Families lists the IP families whose slice lists this pod; nil means every family of the Service. Leaving
	// one out reproduces a pod whose address of that family is missing (its IPv6 endpoint not published).
	Families []corev1.IPFamily
}

// Bool returns a pointer to v, for Endpoint conditions.
func Bool(v bool) *bool { return &v }

// ManagedBy is the endpointslice.kubernetes.io/managed-by value on slices the harness writes.
const ManagedBy = "e2e.localtraffic.io"

// SliceName is the name of the EndpointSlice SetEndpoints writes for a Service's IPv4 (or only) family.
func SliceName(service string) string { return service + "-e2e" }

// SliceNameFor is the name of the EndpointSlice of one family: SliceName for IPv4, <service>-e2e-ipv6 for IPv6.
func SliceNameFor(service string, family corev1.IPFamily) string {
	if family == corev1.IPv6Protocol {
		return SliceName(service) + "-ipv6"
	}
	return SliceName(service)
}

// serviceFamilies is spec.ipFamilies, IPv4 when the apiserver left it empty.
func serviceFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return svc.Spec.IPFamilies
}

// SetEndpoints plays the endpoint controller: for each IP family of the Service (spec.ipFamilies) it writes
// one EndpointSlice of that addressType, as the real controller does, listing exactly the eps that have an
// address of that family, with the Service's ports resolved to the pods' target ports. An empty eps leaves
// empty slices (a Service with no endpoints anywhere).
func (c *Cluster) SetEndpoints(ctx context.Context, namespace, service string, eps []Endpoint) error {
	svc, err := c.admin.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set endpoints of %s/%s: %w", namespace, service, err)
	}
	for _, family := range serviceFamilies(svc) {
		if err := c.writeSlice(ctx, svc, family, eps); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeSlice(ctx context.Context, svc *corev1.Service, family corev1.IPFamily, eps []Endpoint) error {
	slice := SliceOf(svc, family, eps)
	slices := c.admin.DiscoveryV1().EndpointSlices(svc.Namespace)
	existing, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = existing.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write EndpointSlice %s/%s: %w", svc.Namespace, slice.Name, err)
	}
	return nil
}

// SliceOf is the EndpointSlice SetEndpoints writes for one IP family of the Service (as created: its UID owns
// the slice), listing exactly the eps that have an address of that family.
func SliceOf(svc *corev1.Service, family corev1.IPFamily, eps []Endpoint) *discoveryv1.EndpointSlice {
	addressType := discoveryv1.AddressTypeIPv4
	if family == corev1.IPv6Protocol {
		addressType = discoveryv1.AddressTypeIPv6
	}
	slice := harnessSlice(svc, SliceNameFor(svc.Name, family), addressType)
	for _, ep := range eps {
		ip := ep.Pod.IPOf(family)
		if ip == "" || !listsFamily(ep.Families, family) {
			continue
		}
		node := ep.Pod.Node
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ip},
			NodeName:  &node,
			Conditions: discoveryv1.EndpointConditions{
				Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating,
			},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ep.Pod.Namespace, Name: ep.Pod.Name},
		})
	}
	return slice
}

// harnessSlice is an empty EndpointSlice of svc as the harness writes them all: labelled with the Service and
// ManagedBy (so the EndpointSlice controller leaves it alone), its ports the Service's resolved to the pods'
// target ports, and owned by the Service as the controller's slices are (a garbage collector removes them with
// it).
func harnessSlice(svc *corev1.Service, name string, addressType discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
			}},
		},
		AddressType: addressType,
		Ports:       slicePorts(svc),
		Endpoints:   []discoveryv1.Endpoint{},
	}
}

func listsFamily(families []corev1.IPFamily, f corev1.IPFamily) bool {
	if families == nil {
		return true
	}
	for _, x := range families {
		if x == f {
			return true
		}
	}
	return false
}

// DeleteEndpoints deletes every EndpointSlice SetEndpoints wrote for the Service (all families).
func (c *Cluster) DeleteEndpoints(ctx context.Context, namespace, service string) error {
	sel := fmt.Sprintf("%s=%s,%s=%s", discoveryv1.LabelServiceName, service, discoveryv1.LabelManagedBy, ManagedBy)
	err := c.admin.DiscoveryV1().EndpointSlices(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("delete EndpointSlices of %s/%s: %w", namespace, service, err)
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
