package announce

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestAnnotationAnnouncements(t *testing.T) {
	cases := []struct {
		name string
		ann  map[string]string
		want []Announcement
	}{
		{"none", nil, nil},
		{"kube-vip names a receiving node, not the only one", map[string]string{AnnotationKubeVIPHost: "node-2"},
			[]Announcement{{Source: SourceKubeVIP, Node: "node-2"}}},
		{"openelb layer 2", map[string]string{AnnotationOpenELBLayer2: "node-3"},
			[]Announcement{{Source: SourceOpenELB, Node: "node-3", Exclusive: true}}},
		{"purelb current form, one slot per address", map[string]string{
			AnnotationPureLBIPv4: "node-a,eth0,192.0.2.10 node-b,eth0,192.0.2.11",
			AnnotationPureLBIPv6: "node-c,a,b,::ffff:192.0.2.12"},
			[]Announcement{
				{Source: SourcePureLB, Node: "node-a", Address: "192.0.2.10", Exclusive: true},
				{Source: SourcePureLB, Node: "node-b", Address: "192.0.2.11", Exclusive: true},
				{Source: SourcePureLB, Node: "node-c", Address: "192.0.2.12", Exclusive: true},
			}},
		{"purelb older node,interface form covers every address", map[string]string{AnnotationPureLBIPv4: "node1,enp1s0"},
			[]Announcement{{Source: SourcePureLB, Node: "node1", Exclusive: true}}},
		{"purelb virtual interface names no node", map[string]string{AnnotationPureLBIPv4: "kube-lb0"}, nil},
		{"purelb malformed entries dropped", map[string]string{AnnotationPureLBIPv4: ",eth0,192.0.2.1 n,eth0,bad n2,eth0,fe80::1%eth0"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FromAnnotations(c.ann); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func unstr(gvr schema.GroupVersionResource, kind, ns, name string, labels map[string]string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func l2Status(name, node, svcNS, svc string) *unstructured.Unstructured {
	return unstr(GVRServiceL2Status, "ServiceL2Status", "metallb-system", name,
		map[string]string{LabelMetalLBNode: node, LabelMetalLBServiceName: svc, LabelMetalLBServiceNamespace: svcNS, "other": "x"},
		map[string]any{"status": map[string]any{"node": node, "serviceName": svc, "serviceNamespace": svcNS,
			"interfaces": []any{map[string]any{"name": "eth0"}}}})
}

func bgpStatus(name, node, svcNS, svc string, peers ...string) *unstructured.Unstructured {
	p := []any{}
	for _, x := range peers {
		p = append(p, x)
	}
	return unstr(GVRServiceBGPStatus, "ServiceBGPStatus", "metallb-system", name,
		map[string]string{LabelMetalLBNode: node, LabelMetalLBServiceName: svc, LabelMetalLBServiceNamespace: svcNS},
		map[string]any{"status": map[string]any{"node": node, "serviceName": svc, "serviceNamespace": svcNS, "peers": p}})
}

func lease(ns, name, holder string, renew time.Time, seconds int64) *unstructured.Unstructured {
	return unstr(GVRLease, "Lease", ns, name, nil, map[string]any{"spec": map[string]any{
		"holderIdentity": holder, "renewTime": renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		"leaseDurationSeconds": seconds}})
}

func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		GVRServiceL2Status: "ServiceL2StatusList", GVRServiceBGPStatus: "ServiceBGPStatusList", GVRLease: "LeaseList",
		GVRPod: "PodList", GVRCiliumL2Policy: "CiliumL2AnnouncementPolicyList",
	}, objs...)
}

// speakerPod is a MetalLB speaker's pod on node, labelled as MetalLB's manifests (helm false) or its Helm
// chart (helm true) label it.
func speakerPod(node string, helm bool) *unstructured.Unstructured {
	labels := map[string]string{"app": "metallb", "component": "speaker"}
	if helm {
		labels = map[string]string{"app.kubernetes.io/name": "metallb", "app.kubernetes.io/instance": "metallb",
			"app.kubernetes.io/component": "speaker"}
	}
	return unstr(GVRPod, "Pod", "metallb-system", "speaker-"+node, labels, map[string]any{"spec": map[string]any{"nodeName": node}})
}

// waitAnnouncers takes snapshots at now until the sources' states are want: the leases are first seen at now.
func waitAnnouncers(t *testing.T, a *Informers, now time.Time, want map[Source]SourceState) Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := a.Snapshot(now)
		if reflect.DeepEqual(s.States, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("source states %v, want %v", s.States, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAnnouncersRead(t *testing.T) {
	now := time.Now()
	client := fakeDynamic(
		l2Status("l2-web", "node-2", "shop", "web"),
		bgpStatus("bgp-web-1", "node-1", "shop", "web", "peer-a"),
		bgpStatus("bgp-web-2", "node-2", "shop", "web", "peer-a"),
		bgpStatus("bgp-api-1", "node-1", "shop", "api"), // no peers: advertised nowhere
		lease("kube-system", CiliumLeaseName("shop", "cart"), "node-3", now.Add(-5*time.Second), 15),
		lease("kube-system", CiliumLeaseName("shop", "old"), "node-3", now.Add(-time.Minute), 15),
		lease("kube-system", "kube-scheduler", "cp-1", now, 15),
		lease("other", CiliumLeaseName("shop", "elsewhere"), "node-4", now, 15),
	)
	a := NewInformers(client, "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	waitAnnouncers(t, a, now, map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	// Nothing changes for longer than the leases' duration after this reader first saw them.
	s := a.Snapshot(now.Add(16 * time.Second))

	check := func(ns, name string, want []Announcement) {
		t.Helper()
		if got := s.AnnouncementsFor(ns, name); !reflect.DeepEqual(got, want) {
			t.Errorf("%s/%s: got %+v, want %+v", ns, name, got, want)
		}
	}
	check("shop", "web", []Announcement{
		{Source: SourceMetalLBL2, Node: "node-2", Exclusive: true},
		{Source: SourceMetalLBBGP, Node: "node-1", Peers: []string{"peer-a"}}, // node-2's is not this node's to read
	})
	check("shop", "api", nil)
	check("shop", "cart", []Announcement{{Source: SourceCiliumL2, Node: "node-3", Exclusive: true, Expired: true}})
	check("shop", "old", []Announcement{{Source: SourceCiliumL2, Node: "node-3", Exclusive: true, Expired: true}})
	check("shop", "elsewhere", nil)

	// What the informers keep: identity, MetalLB's labels and the fields read, nothing else.
	for _, obj := range a.informer[SourceMetalLBL2].GetStore().List() {
		u := obj.(*unstructured.Unstructured)
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "interfaces"); found || u.GetLabels()["other"] != "" {
			t.Errorf("transform kept more than it reads: %v", u.Object)
		}
	}
	for _, obj := range a.informer[SourceCiliumL2].GetStore().List() {
		if u := obj.(*unstructured.Unstructured); u.GetName() == "kube-scheduler" && u.Object["spec"] != nil {
			t.Errorf("a lease that is not Cilium's kept its spec: %v", u.Object)
		}
	}
}

// TestLeaseExpiryByReadersClock: a Cilium lease expires when this reader has seen it unchanged for its
// duration (client-go's leader election rule), whatever the holder's clock wrote in renewTime. A holder whose
// clock runs ten minutes behind keeps its lease live by renewing it; one whose clock runs ten minutes ahead
// loses it a lease duration after its last renewal, not ten minutes later. Judged by renewTime, the first
// would be expired from the start and the second live for ten minutes after it stopped.
func TestLeaseExpiryByReadersClock(t *testing.T) {
	t0 := time.Now()
	behind, ahead := CiliumLeaseName("shop", "behind"), CiliumLeaseName("shop", "ahead")
	client := fakeDynamic(
		lease(DefaultCiliumNamespace, behind, "node-2", t0.Add(-10*time.Minute), 15),
		lease(DefaultCiliumNamespace, ahead, "node-3", t0.Add(10*time.Minute), 15),
	)
	a := NewInformers(client, "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	waitAnnouncers(t, a, t0, map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	expired := func(s Snapshot, svc string) bool {
		t.Helper()
		got := s.AnnouncementsFor("shop", svc)
		if len(got) != 1 || got[0].Source != SourceCiliumL2 {
			t.Fatalf("shop/%s: %+v, want its lease", svc, got)
		}
		return got[0].Expired
	}
	s := a.Snapshot(t0)
	if expired(s, "behind") || expired(s, "ahead") {
		t.Errorf("first seen now: behind expired %v, ahead expired %v; want both live", expired(s, "behind"), expired(s, "ahead"))
	}

	// The holder behind renews, its clock still ten minutes slow; the reader sees the change at t0+10s.
	renewed := lease(DefaultCiliumNamespace, behind, "node-2", t0.Add(-10*time.Minute+5*time.Second), 15)
	if _, err := client.Resource(GVRLease).Namespace(DefaultCiliumNamespace).Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want, _, _ := unstructured.NestedString(renewed.Object, "spec", "renewTime")
	deadline := time.Now().Add(10 * time.Second)
	for a.Snapshot(t0.Add(10 * time.Second)).leases[behind].renewRaw != want {
		if time.Now().After(deadline) {
			t.Fatal("the informer never delivered the renewal")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s = a.Snapshot(t0.Add(20 * time.Second))
	if expired(s, "behind") {
		t.Error("a lease renewed 10 s ago (its holder's clock 10 min behind) is expired at 20 s")
	}
	if !expired(s, "ahead") {
		t.Error("a lease unchanged for 20 s of a 15 s duration (its holder's clock 10 min ahead) is live")
	}
	if s := a.Snapshot(t0.Add(25 * time.Second)); !expired(s, "behind") {
		t.Error("a lease unchanged for 15 s since the reader saw it renewed is live")
	}

	// A deleted lease is forgotten: written again, it is a first sight.
	if err := client.Resource(GVRLease).Namespace(DefaultCiliumNamespace).Delete(ctx, ahead, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := a.Snapshot(t0.Add(30 * time.Second)).leases[ahead]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never delivered the deletion")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := a.leases[ahead]; ok {
		t.Error("a deleted lease is still remembered")
	}
}

func TestAnnouncersStates(t *testing.T) {
	client := fakeDynamic()
	client.PrependReactor("list", "servicel2statuses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(GVRServiceL2Status.GroupResource(), "")
	})
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(GVRLease.GroupResource(), "", nil)
	})
	a := NewInformers(client, "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	s := waitAnnouncers(t, a, time.Now(), map[Source]SourceState{SourceMetalLBL2: SourceAbsent, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceForbidden, SourceCiliumL2Policy: SourceOK})
	if got := s.AnnouncementsFor("shop", "web"); got != nil {
		t.Errorf("announcements from sources not ok: %+v", got)
	}
}

func TestSourceTrack(t *testing.T) {
	var tr sourceTrack
	if st := tr.state(false); st != SourceStale {
		t.Errorf("before any answer: %s", st)
	}
	tr.ok()
	if st := tr.state(true); st != SourceOK {
		t.Errorf("after a list: %s", st)
	}
	tr.fail(apierrors.NewServiceUnavailable("down"))
	if st := tr.state(true); st != SourceStale {
		t.Errorf("after a failed watch: %s", st)
	}
	tr.fail(apierrors.NewNotFound(GVRServiceL2Status.GroupResource(), ""))
	if st := tr.state(true); st != SourceAbsent {
		t.Errorf("CRD removed: %s", st)
	}
	tr.ok()
	if st := tr.state(true); st != SourceOK {
		t.Errorf("answered again: %s", st)
	}
}

// The plugin's one-shot read sees every node's BGP statuses, and a refused source is a state.
func TestListAnnouncers(t *testing.T) {
	now := time.Now()
	client := fakeDynamic(
		l2Status("l2-web", "node-2", "shop", "web"),
		bgpStatus("bgp-api-1", "node-1", "shop", "api", "peer-a"),
		bgpStatus("bgp-api-3", "node-3", "shop", "api", "peer-a"),
		lease("kube-system", CiliumLeaseName("shop", "cart"), "node-3", now, 15),
	)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(GVRLease.GroupResource(), "", nil)
	})
	s := List(context.Background(), client, DefaultCiliumNamespace, now)
	want := map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceForbidden,
		SourceCiliumL2Policy: SourceOK}
	if !reflect.DeepEqual(s.States, want) {
		t.Errorf("states %v, want %v", s.States, want)
	}
	if got, want := s.AnnouncementsFor("shop", "api"), []Announcement{
		{Source: SourceMetalLBBGP, Node: "node-1", Peers: []string{"peer-a"}},
		{Source: SourceMetalLBBGP, Node: "node-3", Peers: []string{"peer-a"}},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("shop/api: %+v, want %+v", got, want)
	}
	if got := s.AnnouncementsFor("shop", "cart"); got != nil {
		t.Errorf("a forbidden source's records: %+v", got)
	}
}

// A CRD installed after the exporter started is found without a restart: the informer keeps retrying its
// list (client-go's backoff), and the source goes from absent to ok with the records.
func TestAnnouncersRediscover(t *testing.T) {
	client := fakeDynamic(l2Status("l2-web", "node-2", "shop", "web"))
	var installed atomic.Bool
	client.PrependReactor("list", "servicel2statuses", func(k8stesting.Action) (bool, runtime.Object, error) {
		if installed.Load() {
			return false, nil, nil // the tracker answers
		}
		return true, nil, apierrors.NewNotFound(GVRServiceL2Status.GroupResource(), "")
	})
	a := NewInformers(client, "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	waitAnnouncers(t, a, time.Now(), map[Source]SourceState{SourceMetalLBL2: SourceAbsent, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	installed.Store(true)
	s := waitAnnouncers(t, a, time.Now(), map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	if got := s.AnnouncementsFor("shop", "web"); len(got) != 1 || got[0].Node != "node-2" {
		t.Errorf("after the CRD appeared: %+v", got)
	}
}

// MetalLB allocated the address (its annotation) and, with both of its record kinds read cluster-wide and its
// speakers running, no record announces it: the load balancer IPs are unrecorded. A record of either kind, a
// reader that sees only its own node's BGP records (the exporter's informers), either kind unreadable or absent
// (MetalLB before v0.15.0), no MetalLB annotation, or no speaker seen (AllocatedOnly): nothing is said.
func TestUnrecordedMetalLBAddresses(t *testing.T) {
	now := time.Now()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
		Annotations: map[string]string{"metallb.io/ip-allocated-from-pool": "default"}},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}}}}
	unrecorded := func(s Snapshot, svc *corev1.Service) []string {
		return s.Unrecorded(svc, append(FromAnnotations(svc.Annotations), s.AnnouncementsFor(svc.Namespace, svc.Name)...),
			[]string{"192.0.2.10"})
	}
	forbidBGP := func(c *dynamicfake.FakeDynamicClient) *dynamicfake.FakeDynamicClient {
		c.PrependReactor("list", "servicebgpstatuses", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(GVRServiceBGPStatus.GroupResource(), "")
		})
		return c
	}
	older := svc.DeepCopy()
	older.Annotations = map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "default"}
	notMetalLB := svc.DeepCopy()
	notMetalLB.Annotations = nil
	for _, c := range []struct {
		name   string
		client *dynamicfake.FakeDynamicClient
		svc    *corev1.Service
		want   []string
	}{
		{"no record", fakeDynamic(speakerPod("node-1", false)), svc, []string{"192.0.2.10"}},
		{"no record, Helm's speakers", fakeDynamic(speakerPod("node-1", true)), svc, []string{"192.0.2.10"}},
		{"no record, no speaker", fakeDynamic(), svc, nil},
		{"the former annotation", fakeDynamic(speakerPod("node-1", false)), older, []string{"192.0.2.10"}},
		{"another Service's record", fakeDynamic(l2Status("l2-api", "node-2", "shop", "api")), svc, []string{"192.0.2.10"}},
		{"a BGP record without peers", fakeDynamic(bgpStatus("bgp-web-1", "node-1", "shop", "web")), svc, []string{"192.0.2.10"}},
		{"an L2 record", fakeDynamic(l2Status("l2-web", "node-2", "shop", "web")), svc, nil},
		{"a BGP record", fakeDynamic(bgpStatus("bgp-web-3", "node-3", "shop", "web", "peer-a")), svc, nil},
		{"no ServiceBGPStatus kind", forbidBGP(fakeDynamic(speakerPod("node-1", false))), svc, nil},
		{"not MetalLB's address", fakeDynamic(speakerPod("node-1", false)), notMetalLB, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := unrecorded(List(context.Background(), c.client, DefaultCiliumNamespace, now), c.svc)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("unrecorded %v, want %v", got, c.want)
			}
		})
	}
	// The exporter's informers read only their node's BGP records: the absence of one says nothing.
	a := NewInformers(fakeDynamic(), "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	s := waitAnnouncers(t, a, time.Now(), map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	if got := unrecorded(s, svc); got != nil {
		t.Errorf("the exporter's snapshot: unrecorded %v, want none", got)
	}
}

// MetalLB used for address allocation only (its documented Calico setup: the controller allocates, no speaker
// runs, Calico advertises the addresses over BGP): no ServiceL2Status or ServiceBGPStatus exists anywhere and no
// pod carries a speaker's labels. A cluster-wide reader then calls the allocated addresses AllocatedOnly (who
// announces them is unknown), not unrecorded. Pods it may not list leave it as unsure. A speaker's pod, or any
// MetalLB status record (only speakers write them), and the addresses are MetalLB's to announce again; a node's
// informers never look.
func TestMetalLBAllocatedOnly(t *testing.T) {
	now := time.Now()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
		Annotations: map[string]string{"metallb.io/ip-allocated-from-pool": "default"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}
	ips := []string{"192.0.2.10", "2001:db8::10"}
	forbidPods := func(c *dynamicfake.FakeDynamicClient) *dynamicfake.FakeDynamicClient {
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(GVRPod.GroupResource(), "", errors.New("RBAC"))
		})
		return c
	}
	kubeVIP := svc.DeepCopy()
	kubeVIP.Annotations[AnnotationKubeVIPHost] = "node-2"
	for _, c := range []struct {
		name                string
		client              *dynamicfake.FakeDynamicClient
		svc                 *corev1.Service
		speakers            MetalLBSpeakers
		allocated, unrecord []string
	}{
		{"no speaker, no record", fakeDynamic(), svc, SpeakersNone, ips, nil},
		{"pods unreadable, no record", forbidPods(fakeDynamic()), svc, SpeakersUnread, ips, nil},
		{"a speaker's pod", fakeDynamic(speakerPod("node-1", false)), svc, SpeakersSeen, nil, ips},
		{"a Helm speaker's pod", fakeDynamic(speakerPod("node-1", true)), svc, SpeakersSeen, nil, ips},
		{"another Service's record, pods unreadable", forbidPods(fakeDynamic(l2Status("l2-api", "node-2", "shop", "api"))), svc, SpeakersSeen, nil, ips},
		{"a BGP record without peers", fakeDynamic(bgpStatus("bgp-web-1", "node-1", "shop", "web")), svc, SpeakersSeen, nil, ips},
		{"another announcer's record", fakeDynamic(), kubeVIP, SpeakersNone, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := List(context.Background(), c.client, DefaultCiliumNamespace, now)
			anns := append(FromAnnotations(c.svc.Annotations), s.AnnouncementsFor(c.svc.Namespace, c.svc.Name)...)
			if s.Speakers != c.speakers {
				t.Errorf("speakers %q, want %q", s.Speakers, c.speakers)
			}
			if got := s.AllocatedOnly(c.svc, anns, ips); !reflect.DeepEqual(got, c.allocated) {
				t.Errorf("allocated only %v, want %v", got, c.allocated)
			}
			if got := s.Unrecorded(c.svc, anns, ips); !reflect.DeepEqual(got, c.unrecord) {
				t.Errorf("unrecorded %v, want %v", got, c.unrecord)
			}
			if (s.SpeakersWhy() == "") != (c.speakers == SpeakersSeen) {
				t.Errorf("why %q with speakers %q", s.SpeakersWhy(), s.Speakers)
			}
		})
	}
	// Speakers seen by their records read no pod: the plugin lists pods only where it must.
	client := fakeDynamic(l2Status("l2-api", "node-2", "shop", "api"))
	List(context.Background(), client, DefaultCiliumNamespace, now)
	for _, act := range client.Actions() {
		if act.GetResource() == GVRPod {
			t.Errorf("listed pods with a MetalLB record read: %v", act)
		}
	}
	// A node's informers never look, whatever runs.
	a := NewInformers(fakeDynamic(), "node-1", DefaultCiliumNamespace)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(ctx)
	s := waitAnnouncers(t, a, time.Now(), map[Source]SourceState{SourceMetalLBL2: SourceOK, SourceMetalLBBGP: SourceOK, SourceCiliumL2: SourceOK, SourceCiliumL2Policy: SourceOK})
	if got := s.AllocatedOnly(svc, nil, ips); got != nil || s.Speakers != SpeakersNotLooked {
		t.Errorf("the exporter's snapshot: allocated only %v, speakers %q; want none, not looked", got, s.Speakers)
	}
}
