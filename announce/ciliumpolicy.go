package announce

import (
	"maps"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Which Services Cilium's L2 announcer elects a lease for, read from its CiliumL2AnnouncementPolicy objects,
// and how long a selected Service has been without a live lease by this reader's clock. A Local Service whose
// replicas run on no node a policy selects has its lease released (holderIdentity emptied) and then deleted by
// Cilium 1.20.2 and later: the lease alone names nobody, and only the policies tell that Service from one no
// policy selects.

// GVRCiliumL2Policy is Cilium's cluster-scoped L2 announcement policy (pkg/k8s/apis/cilium.io/v2alpha1,
// l2announcement_types.go; served as v2alpha1 only).
var GVRCiliumL2Policy = schema.GroupVersionResource{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliuml2announcementpolicies"}

// Cilium's own names (pkg/l2announcer/l2announcer.go, pkg/k8s/apis/cilium.io/v2alpha1).
const (
	// CiliumL2LoadBalancerClass: a Service with another spec.loadBalancerClass is not Cilium's to announce.
	CiliumL2LoadBalancerClass = "io.cilium/l2-announcer"
	// The labels Cilium adds to a Service's own before matching a policy's serviceSelector.
	LabelCiliumServiceNamespace = "io.kubernetes.service.namespace"
	LabelCiliumServiceName      = "io.kubernetes.service.name"
	// DefaultCiliumLeaseDuration is the agent's --l2-announcements-lease-duration default: how long a lease
	// counts without a renewal, and so how long a failover may take.
	DefaultCiliumLeaseDuration = 15 * time.Second
)

// ciliumPolicy is what the reader keeps of one CiliumL2AnnouncementPolicy. nodeSelector and interfaces say
// which nodes elect and where they answer, not which Services: they are not read.
type ciliumPolicy struct {
	name            string
	selector        labels.Selector // nil: the selector does not parse, and Cilium selects nothing by it
	loadBalancerIPs bool
	externalIPs     bool
}

// transformCiliumPolicy keeps what decides which Services a policy selects.
func transformCiliumPolicy(obj any) (any, error) {
	return slim(obj, nil, []string{"spec", "serviceSelector"}, []string{"spec", "loadBalancerIPs"}, []string{"spec", "externalIPs"})
}

// ciliumPolicyOf reads a policy as Cilium's upsertPolicy does: a nil serviceSelector selects every Service
// (labels.Everything, not the Nothing of Kubernetes' LabelSelectorAsSelector), an empty one too; one that does
// not convert selects nothing (Cilium refuses the policy with condition io.cilium/bad-service-selector).
func ciliumPolicyOf(u *unstructured.Unstructured) ciliumPolicy {
	p := ciliumPolicy{name: u.GetName()}
	p.loadBalancerIPs, _, _ = unstructured.NestedBool(u.Object, "spec", "loadBalancerIPs")
	p.externalIPs, _, _ = unstructured.NestedBool(u.Object, "spec", "externalIPs")
	raw, found, _ := unstructured.NestedMap(u.Object, "spec", "serviceSelector")
	if !found || raw == nil {
		p.selector = labels.Everything()
		return p
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return p
	}
	if sel, err := metav1.LabelSelectorAsSelector(&ls); err == nil {
		p.selector = sel
	}
	return p
}

// ciliumSelectsLoadBalancerIPs reports whether some policy makes Cilium elect an announcer for svc's load
// balancer IPs, as its upsertSvc decides (pkg/l2announcer/l2announcer.go): the Service has a load balancer
// ingress IP, its loadBalancerClass is unset or Cilium's, and a policy with loadBalancerIPs true selects its
// labels with io.kubernetes.service.namespace and io.kubernetes.service.name added. A policy that selects it for
// its externalIPs alone elects the same lease but announces no load balancer IP.
func ciliumSelectsLoadBalancerIPs(policies []ciliumPolicy, svc *corev1.Service) bool {
	hasLB := false
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			hasLB = true
			break
		}
	}
	return hasLB && ciliumSelects(policies, svc, func(p ciliumPolicy) bool { return p.loadBalancerIPs })
}

// ciliumSelectsExternalIPs reports whether some policy makes Cilium's lease holder announce svc's externalIPs:
// as for load balancer IPs (ciliumSelectsLoadBalancerIPs), with spec.externalIPs set and a policy with
// externalIPs true (its desiredEntries announce spec.externalIPs for such a policy alone).
func ciliumSelectsExternalIPs(policies []ciliumPolicy, svc *corev1.Service) bool {
	return svc.Spec.ExternalIPs != nil && ciliumSelects(policies, svc, func(p ciliumPolicy) bool { return p.externalIPs })
}

// ciliumSelects reports whether a policy of the kind wants says selects svc, whose loadBalancerClass must be
// unset or Cilium's.
func ciliumSelects(policies []ciliumPolicy, svc *corev1.Service, wants func(ciliumPolicy) bool) bool {
	if c := svc.Spec.LoadBalancerClass; c != nil && *c != CiliumL2LoadBalancerClass {
		return false
	}
	var set labels.Set
	for _, p := range policies {
		if !wants(p) || p.selector == nil {
			continue
		}
		if set == nil {
			set = make(labels.Set, len(svc.Labels)+2)
			maps.Copy(set, svc.Labels)
			set[LabelCiliumServiceNamespace] = svc.Namespace
			set[LabelCiliumServiceName] = svc.Name
		}
		if p.selector.Matches(set) {
			return true
		}
	}
	return false
}

// CiliumExternalIPAnnouncements returns, one per address, the announcements of svc's externalIPs by its
// Cilium lease's holder: a policy selects the Service for its externalIPs (ciliumSelectsExternalIPs), so the
// holder answers ARP and NDP for them as for load balancer IPs. Expired as in AnnouncementsFor. Nil while the
// policies or the leases are unread: a lease alone does not say which addresses its holder answers for.
func (s Snapshot) CiliumExternalIPAnnouncements(svc *corev1.Service) []Announcement {
	if s.States[SourceCiliumL2] != SourceOK || s.States[SourceCiliumL2Policy] != SourceOK {
		return nil
	}
	l, ok := s.leases[CiliumLeaseName(svc.Namespace, svc.Name)]
	if !ok || l.holder == "" || !ciliumSelectsExternalIPs(s.policies, svc) {
		return nil
	}
	var out []Announcement
	for _, ip := range svc.Spec.ExternalIPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue // Cilium skips what does not parse
		}
		out = append(out, Announcement{Source: SourceCiliumL2, Node: l.holder, Address: a.Unmap().String(), Exclusive: true,
			Expired: !l.validAt(s.now)})
	}
	return out
}

// unheldClock is a reader's memory, by its own clock, of the selected Services without a live lease: since
// when each has been seen so (keyed by lease name), and the duration on the last held lease it saw (Cilium's
// agents share one --l2-announcements-lease-duration). Snapshots share it with the Informers that made them.
type unheldClock struct {
	mu       sync.Mutex
	since    map[string]time.Time
	duration time.Duration // 0 until a held lease was seen
}

func newUnheldClock() *unheldClock { return &unheldClock{since: map[string]time.Time{}} }

// sinceAt returns when the lease name was first seen missing (stamping at now the first time).
func (c *unheldClock) sinceAt(name string, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.since[name]
	if !ok || now.Before(at) {
		at = now
		c.since[name] = at
	}
	return at
}

func (c *unheldClock) forget(name string) {
	c.mu.Lock()
	delete(c.since, name)
	c.mu.Unlock()
}

// heldDuration is the duration a failover may take: the last held lease's, else Cilium's default.
func (c *unheldClock) heldDuration() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.duration > 0 {
		return c.duration
	}
	return DefaultCiliumLeaseDuration
}

// sawHeld records the duration of a held lease (a released one carries 1 s: client-go's release writes it).
func (c *unheldClock) sawHeld(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.duration = d
	c.mu.Unlock()
}

// ciliumUnheld is when the addresses a Cilium policy selects of svc become unannounced for want of a Cilium
// lease, and which it selects: lb for its load balancer IPs, ext for its externalIPs (one lease stands for
// both); neither when nothing is unheld: the policies and the leases both read and current, a policy selects
// the Service, and no lease of it is held and live at the snapshot's time. The clock starts the first time
// this reader finds it so (it stops, and forgets, when a live lease or no selection is found) and runs one
// lease duration, long enough for another agent to take over after a release or a holder's death: a
// failover does not page. Only a reader with a clock (Informers) says anything; a one-shot List does not.
func (s Snapshot) ciliumUnheld(svc *corev1.Service) (at time.Time, lb, ext bool) {
	if s.unheld == nil || s.States[SourceCiliumL2] != SourceOK || s.States[SourceCiliumL2Policy] != SourceOK {
		return time.Time{}, false, false
	}
	name := CiliumLeaseName(svc.Namespace, svc.Name)
	lb, ext = ciliumSelectsLoadBalancerIPs(s.policies, svc), ciliumSelectsExternalIPs(s.policies, svc)
	if !lb && !ext {
		s.unheld.forget(name)
		return time.Time{}, false, false
	}
	if l, ok := s.leases[name]; ok && l.validAt(s.now) {
		s.unheld.forget(name)
		return time.Time{}, false, false
	}
	return s.unheld.sinceAt(name, s.now).Add(s.unheld.heldDuration()), lb, ext
}

// CiliumUnheld lists the addresses of svc a Cilium L2 announcement policy selects, its load balancer IPs
// (loadBalancerIPs) for a policy with loadBalancerIPs true and its externalIPs (externalIPs, canonical) for
// one with externalIPs true, while no live lease of the Service has been seen for a lease duration
// (ciliumUnheld): Cilium elects nobody, and no node answers ARP for them. Nil otherwise, and before the
// duration has run.
func (s Snapshot) CiliumUnheld(svc *corev1.Service, loadBalancerIPs, externalIPs []string) []string {
	at, lb, ext := s.ciliumUnheld(svc)
	if !lb && !ext || s.now.Before(at) {
		return nil
	}
	var out []string
	if lb {
		out = append(out, loadBalancerIPs...)
	}
	if ext {
		out = append(out, externalIPs...)
	}
	return out
}

// CiliumUnheldAt is when svc's selected addresses will be called unannounced for want of a Cilium lease unless
// a live lease is seen first, and false when no such clock runs or it has run out: the Service's state changes
// then without an event.
func (s Snapshot) CiliumUnheldAt(svc *corev1.Service) (time.Time, bool) {
	at, lb, ext := s.ciliumUnheld(svc)
	if !lb && !ext || !s.now.Before(at) {
		return time.Time{}, false
	}
	return at, true
}

// ForgetService drops the reader's clock for the Service namespace/name: it is gone.
func (a *Informers) ForgetService(namespace, name string) {
	a.unheld.forget(CiliumLeaseName(namespace, name))
}
