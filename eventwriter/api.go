package eventwriter

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Clients is what the writer asks of the API server: its Lease, the Events it writes, the peers' EndpointSlices
// and the Services the Events regard. DynamicClients serves them over the dynamic client the exporter already
// has: client-go's typed clients register every API group's types (and its leader election package every
// group's informers), which would add 26 MB to the binary and 12 MB to the resident set of every node's
// exporter, for a writer one of them runs.
//
// Pods and ReplicaSets are the Services' pods and their ReplicaSets, which each note's workload and preStop are
// read from (nil: not read).
type Clients struct {
	Events      Events
	Leases      Leases
	Slices      EndpointSlices
	Services    Services
	Pods        Pods
	ReplicaSets ReplicaSets
}

// Leases gets, creates and updates coordination.k8s.io/v1 Leases.
type Leases interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// Events creates events.k8s.io/v1 Events.
type Events interface {
	Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error)
}

// EndpointSlices lists discovery.k8s.io/v1 EndpointSlices.
type EndpointSlices interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]discoveryv1.EndpointSlice, error)
}

// Services lists core/v1 Services.
type Services interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]corev1.Service, error)
}

// Pods lists core/v1 Pods.
type Pods interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]corev1.Pod, error)
}

// ReplicaSets gets apps/v1 ReplicaSets.
type ReplicaSets interface {
	Get(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error)
}

// DynamicClients serves Clients over d.
func DynamicClients(d dynamic.Interface) Clients {
	return Clients{
		Events:      dynEvents{resource[eventsv1.Event]{d, eventsv1.SchemeGroupVersion.WithResource("events"), "Event"}},
		Leases:      dynLeases{resource[coordinationv1.Lease]{d, coordinationv1.SchemeGroupVersion.WithResource("leases"), "Lease"}},
		Slices:      dynList[discoveryv1.EndpointSlice]{resource[discoveryv1.EndpointSlice]{d, discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), "EndpointSlice"}},
		Services:    dynList[corev1.Service]{resource[corev1.Service]{d, corev1.SchemeGroupVersion.WithResource("services"), "Service"}},
		Pods:        dynList[corev1.Pod]{resource[corev1.Pod]{d, corev1.SchemeGroupVersion.WithResource("pods"), "Pod"}},
		ReplicaSets: dynGet[appsv1.ReplicaSet]{resource[appsv1.ReplicaSet]{d, appsv1.SchemeGroupVersion.WithResource("replicasets"), "ReplicaSet"}},
	}
}

// resource is one namespaced resource of the dynamic client, converted to and from its typed object T.
type resource[T any] struct {
	d    dynamic.Interface
	gvr  schema.GroupVersionResource
	kind string
}

func (r resource[T]) typed(u *unstructured.Unstructured) (*T, error) {
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, fmt.Errorf("decoding a %s: %w", r.kind, err)
	}
	return &out, nil
}

func (r resource[T]) unstructured(obj *T) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding a %s: %w", r.kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(r.gvr.GroupVersion().String())
	u.SetKind(r.kind)
	return u, nil
}

// create sends obj to namespace and returns what the API server stored.
func (r resource[T]) create(ctx context.Context, namespace string, obj *T) (*T, error) {
	u, err := r.unstructured(obj)
	if err != nil {
		return nil, err
	}
	got, err := r.d.Resource(r.gvr).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return r.typed(got)
}

// get reads namespace/name.
func (r resource[T]) get(ctx context.Context, namespace, name string) (*T, error) {
	u, err := r.d.Resource(r.gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return r.typed(u)
}

type dynGet[T any] struct{ r resource[T] }

func (c dynGet[T]) Get(ctx context.Context, namespace, name string) (*T, error) {
	return c.r.get(ctx, namespace, name)
}

type dynLeases struct {
	r resource[coordinationv1.Lease]
}

func (c dynLeases) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return c.r.get(ctx, namespace, name)
}

func (c dynLeases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.r.create(ctx, lease.Namespace, lease)
}

func (c dynLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	u, err := c.r.unstructured(lease)
	if err != nil {
		return nil, err
	}
	got, err := c.r.d.Resource(c.r.gvr).Namespace(lease.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return c.r.typed(got)
}

type dynEvents struct{ r resource[eventsv1.Event] }

func (c dynEvents) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return c.r.create(ctx, ev.Namespace, ev)
}

type dynList[T any] struct{ r resource[T] }

func (c dynList[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]T, error) {
	list, err := c.r.d.Resource(c.r.gvr).Namespace(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(list.Items))
	for i := range list.Items {
		t, err := c.r.typed(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	return out, nil
}
