package kubeview

import (
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// AnnotationIntentionalPlacement marks a Service whose placement is intended: its owner knows that some nodes
// drop its external traffic (replicas pinned on purpose, clients that only ever use the nodes that serve) and
// wants no page for it. The value is the reason, shown wherever the Service is shown as ignored. The exporter
// keeps measuring such a Service (its verdict series stay) and exports it as ignored; the shipped alerts leave
// it out; kubectl localtraffic status and audit show it as ignored, not failing.
const AnnotationIntentionalPlacement = "localtraffic.io/intentional-placement"

// maxIgnoredReason bounds the reason exported as a label value: an annotation may hold 256 KiB, a label should
// not.
const maxIgnoredReason = 128

// noReason is the reason of an annotation left empty.
const noReason = "intentional placement (no reason given)"

// IgnoredReason tells whether the Service is ignored on purpose, and why: its AnnotationIntentionalPlacement
// (whose value is the reason, cut to 128 characters), else its labels matching sel (a cluster owner's
// exclusion, the exporter's --services.ignore-selector; nil or empty selects nothing).
func IgnoredReason(svc *corev1.Service, sel labels.Selector) (string, bool) {
	if v, ok := svc.Annotations[AnnotationIntentionalPlacement]; ok {
		v = strings.Join(strings.Fields(v), " ")
		if v == "" {
			return noReason, true
		}
		if utf8.RuneCountInString(v) > maxIgnoredReason {
			v = string([]rune(v)[:maxIgnoredReason-1]) + "…"
		}
		return v, true
	}
	if sel != nil && !sel.Empty() && sel.Matches(labels.Set(svc.Labels)) {
		return "ignore selector " + sel.String(), true
	}
	return "", false
}

// ServiceState is one Local Service as seen from this node. Its endpoints are counted per IP family, as
// kube-proxy's per-family proxiers count them (each keeps its own pkg/proxy/endpointslicecache.go cache): a
// dual-stack node can forward a Service's IPv4 NodePort and drop its IPv6 one.
type ServiceState struct {
	Namespace, Name string
	// UID is the Service object's: a Service deleted and created again under its name is another Service, and
	// a NodePort or load balancer address a new Service took over is no longer the old one's (the arrivals
	// meter forgets what it learnt there).
	UID                 types.UID
	Type                corev1.ServiceType
	HealthCheckNodePort int32
	// Ports are the Service's ports (spec.ports), in spec order.
	Ports []ServicePort
	// Families holds one entry per family the Service has (spec.ipFamilies, in spec order; IPv4 when the API
	// server filled in none).
	Families []FamilyEndpoints
	// ExternalIPs are spec.externalIPs, canonical.
	ExternalIPs []string
	// LoadBalancerIPs are the status.loadBalancer.ingress IPs kube-proxy programs: those whose ipMode is VIP or
	// unset. A Proxy-mode address is handled by the load balancer itself and gets no rule on the node.
	LoadBalancerIPs []string
	// Ignored: the Service is placed this way on purpose (IgnoredReason says why). It is measured like any
	// other; only what pages and what fails changes.
	Ignored       bool
	IgnoredReason string
	// LBCheck is where the Service's load balancer health-checks the nodes, as its cloud controller's
	// annotations say (LBCheckOn adds the nodes' provider); LBCheckNodePort for other types.
	LBCheck           announce.LBCheckClass
	lbCheckByProvider bool
	// LBCheckWindow is the load balancer's check interval and unhealthy threshold as the Service's cloud
	// annotations configure them (announce.CheckWindowOf); zero when they do not say both.
	LBCheckWindow announce.CheckWindow
	// HealthCheck is what the Service's announce.AnnotationHealthCheck declares, for every Service type (a
	// NodePort Service behind HAProxy or an F5 has a load balancer the API knows nothing of); CheckUndeclared
	// without one.
	HealthCheck announce.DeclaredCheck
	// Announcements are the announcers' records of which nodes announce the Service's load balancer IPs
	// (package announce): those on its own annotations always, those in the announcers' objects where the
	// view reads them (View.Snapshot with WithAnnouncers).
	Announcements []announce.Announcement
	// UnrecordedIPs are the addresses an announcer should announce and, by its records, nobody does: the load
	// balancer IPs MetalLB allocated (its ip-allocated-from-pool annotation) of which none of its records,
	// read cluster-wide while its speakers run (announce.Snapshot.Unrecorded), says a node announces them (only
	// a reader of every node's records can know it: kubectl localtraffic status, through announce.List; an
	// exporter reads its own node's BGP records only); and the load balancer IPs and externalIPs a Cilium L2
	// announcement policy selects while the exporter has seen no live lease of the Service for a lease
	// duration (announce.Snapshot.CiliumUnheld).
	UnrecordedIPs []string
}

// ServicePort is one port of the Service's spec.
type ServicePort struct {
	Name     string // "" when unnamed
	Protocol corev1.Protocol
	Port     int32
	NodePort int32 // 0 when none (ClusterIP, or allocateLoadBalancerNodePorts false)
}

// FamilyEndpoints is what one family's proxier counts for the Service.
type FamilyEndpoints struct {
	Family corev1.IPFamily
	// Ports has one entry per Service port, in spec order.
	Ports []PortEndpoints
	// LocalEndpoints is the number of distinct local endpoint IPs used for external traffic over all ports.
	LocalEndpoints int
	// LocalReadyEndpoints is what this family's health check node port reports: distinct ready local IPs.
	LocalReadyEndpoints int
	// LocalStopped counts the distinct local endpoint IPs the slices still list as terminating that kube-proxy
	// no longer uses (neither ready nor serving): a pod being deleted that stopped serving. RemoteReady counts
	// the ready endpoints on other nodes over the family's slices (every port's). Both tell an episode's
	// cause (package exposure), not what kube-proxy programs.
	LocalStopped int
	RemoteReady  int
	// Terminating counts the family's endpoints listed terminating anywhere in the cluster (distinct local
	// IPs, and the remote ones over its slices), serving or not: a pod of the Service being deleted, which
	// opens its rollout window (package exposure's WindowOf), whether or not this node drops anything.
	Terminating int
}

// Family returns the counts of family f, and whether the Service has that family.
func (s ServiceState) Family(f corev1.IPFamily) (FamilyEndpoints, bool) {
	for _, fe := range s.Families {
		if fe.Family == f {
			return fe, true
		}
	}
	return FamilyEndpoints{}, false
}

// LocalEndpoints is the Service's one-number summary: the smallest family's count. On a dual-stack Service a
// node with IPv4 endpoints but none of IPv6 drops the IPv6 traffic, so it counts 0.
func (s ServiceState) LocalEndpoints() int {
	n := -1
	for _, fe := range s.Families {
		if n < 0 || fe.LocalEndpoints < n {
			n = fe.LocalEndpoints
		}
	}
	return max(n, 0)
}

// HasLocalEndpoint is true when every port of every family has a local endpoint: any port without one is dropped.
func (s ServiceState) HasLocalEndpoint() bool {
	if len(s.Families) == 0 {
		return false
	}
	for _, fe := range s.Families {
		if len(fe.Ports) == 0 {
			return false
		}
		for _, p := range fe.Ports {
			if p.Local == 0 {
				return false
			}
		}
	}
	return true
}

// AddressesOf returns the load balancer IPs kube-proxy programs and the externalIPs of family f: each family's
// proxier programs only addresses of its own family.
func (s ServiceState) AddressesOf(f corev1.IPFamily) (loadBalancer, external []string) {
	for _, ip := range s.LoadBalancerIPs {
		if IPFamilyOf(ip) == f {
			loadBalancer = append(loadBalancer, ip)
		}
	}
	for _, ip := range s.ExternalIPs {
		if IPFamilyOf(ip) == f {
			external = append(external, ip)
		}
	}
	return loadBalancer, external
}

// ExternallyReachable tells whether external traffic of family f can reach the port at all: through its
// NodePort or an address of that family. A LoadBalancer Service with allocateLoadBalancerNodePorts false and
// only Proxy-mode addresses has nothing for kube-proxy to drop.
func (s ServiceState) ExternallyReachable(f corev1.IPFamily, p PortEndpoints) bool {
	if p.NodePort != 0 {
		return true
	}
	lb, ext := s.AddressesOf(f)
	return len(lb) > 0 || len(ext) > 0
}

// ServiceStateOf counts one Service's local endpoints from its (transformed, filtered) slices.
func ServiceStateOf(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) ServiceState {
	st := ServiceState{
		Namespace:           svc.Namespace,
		Name:                svc.Name,
		UID:                 svc.UID,
		Type:                svc.Spec.Type,
		HealthCheckNodePort: svc.Spec.HealthCheckNodePort,
		ExternalIPs:         canonicalIPs(svc.Spec.ExternalIPs),
		LoadBalancerIPs:     programmedIngressIPs(svc.Status.LoadBalancer.Ingress),
	}
	st.IgnoredReason, st.Ignored = IgnoredReason(svc, nil)
	st.LBCheck, st.lbCheckByProvider = announce.ServiceLBCheck(svc)
	st.HealthCheck, _ = announce.DeclaredCheckOf(svc.Annotations)
	st.LBCheckWindow, _ = announce.CheckWindowOf(svc.Annotations)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		st.Announcements = announce.FromAnnotations(svc.Annotations)
	}
	for _, sp := range svc.Spec.Ports {
		st.Ports = append(st.Ports, ServicePort{Name: sp.Name, Protocol: sp.Protocol, Port: sp.Port, NodePort: sp.NodePort})
	}
	for _, f := range serviceFamilies(svc) {
		st.Families = append(st.Families, countFamily(svc, f, slices))
	}
	return st
}

// serviceFamilies are the families kube-proxy serves the Service in: one proxier per family handles a Service
// that has a cluster IP of its family (spec.ipFamilies, filled in by the API server).
func serviceFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies
	}
	var fams []corev1.IPFamily
	seen := map[corev1.IPFamily]bool{}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if f := IPFamilyOf(ip); f != "" && !seen[f] {
			seen[f] = true
			fams = append(fams, f)
		}
	}
	if len(fams) == 0 {
		fams = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return fams
}

// programmedIngressIPs keeps the ingress IPs kube-proxy writes rules for: ipMode VIP or unset (pkg/proxy's
// service info skips Proxy-mode addresses, which the load balancer delivers to the node's NodePort itself).
func programmedIngressIPs(ingress []corev1.LoadBalancerIngress) []string {
	var out []string
	for _, ing := range ingress {
		if ing.IP == "" {
			continue
		}
		if ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			continue
		}
		if ip := canonicalIP(ing.IP); ip != "" {
			out = append(out, ip)
		}
	}
	return out
}

func canonicalIPs(in []string) []string {
	var out []string
	for _, s := range in {
		if ip := canonicalIP(s); ip != "" {
			out = append(out, ip)
		}
	}
	return out
}
