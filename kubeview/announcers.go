package kubeview

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// What the view takes of package announce: the announcers' records of a Service and its load balancer's health
// check, kept in the Service's state so that verdict decides from the state alone.

// AddAnnouncers adds to s, the state of svc, the announcements of the announcers' own objects in ann, as every
// reader of the announcers does (the exporter's snapshot, the plugin's status): a Cilium L2 announcement
// policy may select any Service's externalIPs, and only a LoadBalancer Service has load balancer IPs an
// announcer announces. Its unrecorded IPs are MetalLB's nobody announces (announce.Snapshot.Unrecorded) and the
// load balancer IPs and externalIPs a Cilium L2 announcement policy selects while no live lease has been seen
// for a lease duration (announce.Snapshot.CiliumUnheld).
func (s *ServiceState) AddAnnouncers(ann announce.Snapshot, svc *corev1.Service) {
	s.Announcements = append(s.Announcements, ann.CiliumExternalIPAnnouncements(svc)...)
	var lbIPs []string
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		s.Announcements = append(s.Announcements, ann.AnnouncementsFor(svc.Namespace, svc.Name)...)
		s.UnrecordedIPs = ann.Unrecorded(svc, s.Announcements, s.LoadBalancerIPs)
		lbIPs = s.LoadBalancerIPs
	}
	for _, ip := range ann.CiliumUnheld(svc, lbIPs, s.ExternalIPs) {
		if !slices.Contains(s.UnrecordedIPs, ip) {
			s.UnrecordedIPs = append(s.UnrecordedIPs, ip)
		}
	}
}

// mayBeAnnounced: an announcer may announce an address of svc, which the view then watches the announcers'
// records of (and keeps the labels of, which Cilium's policies select by): its load balancer IPs, or its
// externalIPs, which Cilium's L2 announcer announces for a policy with externalIPs true.
func mayBeAnnounced(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Spec.ExternalIPs) > 0
}

// annotationStates sets the annotation sources' states in states from the Services' announcements
// (announce.AnnotationStates).
func annotationStates(states map[announce.Source]announce.SourceState, services []ServiceState) {
	announce.AnnotationStates(states, func(yield func(announce.Announcement) bool) {
		for _, svc := range services {
			for _, a := range svc.Announcements {
				if !yield(a) {
					return
				}
			}
		}
	})
}

// LBCheckOn is the class of the Service's load balancer health check on node n: from the Service's annotations,
// else (no cloud controller's annotation) from the node's providerID, whose controller's default applies
// (Hetzner, Linode and Scaleway check the traffic port by default).
func (s ServiceState) LBCheckOn(n NodeState) announce.LBCheckClass {
	if s.Type != corev1.ServiceTypeLoadBalancer {
		return announce.LBCheckNodePort
	}
	if !s.lbCheckByProvider || n.ProviderID == "" {
		return s.LBCheck
	}
	return announce.LBCheckOf(&corev1.Service{Spec: corev1.ServiceSpec{Type: s.Type, HealthCheckNodePort: s.HealthCheckNodePort}}, n.ProviderID).Class
}

// HealthCheckContract reports whether the Service's load balancer is known to drain node n by asking its
// healthCheckNodePort over HTTP, so that probes of the port from outside the node are expected: the Service
// declares it (announce.AnnotationHealthCheck: health-check-node-port), or a cloud controller known from the
// Service's annotations or the node's providerID checks it. Announcers (MetalLB, kube-vip, Cilium's and
// Calico's BGP or L2) and controllers this project does not know check nothing it can name: their nodes are
// not expected to be probed.
func (s ServiceState) HealthCheckContract(n NodeState) bool {
	if s.Type != corev1.ServiceTypeLoadBalancer || s.HealthCheckNodePort == 0 || s.LBCheckOn(n) != announce.LBCheckNodePort {
		return false
	}
	if !s.lbCheckByProvider {
		return true // declared, or a cloud controller's annotations named it
	}
	return announce.ProviderOf(&corev1.Service{}, n.ProviderID) != ""
}
