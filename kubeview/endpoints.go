package kubeview

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels kube-proxy itself filters on (pkg/proxy/apis and the endpointslice controller).
const (
	labelServiceName      = discoveryv1.LabelServiceName // kubernetes.io/service-name
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	labelHeadless         = corev1.IsHeadlessService // service.kubernetes.io/headless
)

// Annotations the slice transform writes: the number of endpoints on other nodes, by condition. They replace
// the remote endpoints themselves so that the exporter's memory does not grow with endpoints it never reads.
const (
	annotationRemoteReady              = "localtraffic.io/remote-ready"
	annotationRemoteServingTerminating = "localtraffic.io/remote-serving-terminating"
)

// TransformEndpointSlice keeps what the exporter reads of an EndpointSlice: its labels, ports, address type and
// the endpoints on node; endpoints elsewhere are reduced to two counts kept in annotations. It is idempotent, as
// client-go asks of transforms: a transformed slice holds no remote endpoints, so counting again adds nothing.
func TransformEndpointSlice(node string) func(any) (any, error) {
	return func(obj any) (any, error) {
		slice, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return obj, nil // tombstones and other types pass through untouched
		}
		ready, servingTerminating := atoiOrZero(slice.Annotations[annotationRemoteReady]),
			atoiOrZero(slice.Annotations[annotationRemoteServingTerminating])
		local := make([]discoveryv1.Endpoint, 0, 1)
		for _, ep := range slice.Endpoints {
			if len(ep.Addresses) == 0 {
				continue // kube-proxy skips these too
			}
			if ep.NodeName != nil && *ep.NodeName == node {
				local = append(local, discoveryv1.Endpoint{
					Addresses:  ep.Addresses[:1], // kube-proxy uses only addresses[0]
					Conditions: ep.Conditions,
					NodeName:   ep.NodeName,
				})
				continue
			}
			switch {
			case isReady(ep.Conditions):
				ready++
			case isServing(ep.Conditions) && isTerminating(ep.Conditions):
				servingTerminating++
			}
		}
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:            slice.Name,
				Namespace:       slice.Namespace,
				UID:             slice.UID,
				ResourceVersion: slice.ResourceVersion,
				Labels:          slice.Labels,
				Annotations: map[string]string{
					annotationRemoteReady:              strconv.Itoa(ready),
					annotationRemoteServingTerminating: strconv.Itoa(servingTerminating),
				},
			},
			AddressType: slice.AddressType,
			Endpoints:   local,
			Ports:       slice.Ports,
		}, nil
	}
}

// TransformService drops what the exporter never reads (managed fields, annotations, status conditions).
func TransformService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			Labels:            svc.Labels,
			DeletionTimestamp: svc.DeletionTimestamp,
		},
		Spec: corev1.ServiceSpec{
			Type:                  svc.Spec.Type,
			ClusterIP:             svc.Spec.ClusterIP,
			Ports:                 svc.Spec.Ports,
			ExternalIPs:           svc.Spec.ExternalIPs,
			ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
			HealthCheckNodePort:   svc.Spec.HealthCheckNodePort,
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: svc.Status.LoadBalancer.Ingress}},
	}, nil
}

func atoiOrZero(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// Endpoint conditions as kube-proxy reads them: ready and serving default to true, terminating to false.
func isReady(c discoveryv1.EndpointConditions) bool { return c.Ready == nil || *c.Ready }
func isServing(c discoveryv1.EndpointConditions) bool {
	return c.Serving == nil || *c.Serving
}
func isTerminating(c discoveryv1.EndpointConditions) bool {
	return c.Terminating != nil && *c.Terminating
}

// PortEndpoints is what kube-proxy programs for one Service port on this node.
type PortEndpoints struct {
	Name     string // the Service port's name, "" when unnamed
	Protocol corev1.Protocol
	Port     int32
	NodePort int32
	// Local is the number of local endpoints kube-proxy uses for external traffic: the ready ones, or when there
	// are none, the serving-and-terminating ones.
	Local int
	// LocalTerminating is true when Local counts serving-terminating endpoints (the fallback).
	LocalTerminating bool
	// ClusterWide is true when the port has a usable endpoint anywhere (kube-proxy's "has endpoints"); without
	// one, kube-proxy rejects on every node: an outage, not a per-node blackhole.
	ClusterWide bool
}

// endpointKey identifies an endpoint as kube-proxy does: its address and target port.
type endpointKey struct {
	ip   string
	port int32
}

// countPortEndpoints applies kube-proxy's rules (../shared/reference/kube-proxy.md §1) to the slices of one
// Service. It returns one entry per Service port, plus the distinct local IPs that are ready (what kube-proxy's
// health check node port counts) and the distinct local IPs used for external traffic over all ports.
func countPortEndpoints(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) (ports []PortEndpoints, readyIPs, usedIPs int) {
	ready := map[string]struct{}{}
	used := map[string]struct{}{}
	for _, sp := range svc.Spec.Ports {
		pe := PortEndpoints{Name: sp.Name, Protocol: sp.Protocol, Port: sp.Port, NodePort: sp.NodePort}
		readyLocal := map[endpointKey]struct{}{}
		termLocal := map[endpointKey]struct{}{}
		remoteUsable := 0
		for _, slice := range slices {
			if slice.AddressType == discoveryv1.AddressTypeFQDN {
				continue
			}
			port, ok := slicePort(slice, sp)
			if !ok {
				continue
			}
			remoteUsable += atoiOrZero(slice.Annotations[annotationRemoteReady]) +
				atoiOrZero(slice.Annotations[annotationRemoteServingTerminating])
			for _, ep := range slice.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				key := endpointKey{ip: ep.Addresses[0], port: port}
				switch {
				case isReady(ep.Conditions):
					readyLocal[key] = struct{}{}
					ready[ep.Addresses[0]] = struct{}{}
				case isServing(ep.Conditions) && isTerminating(ep.Conditions):
					termLocal[key] = struct{}{}
				}
			}
		}
		chosen := readyLocal
		if len(readyLocal) == 0 && len(termLocal) > 0 {
			chosen, pe.LocalTerminating = termLocal, true
		}
		pe.Local = len(chosen)
		for key := range chosen {
			used[key.ip] = struct{}{}
		}
		pe.ClusterWide = pe.Local > 0 || remoteUsable > 0
		ports = append(ports, pe)
	}
	return ports, len(ready), len(used)
}

// slicePort finds the slice port that carries the Service port: kube-proxy matches by port name and protocol.
func slicePort(slice *discoveryv1.EndpointSlice, sp corev1.ServicePort) (int32, bool) {
	for _, p := range slice.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if name != sp.Name || proto != sp.Protocol || p.Port == nil {
			continue
		}
		return *p.Port, true
	}
	return 0, false
}
