package kubeview

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
)

// trackerSettled updates the tracker until its snapshot equals the view's (the informers deliver events
// asynchronously, so the two meet once every event has arrived) and returns the keys every Update reported.
func trackerSettled(t *testing.T, v *View, tr *Tracker, now time.Time) map[string]bool {
	t.Helper()
	reported := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		changed, err := tr.Update(now)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range changed {
			reported[k] = true
		}
		want, err := v.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if v.announcers != nil {
			// The view reads leases at the wall clock; the tracker at now. Compare at the tracker's time.
			want = snapshotAt(t, v, now)
		}
		got := tr.Snapshot()
		if reflect.DeepEqual(got, want) {
			return reported
		}
		if time.Now().After(deadline) {
			t.Fatalf("tracker snapshot\n%+v\ndiffers from the view's\n%+v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// snapshotAt is View.Snapshot with the announcers read at now.
func snapshotAt(t *testing.T, v *View, now time.Time) Snapshot {
	t.Helper()
	snap := Snapshot{Node: v.nodeState()}
	ann := v.announcers.Snapshot(now)
	for _, obj := range v.informer[ResourceServices].GetStore().List() {
		svc := obj.(*corev1.Service)
		if !IsExternalLocal(svc) {
			continue
		}
		st, err := v.serviceState(svc, ann)
		if err != nil {
			t.Fatal(err)
		}
		snap.Services = append(snap.Services, st)
	}
	slices.SortFunc(snap.Services, func(a, b ServiceState) int {
		return compareServiceKeys(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	snap.Announcers = ann.States
	annotationStates(snap.Announcers, snap.Services)
	return snap
}

// TestTrackerFollowsRandomChanges: after any sequence of Service, EndpointSlice and Node changes, the tracker's
// snapshot is the view's, and every Service whose state changed was reported changed.
func TestTrackerFollowsRandomChanges(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			client := fake.NewClientset(nodeObj("node-1"))
			v := New(kubeviewtest.NewAPI(client), "node-1")
			woken := make(chan struct{}, 1)
			tr := v.NewTracker()
			v.OnChange(func() {
				select {
				case woken <- struct{}{}:
				default:
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			v.Start(ctx)
			if err := v.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			trackerSettled(t, v, tr, time.Now())
			before := tr.Snapshot()
			for step := range 25 {
				mutate(ctx, t, client, rng, step)
				// Let the event reach the informers' stores (a change may also be none at all: then wait out the
				// bound), so that the tracker is asked after it and must report it.
				for wait := time.Now().Add(200 * time.Millisecond); time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
					if snap, err := v.Snapshot(); err == nil && len(changedKeys(before, snap)) > 0 {
						break
					}
				}
				reported := trackerSettled(t, v, tr, time.Now())
				after := tr.Snapshot()
				for _, k := range changedKeys(before, after) {
					if !reported[k] {
						t.Fatalf("step %d: %s changed but was not reported (reported %v)", step, k, reported)
					}
				}
				before = after
			}
			select {
			case <-woken:
			default:
				t.Error("the tracker never woke its owner")
			}
		})
	}
}

// changedKeys lists the Services that differ between two snapshots (added, removed or changed).
func changedKeys(a, b Snapshot) []string {
	byKey := func(s Snapshot) map[string]ServiceState {
		m := map[string]ServiceState{}
		for _, st := range s.Services {
			m[st.Namespace+"/"+st.Name] = st
		}
		return m
	}
	am, bm := byKey(a), byKey(b)
	var out []string
	for k, st := range am {
		if o, ok := bm[k]; !ok || !reflect.DeepEqual(o, st) {
			out = append(out, k)
		}
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// mutate makes one random change: a Service created, retyped, moved to the Cluster policy or deleted, an
// EndpointSlice's endpoints moved between nodes, or this Node relabelled.
func mutate(ctx context.Context, t *testing.T, client *fake.Clientset, rng *rand.Rand, step int) {
	t.Helper()
	ns, name := "ns", fmt.Sprintf("svc-%d", rng.IntN(6))
	svcs := client.CoreV1().Services(ns)
	sl := client.DiscoveryV1().EndpointSlices(ns)
	var err error
	switch rng.IntN(6) {
	case 0, 1: // create or replace the Service
		typ := []corev1.ServiceType{corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}[rng.IntN(2)]
		s := localService(ns, name, typ)
		if rng.IntN(4) == 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
		if _, err = svcs.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			_, err = svcs.Create(ctx, s, metav1.CreateOptions{})
		}
	case 2:
		if err = svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			err = nil // already gone
		}
	case 3, 4: // the Service's endpoints, some on this node
		var eps []ep
		for i := range rng.IntN(4) {
			eps = append(eps, readyOn(fmt.Sprintf("10.244.%d.%d", i, step%250+1), fmt.Sprintf("node-%d", 1+rng.IntN(3))))
		}
		s := slice(ns, name, name+"-abc", nil, eps...)
		if _, err = sl.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			_, err = sl.Create(ctx, s, metav1.CreateOptions{})
		}
	case 5:
		n := nodeObj("node-1")
		if rng.IntN(2) == 0 {
			n.Labels = map[string]string{LabelExcludeFromLB: "true"}
		}
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
}

// TestTrackerAnnouncers: announcer records and lease expiry reach exactly the Service they name; a lease that
// stops being renewed expires at its time without any event, and NextChange says when: a lease duration after
// the reader first saw it, though its holder's clock wrote a renewTime an hour old.
func TestTrackerAnnouncers(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	web := localService("shop", "web", corev1.ServiceTypeLoadBalancer)
	cart := localService("shop", "cart", corev1.ServiceTypeLoadBalancer)
	dyn := fakeDynamic(l2Status("l2-web", "node-2", "shop", "web"),
		lease(announce.DefaultCiliumNamespace, announce.CiliumLeaseName("shop", "cart"), "node-3", now.Add(-time.Hour), 15))
	client := fake.NewClientset(nodeObj("node-1"), web, cart)
	v := New(kubeviewtest.NewAPI(client), "node-1", WithAnnouncers(announce.NewInformers(dyn, "node-1", announce.DefaultCiliumNamespace)))
	tr := v.NewTracker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.Start(ctx)
	if err := v.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitAnnouncers(t, v.announcers, now, map[announce.Source]announce.SourceState{announce.SourceMetalLBL2: announce.SourceOK, announce.SourceMetalLBBGP: announce.SourceOK, announce.SourceCiliumL2: announce.SourceOK, announce.SourceCiliumL2Policy: announce.SourceOK})
	trackerSettled(t, v, tr, now)
	if got, want := tr.NextChange(), now.Add(15*time.Second); !got.Equal(want) {
		t.Errorf("NextChange %s, want the lease's expiry %s", got, want)
	}
	// The lease expires with no event: an Update at its time reports the Service, and only it.
	changed, err := tr.Update(now.Add(15 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"shop/cart"}) {
		t.Errorf("at the lease's expiry changed %v, want [shop/cart]", changed)
	}
	if st, _ := tr.State("shop/cart"); len(st.Announcements) != 1 || !st.Announcements[0].Expired {
		t.Errorf("cart's announcement after expiry: %+v", st.Announcements)
	}
	// A moved MetalLB holder: web alone.
	gvr := announce.GVRServiceL2Status
	u := l2Status("l2-web", "node-1", "shop", "web")
	if _, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(20 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := findService(snapshotAt(t, v, later), "shop", "web"); len(st.Announcements) > 0 && st.Announcements[0].Node == "node-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the view never saw web's new holder")
		}
		time.Sleep(5 * time.Millisecond)
	}
	reported := trackerSettled(t, v, tr, later)
	if !reported["shop/web"] || reported["shop/cart"] {
		t.Errorf("a MetalLB record of web reported %v", reported)
	}
}

// TestTrackerCiliumUnheld: a Local LoadBalancer Service a Cilium L2 announcement policy selects by its labels
// (which the view keeps for it), whose lease was released: the tracker wakes a lease duration after it first
// saw it so (NextChange), with no event, and the Service's load balancer IP is then unrecorded (verdict calls
// it unannounced); so are the externalIPs of a NodePort Service the policy selects for them; a Service no
// policy selects is not.
func TestTrackerCiliumUnheld(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	web := localService("shop", "web", corev1.ServiceTypeLoadBalancer)
	web.Labels = map[string]string{"l2": "cilium", "team": "shop"}
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	api := localService("shop", "api", corev1.ServiceTypeLoadBalancer)
	api.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.11"}}
	reports := localService("shop", "reports", corev1.ServiceTypeNodePort)
	reports.Labels = map[string]string{"l2": "cilium"}
	reports.Spec.ExternalIPs = []string{"192.0.2.30"}
	policy := unstr(announce.GVRCiliumL2Policy, "CiliumL2AnnouncementPolicy", "", "l2", nil, map[string]any{"spec": map[string]any{
		"serviceSelector": map[string]any{"matchLabels": map[string]any{"l2": "cilium"}}, "loadBalancerIPs": true, "externalIPs": true}})
	dyn := fakeDynamic(policy,
		lease(announce.DefaultCiliumNamespace, announce.CiliumLeaseName("shop", "web"), "", now, 1),
		lease(announce.DefaultCiliumNamespace, announce.CiliumLeaseName("shop", "api"), "", now, 1),
		lease(announce.DefaultCiliumNamespace, announce.CiliumLeaseName("shop", "reports"), "", now, 1))
	client := fake.NewClientset(nodeObj("node-1"), web, api, reports)
	informers := announce.NewInformers(dyn, "node-1", announce.DefaultCiliumNamespace)
	v := New(kubeviewtest.NewAPI(client), "node-1", WithAnnouncers(informers))
	tr := v.NewTracker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.Start(ctx)
	if err := v.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitAnnouncers(t, v.announcers, now, map[announce.Source]announce.SourceState{announce.SourceMetalLBL2: announce.SourceOK,
		announce.SourceMetalLBBGP: announce.SourceOK, announce.SourceCiliumL2: announce.SourceOK, announce.SourceCiliumL2Policy: announce.SourceOK})
	trackerSettled(t, v, tr, now)
	if st, _ := tr.State("shop/web"); len(st.UnrecordedIPs) != 0 {
		t.Errorf("web unrecorded %v within the lease duration", st.UnrecordedIPs)
	}
	at := tr.NextChange()
	if want := now.Add(announce.DefaultCiliumLeaseDuration); at.Before(now) || at.After(want) {
		t.Fatalf("NextChange %s, want within Cilium's default lease duration of %s", at, now)
	}
	changed, err := tr.Update(at)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(changed)
	if !slices.Equal(changed, []string{"shop/reports", "shop/web"}) {
		t.Errorf("at the end of the lease duration changed %v, want [shop/reports shop/web]", changed)
	}
	if st, _ := tr.State("shop/web"); !slices.Equal(st.UnrecordedIPs, []string{"192.0.2.10"}) {
		t.Errorf("web unrecorded %v, want [192.0.2.10]", st.UnrecordedIPs)
	}
	if st, _ := tr.State("shop/reports"); !slices.Equal(st.UnrecordedIPs, []string{"192.0.2.30"}) {
		t.Errorf("reports unrecorded %v, want [192.0.2.30]", st.UnrecordedIPs)
	}
	if st, _ := tr.State("shop/api"); len(st.UnrecordedIPs) != 0 {
		t.Errorf("api, which no policy selects, unrecorded %v", st.UnrecordedIPs)
	}
	if !tr.NextChange().IsZero() {
		t.Errorf("NextChange %s after the clock ran out, want none", tr.NextChange())
	}
}
