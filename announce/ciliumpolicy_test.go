package announce

import (
	"context"
	"maps"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ciliumPolicy writes a CiliumL2AnnouncementPolicy as its CRD (cilium.io/v2alpha1, cluster-scoped) holds it:
// spec.serviceSelector (nil: absent), loadBalancerIPs, externalIPs, and a nodeSelector and interfaces, which
// choose nodes and devices, not Services.
func ciliumPolicyObj(name string, serviceSelector map[string]any, loadBalancerIPs, externalIPs bool) *unstructured.Unstructured {
	spec := map[string]any{"loadBalancerIPs": loadBalancerIPs, "externalIPs": externalIPs,
		"interfaces":   []any{"^eth[0-9]+"},
		"nodeSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}}}}
	if serviceSelector != nil {
		spec["serviceSelector"] = serviceSelector
	}
	return unstr(GVRCiliumL2Policy, "CiliumL2AnnouncementPolicy", "", name, nil, map[string]any{"spec": spec})
}

// ciliumLeaseAs writes the Lease as Cilium's agent writes it: client-go's leader election over a
// resourcelock.LeaseLock (LeaderElectionRecordToLeaseSpec). A release (ReleaseOnCancel) writes an empty holder,
// leaseDurationSeconds 1 and renewTime and acquireTime now.
func ciliumLeaseAs(t *testing.T, name string, rec resourcelock.LeaderElectionRecord) *unstructured.Unstructured {
	t.Helper()
	l := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultCiliumNamespace, Name: name},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&rec)}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func held(holder string, at time.Time, seconds int) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: seconds,
		AcquireTime: metav1.NewTime(at), RenewTime: metav1.NewTime(at)}
}

func released(at time.Time) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: metav1.NewTime(at), RenewTime: metav1.NewTime(at),
		LeaderTransitions: 1}
}

func lbService(ns, name string, labels map[string]string, ips ...string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// TestCiliumPolicySelects: a policy selects a Service's load balancer IPs as Cilium's upsertSvc and
// upsertPolicy decide: a nil or empty serviceSelector selects every Service; matchLabels and matchExpressions
// match the Service's labels with io.kubernetes.service.namespace and io.kubernetes.service.name added; only a
// policy with loadBalancerIPs true announces load balancer IPs, only of a Service that has one; a Service of
// another loadBalancerClass is not Cilium's; a selector that does not convert selects nothing.
func TestCiliumPolicySelects(t *testing.T) {
	web := lbService("shop", "web", map[string]string{"app": "web", "tier": "front"}, "192.0.2.10")
	cls := func(c string) *corev1.Service {
		s := web.DeepCopy()
		s.Spec.LoadBalancerClass = &c
		return s
	}
	pending := lbService("shop", "web", map[string]string{"app": "web"}) // no ingress IP yet
	hostname := web.DeepCopy()
	hostname.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example"}}
	matchLabels := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return map[string]any{"matchLabels": m}
	}
	for _, c := range []struct {
		name   string
		policy *unstructured.Unstructured
		svc    *corev1.Service
		want   bool
	}{
		{"no serviceSelector: every Service", ciliumPolicyObj("all", nil, true, false), web, true},
		{"an empty serviceSelector: every Service", ciliumPolicyObj("empty", map[string]any{}, true, false), web, true},
		{"matchLabels", ciliumPolicyObj("p", matchLabels("app", "web"), true, false), web, true},
		{"matchLabels of another Service", ciliumPolicyObj("p", matchLabels("app", "api"), true, false), web, false},
		{"Cilium's name label", ciliumPolicyObj("p", matchLabels(LabelCiliumServiceName, "web", LabelCiliumServiceNamespace, "shop"), true, false), web, true},
		{"Cilium's namespace label, another namespace", ciliumPolicyObj("p", matchLabels(LabelCiliumServiceNamespace, "other"), true, false), web, false},
		{"matchExpressions In", ciliumPolicyObj("p", map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "In", "values": []any{"front", "edge"}}}}, true, false), web, true},
		{"matchExpressions DoesNotExist", ciliumPolicyObj("p", map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "DoesNotExist"}}}, true, false), web, false},
		{"externalIPs only: no load balancer IP announced", ciliumPolicyObj("p", nil, false, true), web, false},
		{"no ingress IP yet", ciliumPolicyObj("p", nil, true, false), pending, false},
		{"an ingress hostname only", ciliumPolicyObj("p", nil, true, false), hostname, false},
		{"Cilium's loadBalancerClass", ciliumPolicyObj("p", nil, true, false), cls(CiliumL2LoadBalancerClass), true},
		{"another loadBalancerClass", ciliumPolicyObj("p", nil, true, false), cls("example.com/other"), false},
		{"a selector that does not convert", ciliumPolicyObj("bad", map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "Near"}}}, true, false), web, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			kept, err := transformCiliumPolicy(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got := ciliumSelectsLoadBalancerIPs([]ciliumPolicy{ciliumPolicyOf(kept.(*unstructured.Unstructured))}, c.svc); got != c.want {
				t.Errorf("selects %v, want %v", got, c.want)
			}
		})
	}
}

// TestCiliumExternalIPAnnouncements: the holder of a Service's lease announces its externalIPs, one record per
// address, when a policy with externalIPs true selects it (Cilium's desiredEntries), whatever the Service's
// type and whether a policy selects its load balancer IPs; not for a policy with loadBalancerIPs alone, not
// for a Service of another loadBalancerClass, and nothing while the policies are unread. A lease whose holder
// stopped renewing it gives Expired records.
func TestCiliumExternalIPAnnouncements(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease := CiliumLeaseName("shop", "reports")
	a, _, _ := startCilium(t, ctx, t0,
		ciliumPolicyObj("ext", map[string]any{"matchLabels": map[string]any{"app": "reports"}}, false, true),
		ciliumPolicyObj("lb", map[string]any{"matchLabels": map[string]any{"app": "web"}}, true, false),
		ciliumLeaseAs(t, lease, held("node-2", t0, 15)), ciliumLeaseAs(t, CiliumLeaseName("shop", "web"), held("node-3", t0, 15)))
	reports := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "reports", Labels: map[string]string{"app": "reports"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalIPs: []string{"192.0.2.71", "2001:db8::71", "not-an-ip"}}}
	want := []Announcement{{Source: SourceCiliumL2, Node: "node-2", Address: "192.0.2.71", Exclusive: true},
		{Source: SourceCiliumL2, Node: "node-2", Address: "2001:db8::71", Exclusive: true}}
	if got := a.Snapshot(t0).CiliumExternalIPAnnouncements(reports); !reflect.DeepEqual(got, want) {
		t.Errorf("selected for its externalIPs: %+v, want %+v", got, want)
	}
	web := reports.DeepCopy()
	web.Name, web.Labels = "web", map[string]string{"app": "web"}
	if got := a.Snapshot(t0).CiliumExternalIPAnnouncements(web); got != nil {
		t.Errorf("selected for its load balancer IPs alone: %+v, want none", got)
	}
	other := reports.DeepCopy()
	otherClass := "example.com/other"
	other.Spec.LoadBalancerClass = &otherClass
	if got := a.Snapshot(t0).CiliumExternalIPAnnouncements(other); got != nil {
		t.Errorf("another loadBalancerClass: %+v, want none", got)
	}
	if got := a.Snapshot(t0.Add(time.Minute)).CiliumExternalIPAnnouncements(reports); len(got) != 2 || !got[0].Expired || !got[1].Expired {
		t.Errorf("a lease not renewed for its duration: %+v, want both expired", got)
	}
	s := a.Snapshot(t0)
	s.States = maps.Clone(s.States)
	s.States[SourceCiliumL2Policy] = SourceForbidden
	if got := s.CiliumExternalIPAnnouncements(reports); got != nil {
		t.Errorf("policies unread: %+v, want none", got)
	}
}

// startCilium runs the informers over objs and waits until every source is read.
func startCilium(t *testing.T, ctx context.Context, now time.Time, objs ...runtime.Object) (*Informers, func(...*unstructured.Unstructured), func(string)) {
	t.Helper()
	client := fakeDynamic(objs...)
	a := NewInformers(client, "node-1", DefaultCiliumNamespace)
	a.Start(ctx)
	waitAnnouncers(t, a, now, map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK,
		SourceCiliumL2Policy: SourceOK})
	ri := client.Resource(GVRLease).Namespace(DefaultCiliumNamespace)
	// write updates (or creates) leases and waits until the informer holds them; remove deletes one and waits.
	write := func(ls ...*unstructured.Unstructured) {
		t.Helper()
		for _, l := range ls {
			if _, err := ri.Update(ctx, l, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
				_, err = ri.Create(ctx, l, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			want := leaseOf(l)
			waitFor(t, func() bool {
				got, ok, _ := a.informer[SourceCiliumL2].GetStore().GetByKey(DefaultCiliumNamespace + "/" + l.GetName())
				return ok && leaseOf(got.(*unstructured.Unstructured)).sameRecord(want)
			})
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			_, ok, _ := a.informer[SourceCiliumL2].GetStore().GetByKey(DefaultCiliumNamespace + "/" + name)
			return !ok
		})
	}
	return a, write, remove
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the informer never delivered the change")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReleasedCiliumLeaseUnannounced: Cilium 1.20.2 and later stop electing on a node without a local backend
// of a Local Service; where no node a policy selects runs a replica, the holder releases the lease as
// client-go's leader election does (ReleaseOnCancel: holderIdentity emptied, leaseDurationSeconds 1) and the
// agents' lease GC deletes it within a minute. Nobody answers ARP. The Service a policy selects is called
// unannounced once this reader has seen it without a live lease for a lease duration (the last held lease's:
// 15 s here), not before, and stays so after the lease is deleted; a Service no policy selects never is. A
// new holder ends it at once.
func TestReleasedCiliumLeaseUnannounced(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	webLease, apiLease := CiliumLeaseName("shop", "web"), CiliumLeaseName("shop", "api")
	a, write, remove := startCilium(t, ctx, t0,
		ciliumPolicyObj("web-only", map[string]any{"matchLabels": map[string]any{"app": "web"}}, true, false),
		ciliumLeaseAs(t, webLease, held("node-2", t0, 15)), ciliumLeaseAs(t, apiLease, held("node-3", t0, 15)))
	web := lbService("shop", "web", map[string]string{"app": "web"}, "192.0.2.10")
	api := lbService("shop", "api", map[string]string{"app": "api"}, "192.0.2.11")
	ips := func(svc *corev1.Service) []string { return []string{svc.Status.LoadBalancer.Ingress[0].IP} }
	check := func(at time.Duration, svc *corev1.Service, want []string, wantAt time.Duration) {
		t.Helper()
		s := a.Snapshot(t0.Add(at))
		if got := s.CiliumUnheld(svc, ips(svc), nil); !reflect.DeepEqual(got, want) {
			t.Errorf("%s at %s: unheld %v, want %v", svc.Name, at, got, want)
		}
		got, ok := s.CiliumUnheldAt(svc)
		if ok != (wantAt > 0) || ok && !got.Equal(t0.Add(wantAt)) {
			t.Errorf("%s at %s: unheld at %s (%v), want %s", svc.Name, at, got.Sub(t0), ok, wantAt)
		}
	}
	check(0, web, nil, 0)
	// Both holders release at 2 s (their Services' replicas left every selected node).
	write(ciliumLeaseAs(t, webLease, released(t0.Add(2*time.Second))), ciliumLeaseAs(t, apiLease, released(t0.Add(2*time.Second))))
	check(2*time.Second, web, nil, 17*time.Second)
	check(2*time.Second, api, nil, 0)
	if got := a.Snapshot(t0.Add(10*time.Second)).AnnouncementsFor("shop", "web"); got != nil {
		t.Errorf("a released lease names %+v, want nobody", got)
	}
	check(16*time.Second, web, nil, 17*time.Second) // within the lease duration: a failover would renew
	check(17*time.Second, web, ips(web), 0)
	check(17*time.Second, api, nil, 0) // no policy selects it: another announcer's, or none
	// The agents' GC deletes the released lease: still nobody.
	remove(webLease)
	check(80*time.Second, web, ips(web), 0)
	// An agent with a local backend elects itself: announced again at once.
	write(ciliumLeaseAs(t, webLease, held("node-1", t0.Add(90*time.Second), 15)))
	check(90*time.Second, web, nil, 0)
	if _, ok := a.unheld.since[webLease]; ok {
		t.Error("the clock of a Service with a live lease is kept")
	}
	// The one-shot reader (the plugin) has no clock: it says nothing of a released lease.
	client := fakeDynamic(ciliumPolicyObj("all", nil, true, false), ciliumLeaseAs(t, webLease, released(t0)))
	if got := List(ctx, client, DefaultCiliumNamespace, t0.Add(time.Minute)).CiliumUnheld(web, ips(web), nil); got != nil {
		t.Errorf("List: %v, want nothing", got)
	}
}

// TestReleasedCiliumLeaseUnannouncedExternalIPs: a policy with externalIPs true makes the lease's holder
// announce a Service's externalIPs, whatever its type; released and deleted, the lease leaves them
// unannounced after a lease duration, as for load balancer IPs. The load balancer IPs of a Service selected
// for its externalIPs alone are not Cilium's, nor the externalIPs of one selected for its load balancer IPs.
func TestReleasedCiliumLeaseUnannouncedExternalIPs(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reportsLease, webLease := CiliumLeaseName("shop", "reports"), CiliumLeaseName("shop", "web")
	a, write, remove := startCilium(t, ctx, t0,
		ciliumPolicyObj("ext", map[string]any{"matchLabels": map[string]any{"app": "reports"}}, false, true),
		ciliumPolicyObj("lb", map[string]any{"matchLabels": map[string]any{"app": "web"}}, true, false),
		ciliumLeaseAs(t, reportsLease, held("node-2", t0, 15)), ciliumLeaseAs(t, webLease, held("node-3", t0, 15)))
	extIPs := []string{"192.0.2.71", "2001:db8::71"}
	reports := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "reports", Labels: map[string]string{"app": "reports"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalIPs: extIPs}}
	web := lbService("shop", "web", map[string]string{"app": "web"}, "192.0.2.10")
	web.Spec.ExternalIPs = []string{"192.0.2.72"}
	check := func(at time.Duration, wantReports, wantWebExt, wantWebLB []string) {
		t.Helper()
		s := a.Snapshot(t0.Add(at))
		if got := s.CiliumUnheld(reports, nil, extIPs); !reflect.DeepEqual(got, wantReports) {
			t.Errorf("reports' externalIPs at %s: unheld %v, want %v", at, got, wantReports)
		}
		if got := s.CiliumUnheld(web, nil, web.Spec.ExternalIPs); !reflect.DeepEqual(got, wantWebExt) {
			t.Errorf("web's externalIPs at %s: unheld %v, want %v", at, got, wantWebExt)
		}
		if got := s.CiliumUnheld(web, []string{"192.0.2.10"}, nil); !reflect.DeepEqual(got, wantWebLB) {
			t.Errorf("web's load balancer IP at %s: unheld %v, want %v", at, got, wantWebLB)
		}
	}
	check(0, nil, nil, nil)
	write(ciliumLeaseAs(t, reportsLease, released(t0.Add(2*time.Second))), ciliumLeaseAs(t, webLease, released(t0.Add(2*time.Second))))
	check(2*time.Second, nil, nil, nil) // the reader's clocks start when it finds them so (the tracker, at the event)
	if got, ok := a.Snapshot(t0.Add(2 * time.Second)).CiliumUnheldAt(reports); !ok || !got.Equal(t0.Add(17*time.Second)) {
		t.Errorf("reports unheld at %s (%v), want 17s", got.Sub(t0), ok)
	}
	check(16*time.Second, nil, nil, nil)
	check(17*time.Second, extIPs, nil, []string{"192.0.2.10"})
	remove(reportsLease)
	check(80*time.Second, extIPs, nil, []string{"192.0.2.10"})
	if got := a.Snapshot(t0.Add(80*time.Second)).CiliumUnheld(reports, []string{"192.0.2.99"}, nil); got != nil {
		t.Errorf("reports' load balancer IPs, selected by no policy: unheld %v, want none", got)
	}
	write(ciliumLeaseAs(t, reportsLease, held("node-1", t0.Add(90*time.Second), 15)))
	check(90*time.Second, nil, nil, []string{"192.0.2.10"})
}

// TestCiliumFailoverDoesNotPage: a holder releases and another agent takes the lease within the lease
// duration (the last held lease's, 5 s here from the agents' --l2-announcements-lease-duration): the Service
// is never unannounced. A Service selected before any lease exists (a new Service, before the first agent
// elects) is not unannounced within a lease duration either; with no lease seen ever, Cilium's default 15 s.
func TestCiliumFailoverDoesNotPage(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := CiliumLeaseName("shop", "web")
	web := lbService("shop", "web", nil, "192.0.2.10")
	a, write, _ := startCilium(t, ctx, t0, ciliumPolicyObj("all", nil, true, false), ciliumLeaseAs(t, name, held("node-2", t0, 5)))
	write(ciliumLeaseAs(t, name, released(t0.Add(time.Second))))
	for _, at := range []time.Duration{time.Second, 3 * time.Second, 5 * time.Second} {
		if got := a.Snapshot(t0.Add(at)).CiliumUnheld(web, []string{"192.0.2.10"}, nil); got != nil {
			t.Errorf("%s after the release: %v, want nothing within the lease duration", at, got)
		}
	}
	write(ciliumLeaseAs(t, name, held("node-3", t0.Add(5*time.Second), 5)))
	for _, at := range []time.Duration{6 * time.Second, 10 * time.Second} {
		if got := a.Snapshot(t0.Add(at)).CiliumUnheld(web, []string{"192.0.2.10"}, nil); got != nil {
			t.Errorf("%s: %v after a failover, want nothing", at, got)
		}
	}

	fresh, _, _ := startCilium(t, ctx, t0, ciliumPolicyObj("all", nil, true, false))
	newSvc := lbService("shop", "new", nil, "192.0.2.20")
	for _, c := range []struct {
		at   time.Duration
		want []string
	}{{0, nil}, {14 * time.Second, nil}, {15 * time.Second, []string{"192.0.2.20"}}} {
		if got := fresh.Snapshot(t0.Add(c.at)).CiliumUnheld(newSvc, []string{"192.0.2.20"}, nil); !reflect.DeepEqual(got, c.want) {
			t.Errorf("a new Service, no lease ever, at %s: %v, want %v", c.at, got, c.want)
		}
	}
}

// TestCiliumPoliciesUnreadable: without the CRD (the policies' list answers 404) or with the read refused, the
// policy source says so (absent, forbidden) and a released or missing lease says nothing, as before the
// policies were read: an announcer that cannot be read raises no page.
func TestCiliumPoliciesUnreadable(t *testing.T) {
	t0 := time.Now()
	for _, c := range []struct {
		name  string
		err   error
		state SourceState
	}{
		{"CRD absent", apierrors.NewNotFound(GVRCiliumL2Policy.GroupResource(), ""), SourceAbsent},
		{"RBAC forbids", apierrors.NewForbidden(GVRCiliumL2Policy.GroupResource(), "", nil), SourceForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := CiliumLeaseName("shop", "web")
			client := fakeDynamic(ciliumLeaseAs(t, name, released(t0)))
			client.PrependReactor("list", "ciliuml2announcementpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, c.err
			})
			a := NewInformers(client, "node-1", DefaultCiliumNamespace)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a.Start(ctx)
			waitAnnouncers(t, a, t0, map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK,
				SourceCiliumL2Policy: c.state})
			web := lbService("shop", "web", nil, "192.0.2.10")
			for _, at := range []time.Duration{0, time.Minute} {
				s := a.Snapshot(t0.Add(at))
				if got := s.CiliumUnheld(web, []string{"192.0.2.10"}, nil); got != nil {
					t.Errorf("at %s: unheld %v, want nothing", at, got)
				}
				if _, ok := s.CiliumUnheldAt(web); ok {
					t.Errorf("at %s: a clock runs", at)
				}
				if got := s.AnnouncementsFor("shop", "web"); got != nil {
					t.Errorf("at %s: a released lease names %+v", at, got)
				}
			}
		})
	}
}

// TestCiliumPolicyEvents: a policy's new spec has every Service's selection read again (record and moved); an
// update that leaves the kept spec alone (Cilium's agents patching the status) does not.
func TestCiliumPolicyEvents(t *testing.T) {
	var records, moves int
	h := recordHandlers(SourceCiliumL2Policy, func(string, string) { records++ }, func() { moves++ })
	keep := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		k, err := transformCiliumPolicy(u)
		if err != nil {
			t.Fatal(err)
		}
		return k.(*unstructured.Unstructured)
	}
	before := ciliumPolicyObj("p", map[string]any{"matchLabels": map[string]any{"app": "web"}}, true, false)
	withStatus := before.DeepCopy()
	withStatus.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "io.cilium/bad-interface-regex", "status": "True"}}}
	h.OnUpdate(keep(before), keep(withStatus))
	if records != 0 || moves != 0 {
		t.Errorf("a status patch: %d records, %d moves; want none", records, moves)
	}
	after := ciliumPolicyObj("p", map[string]any{"matchLabels": map[string]any{"app": "api"}}, true, false)
	h.OnUpdate(keep(before), keep(after))
	h.OnDelete(keep(after))
	if records != 2 || moves != 2 {
		t.Errorf("a new selector, then a deletion: %d records, %d moves; want 2 each", records, moves)
	}
}
