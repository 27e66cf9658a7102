package eventwriter

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// DynamicClients, what the exporter runs, makes the calls the writer's tests make through the typed fake
// (clientsOf): typed objects in and out, the API server's errors as they come.
func TestDynamicClients(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme, discoveryv1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	node := "node-a"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "exporters-a", Namespace: "lt", Labels: map[string]string{discoveryv1.LabelServiceName: "exporters"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node}},
		Ports:       []discoveryv1.EndpointPort{{Port: new(int32(9746))}},
	}
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		eventsv1.SchemeGroupVersion.WithResource("events"):            "EventList",
		coordinationv1.SchemeGroupVersion.WithResource("leases"):      "LeaseList",
		discoveryv1.SchemeGroupVersion.WithResource("endpointslices"): "EndpointSliceList",
		corev1.SchemeGroupVersion.WithResource("pods"):                "PodList",
		appsv1.SchemeGroupVersion.WithResource("replicasets"):         "ReplicaSetList",
		corev1.SchemeGroupVersion.WithResource("services"):            "ServiceList",
	}, web.DeepCopy(), slice,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"app": "web"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5f", Namespace: "shop",
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web"}}}})
	c := DynamicClients(d)

	if _, err := c.Leases.Get(ctx, "lt", "events"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a missing Lease: %v, want NotFound", err)
	}
	holder := "writer-a"
	lease, err := c.Leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "lt"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		t.Fatalf("Create Lease: %+v, %v", lease, err)
	}
	lease.Annotations = map[string]string{CursorsAnnotation: `{}`}
	if _, err := c.Leases.Update(ctx, lease); err != nil {
		t.Fatalf("Update Lease: %v", err)
	}
	got, err := c.Leases.Get(ctx, "lt", "events")
	if err != nil || got.Annotations[CursorsAnnotation] != `{}` || *got.Spec.HolderIdentity != holder {
		t.Fatalf("Get Lease after the update: %+v, %v", got, err)
	}

	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "shop"}, Note: "a note",
		Regarding: corev1.ObjectReference{Kind: "Service", Name: "web", UID: web.UID}}
	if _, err := c.Events.Create(ctx, ev); err != nil {
		t.Fatalf("Create Event: %v", err)
	}
	if _, err := c.Events.Create(ctx, ev); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("Create of the same Event again: %v, want AlreadyExists", err)
	}

	slices, err := c.Slices.List(ctx, "lt", metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=exporters"})
	if err != nil || len(slices) != 1 || len(slices[0].Endpoints) != 1 || slices[0].Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Fatalf("List EndpointSlices: %+v, %v", slices, err)
	}
	pods, err := c.Pods.List(ctx, "shop", metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods) != 1 || pods[0].Name != "web-1" {
		t.Fatalf("List Pods: %+v, %v", pods, err)
	}
	rs, err := c.ReplicaSets.Get(ctx, "shop", "web-5f")
	if err != nil || len(rs.OwnerReferences) != 1 || rs.OwnerReferences[0].Name != "web" {
		t.Fatalf("Get ReplicaSet: %+v, %v", rs, err)
	}
	svcs, err := c.Services.List(ctx, "shop", metav1.ListOptions{})
	if err != nil || len(svcs) != 1 || svcs[0].UID != web.UID {
		t.Fatalf("List Services: %+v, %v", svcs, err)
	}
}
