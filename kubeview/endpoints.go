package kubeview

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
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
	// annotationRemoteTerminating counts the remote endpoints listed terminating, serving or not: a pod of the
	// Service being deleted elsewhere opens its rollout window (package exposure's WindowOf).
	annotationRemoteTerminating = "localtraffic.io/remote-terminating"
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
		terminating := atoiOrZero(slice.Annotations[annotationRemoteTerminating])
		var local []discoveryv1.Endpoint // most slices have none here
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
			if isTerminating(ep.Conditions) {
				terminating++
			}
		}
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:            slice.Name,
				Namespace:       slice.Namespace,
				UID:             slice.UID,
				ResourceVersion: slice.ResourceVersion,
				Labels:          keepLabels(slice.Labels, labelServiceName, labelHeadless),
				Annotations: map[string]string{
					annotationRemoteReady:              strconv.Itoa(ready),
					annotationRemoteServingTerminating: strconv.Itoa(servingTerminating),
					annotationRemoteTerminating:        strconv.Itoa(terminating),
				},
			},
			AddressType: slice.AddressType,
			Endpoints:   local,
			Ports:       slice.Ports,
		}, nil
	}
}

// TransformService drops what the exporter never reads (managed fields, most annotations and labels, status
// conditions). It keeps the AnnotationIntentionalPlacement annotation, the cloud controllers' annotations that
// say where the load balancer health-checks (and loadBalancerClass), and the labels keep names (those an ignore
// selector reads: keeping them rather than the selector's answer keeps the transform idempotent).
func TransformService(keep ...string) func(any) (any, error) { return transformService(false, keep...) }

// TransformServiceForAnnouncers is TransformService for a view that reads the announcers' objects: it also keeps
// every label of a Local LoadBalancer Service, which Cilium's L2 announcement policies select by any label
// (announce.Snapshot.CiliumUnheld). Only those Services pay for their labels.
func TransformServiceForAnnouncers(keep ...string) func(any) (any, error) {
	return transformService(true, keep...)
}

func transformService(announcers bool, keep ...string) func(any) (any, error) {
	keepLabelKeys := append([]string{labelServiceProxyName}, keep...)
	return func(obj any) (any, error) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return obj, nil
		}
		labels := keepLabels(svc.Labels, keepLabelKeys...)
		if announcers && mayBeAnnounced(svc) &&
			svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && len(svc.Labels) > 0 {
			labels = maps.Clone(svc.Labels)
		}
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name:              svc.Name,
				Namespace:         svc.Namespace,
				UID:               svc.UID,
				ResourceVersion:   svc.ResourceVersion,
				Labels:            labels,
				Annotations:       keptAnnotations(svc.Annotations),
				DeletionTimestamp: svc.DeletionTimestamp,
			},
			Spec: corev1.ServiceSpec{
				Type:                  svc.Spec.Type,
				ClusterIP:             svc.Spec.ClusterIP,
				Ports:                 svc.Spec.Ports,
				ExternalIPs:           svc.Spec.ExternalIPs,
				IPFamilies:            svc.Spec.IPFamilies,
				ClusterIPs:            svc.Spec.ClusterIPs,
				ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
				HealthCheckNodePort:   svc.Spec.HealthCheckNodePort,
				LoadBalancerClass:     svc.Spec.LoadBalancerClass,
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: svc.Status.LoadBalancer.Ingress}},
		}, nil
	}
}

// keepLabels copies the labels (or annotations) the view reads out of the decoded object's map, nil when it has none of them:
// the rest of the map (the Service's own labels, copied onto its slices by the controller) would stay alive
// with every cached object, about 1 KB each at 2,000 Services and slices (docs/performance.md).
// keptAnnotations: the intentional-placement annotation, the load balancer health check's and the announcers'.
func keptAnnotations(ann map[string]string) map[string]string {
	out := announce.KeepAnnotations(ann, announce.KeepLBCheckAnnotations(ann))
	if v, ok := ann[AnnotationIntentionalPlacement]; ok {
		if out == nil {
			out = map[string]string{}
		}
		out[AnnotationIntentionalPlacement] = v
	}
	return out
}

func keepLabels(labels map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
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

// PortEndpoints is what kube-proxy programs for one Service port, in one IP family, on this node.
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
	// ClusterWide is true when the port has a usable endpoint anywhere in the family (kube-proxy's "has
	// endpoints"); without one, kube-proxy rejects on every node: an outage, not a per-node blackhole.
	ClusterWide bool
	// LocalAddrs are the Local endpoints' addresses and target ports, sorted: the DNAT targets kube-proxy's
	// rules should send the port's external traffic to on this node (nil when none).
	LocalAddrs []netip.AddrPort
	// LocalUnused are the port's other endpoints on this node that the API still lists (not ready, and
	// not used as the serving-terminating fallback), sorted. Rules that still send traffic to one are
	// stale but reach a pod that exists; rules that send it to an address in neither list reach a pod the
	// API no longer has.
	LocalUnused []netip.AddrPort
}

// endpointKey identifies an endpoint as kube-proxy does: its canonical address and target port.
type endpointKey struct {
	ip   string
	port int32
}

// localEndpoint is one local endpoint's conditions after de-duplication.
type localEndpoint struct {
	ready, servingTerminating, terminating bool
}

// countFamily applies kube-proxy's rules (its pkg/proxy/topology.go, CategorizeEndpoints, over what each
// family's EndpointSliceCache keeps) to the slices of one Service, for one family's proxier: only slices of
// that addressType, and within them only addresses of that family.
func countFamily(svc *corev1.Service, family corev1.IPFamily, slices []*discoveryv1.EndpointSlice) FamilyEndpoints {
	fe := FamilyEndpoints{Family: family}
	addressType := discoveryv1.AddressType(family)
	ready := map[string]struct{}{}
	used := map[string]struct{}{}
	stopped := map[string]struct{}{}
	terminating := map[string]struct{}{}
	for _, slice := range slices {
		if slice.AddressType == addressType {
			fe.RemoteReady += atoiOrZero(slice.Annotations[annotationRemoteReady])
			fe.Terminating += atoiOrZero(slice.Annotations[annotationRemoteTerminating])
		}
	}
	for _, sp := range svc.Spec.Ports {
		pe := PortEndpoints{Name: sp.Name, Protocol: sp.Protocol, Port: sp.Port, NodePort: sp.NodePort}
		local := map[endpointKey]localEndpoint{}
		remoteUsable := 0
		for _, slice := range slices {
			if slice.AddressType != addressType {
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
				ip := canonicalIP(ep.Addresses[0])
				if ip == "" || IPFamilyOf(ip) != family {
					continue // kube-proxy ignores an address of the wrong family
				}
				key := endpointKey{ip: ip, port: port}
				c := ep.Conditions
				le := localEndpoint{
					ready:              isReady(c),
					servingTerminating: !isReady(c) && isServing(c) && isTerminating(c),
					terminating:        isTerminating(c),
				}
				// The same endpoint in two slices (a controller moving it, or a pod IP reused while the old pod
				// terminates) is one endpoint: a non-terminating copy replaces what was there, a terminating one
				// never does (pkg/proxy/endpointslicecache.go addEndpoints).
				if _, exists := local[key]; !exists || !le.terminating {
					local[key] = le
				}
			}
		}
		var readyKeys, termKeys []endpointKey
		for key, le := range local {
			switch {
			case le.ready:
				readyKeys = append(readyKeys, key)
				ready[key.ip] = struct{}{}
			case le.servingTerminating:
				termKeys = append(termKeys, key)
			case le.terminating:
				stopped[key.ip] = struct{}{}
			}
			if le.terminating {
				terminating[key.ip] = struct{}{}
			}
		}
		chosen := readyKeys
		if len(readyKeys) == 0 && len(termKeys) > 0 {
			chosen, pe.LocalTerminating = termKeys, true
		}
		pe.Local = len(chosen)
		for _, key := range chosen {
			used[key.ip] = struct{}{}
		}
		pe.LocalAddrs, pe.LocalUnused = localAddrs(local, chosen)
		pe.ClusterWide = pe.Local > 0 || remoteUsable > 0
		fe.Ports = append(fe.Ports, pe)
	}
	fe.LocalReadyEndpoints, fe.LocalEndpoints = len(ready), len(used)
	fe.Terminating += len(terminating)
	for ip := range stopped {
		if _, ok := used[ip]; !ok {
			fe.LocalStopped++
		}
	}
	return fe
}

// localAddrs splits the port's local endpoints into the chosen ones and the others, as sorted addresses, in
// one allocation. Most ports have none on this node: nothing is allocated then.
func localAddrs(local map[endpointKey]localEndpoint, chosen []endpointKey) (used, unused []netip.AddrPort) {
	if len(local) == 0 {
		return nil, nil
	}
	all := make([]netip.AddrPort, len(local))
	u, o := 0, len(chosen) // chosen ones first, the others after them
	for k := range local {
		a, err := netip.ParseAddr(k.ip) // canonical already (canonicalIP)
		if err != nil || k.port < 0 || k.port > 65535 {
			continue
		}
		ap := netip.AddrPortFrom(a, uint16(k.port))
		if slices.Contains(chosen, k) {
			all[u], u = ap, u+1
		} else {
			all[o], o = ap, o+1
		}
	}
	used, unused = all[:u:u], all[len(chosen):o]
	slices.SortFunc(used, netip.AddrPort.Compare)
	slices.SortFunc(unused, netip.AddrPort.Compare)
	if len(used) == 0 {
		used = nil
	}
	if len(unused) == 0 {
		unused = nil
	}
	return used, unused
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
