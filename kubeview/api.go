package kubeview

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// API is the part of the Kubernetes API the view reads, by resource (ResourceServices, ResourceEndpointSlices,
// ResourceNodes), cluster-wide: lists and watches for the informers, and a get for the start-up check of the
// node name. NewClient's implementation speaks to the API server; package kubeview/kubeviewtest adapts a
// client-go clientset (a fake one in tests).
//
// Why not the clientset itself: client-go's clientset and informer factory link every API group's client,
// informer, lister, apply configuration and scheme registration into the binary, and the exporter reads two
// groups. Leaving them out is about 10 MiB of resident code and data per node (docs/performance.md).
type API interface {
	List(ctx context.Context, resource string, opts metav1.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, resource string, opts metav1.ListOptions) (watch.Interface, error)
	Get(ctx context.Context, resource, name string) (runtime.Object, error)
}

// restAPI is API over REST clients for core/v1 and discovery/v1 sharing one HTTP client, with a scheme of
// those two groups only.
type restAPI struct {
	core, discovery *rest.RESTClient
	params          runtime.ParameterCodec
}

// newScheme knows core/v1, discovery/v1 and the meta types every group version carries (ListOptions,
// WatchEvent, Status).
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("scheme core/v1: %w", err)
	}
	if err := discoveryv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("scheme discovery/v1: %w", err)
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s, nil
}

// newRESTAPI builds the REST clients from cfg (ClientConfig's).
func newRESTAPI(cfg *rest.Config) (*restAPI, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client transport: %w", err)
	}
	client := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("API client for %s: %w", gv, err)
		}
		return rc, nil
	}
	a := &restAPI{params: runtime.NewParameterCodec(scheme)}
	if a.core, err = client(corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, err
	}
	if a.discovery, err = client(discoveryv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	return a, nil
}

// resource returns the REST client serving resource and an empty object and list of its kind.
func (a *restAPI) resource(resource string) (*rest.RESTClient, runtime.Object, runtime.Object, error) {
	switch resource {
	case ResourceServices:
		return a.core, &corev1.Service{}, &corev1.ServiceList{}, nil
	case ResourceEndpointSlices:
		return a.discovery, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{}, nil
	case ResourceNodes:
		return a.core, &corev1.Node{}, &corev1.NodeList{}, nil
	}
	return nil, nil, nil, fmt.Errorf("the exporter reads no resource %q", resource)
}

func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// List and Watch do what client-go's typed clients do (gentype.Client), cluster-wide.
func (a *restAPI) List(ctx context.Context, resource string, opts metav1.ListOptions) (runtime.Object, error) {
	c, _, list, err := a.resource(resource)
	if err != nil {
		return nil, err
	}
	err = c.Get().Resource(resource).VersionedParams(&opts, a.params).Timeout(timeoutOf(opts)).Do(ctx).Into(list)
	if err != nil {
		return nil, err
	}
	return list, nil
}

func (a *restAPI) Watch(ctx context.Context, resource string, opts metav1.ListOptions) (watch.Interface, error) {
	c, _, _, err := a.resource(resource)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	return c.Get().Resource(resource).VersionedParams(&opts, a.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

func (a *restAPI) Get(ctx context.Context, resource, name string) (runtime.Object, error) {
	c, obj, _, err := a.resource(resource)
	if err != nil {
		return nil, err
	}
	if err := c.Get().Resource(resource).Name(name).Do(ctx).Into(obj); err != nil {
		return nil, err
	}
	return obj, nil
}
