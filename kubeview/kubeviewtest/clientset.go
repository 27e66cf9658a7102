// Package kubeviewtest is test support for kubeview's users: it adapts a client-go clientset to kubeview.API,
// so that tests run kubeview's informers over client-go's fake one. Neither binary imports it: the exporter
// uses kubeview.NewClient, which links two API groups instead of all of them, and the plugin reads the objects
// itself.
package kubeviewtest

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"
)

// The resources kubeview reads (kubeview.ResourceServices, …). Not imported from kubeview, so that kubeview's
// own tests can use this package.
const (
	services       = "services"
	endpointSlices = "endpointslices"
	nodes          = "nodes"
)

// API is a clientset seen as a kubeview.API.
type API struct{ client kubernetes.Interface }

// NewAPI wraps client.
func NewAPI(client kubernetes.Interface) *API { return &API{client: client} }

// List lists resource in every namespace.
func (a *API) List(ctx context.Context, resource string, opts metav1.ListOptions) (runtime.Object, error) {
	switch resource {
	case services:
		return a.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
	case endpointSlices:
		return a.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, opts)
	case nodes:
		return a.client.CoreV1().Nodes().List(ctx, opts)
	}
	return nil, fmt.Errorf("no resource %q", resource)
}

// Watch watches resource in every namespace.
func (a *API) Watch(ctx context.Context, resource string, opts metav1.ListOptions) (watch.Interface, error) {
	switch resource {
	case services:
		return a.client.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, opts)
	case endpointSlices:
		return a.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, opts)
	case nodes:
		return a.client.CoreV1().Nodes().Watch(ctx, opts)
	}
	return nil, fmt.Errorf("no resource %q", resource)
}

// Get gets the cluster-scoped object name (a Node).
func (a *API) Get(ctx context.Context, resource, name string) (runtime.Object, error) {
	if resource != nodes {
		return nil, fmt.Errorf("get of %q: only nodes", resource)
	}
	return a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// IsWatchListSemanticsUnSupported passes on what the clientset says: client-go's fake one cannot stream lists.
func (a *API) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(a.client)
}
