package kubeview

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// informerStats is one informer's conversation with the API server, counted as kube-state-metrics counts its
// own (list_total and watch_total by result), plus when the server last answered: a quiet Service list and an
// unreachable API server both show no add, update or delete, and only this tells them apart.
type informerStats struct {
	listOK, listErr, watchOK, watchErr atomic.Uint64
	// lastSuccess is the Unix nanoseconds of the last successful list, watch opened, or watch event (bookmarks
	// included: the API server sends one about every minute on a quiet watch).
	lastSuccess atomic.Int64
	// lastEvent is the Unix nanoseconds of the last add, update or delete the informer delivered.
	lastEvent atomic.Int64
}

func (s *informerStats) success() { s.lastSuccess.Store(time.Now().UnixNano()) }

// instrumentedLW wraps the list and watch calls an informer makes, counting them and timestamping every answer.
type instrumentedLW struct {
	list   func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch  func(context.Context, metav1.ListOptions) (watch.Interface, error)
	client any // the API: whether it supports streaming lists (a fake clientset does not)
	stats  *informerStats
}

func (l *instrumentedLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	for {
		obj, err := l.list(ctx, opts)
		if err == nil {
			l.stats.listOK.Add(1)
			l.stats.success()
			return obj, nil
		}
		l.stats.listErr.Add(1)
		if !apiServerAbsent(err) || !retryPause(ctx) {
			return nil, err
		}
	}
}

func (l *instrumentedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := l.watch(ctx, opts)
		if err == nil {
			l.stats.watchOK.Add(1)
			l.stats.success()
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				// An Error event is the server refusing the watch (say, 410 Gone): the reflector relists, which
				// counts.
				if e.Type != watch.Error {
					l.stats.success()
				}
				return e, true
			}), nil
		}
		l.stats.watchErr.Add(1)
		if !apiServerAbsent(err) || !retryPause(ctx) {
			return nil, err
		}
	}
}

// apiRetryInterval is how often a list or watch is retried while nothing answers at the API server's address.
// Left to the reflector, retries back off to between 30 and 60 seconds, and a change made just after the API
// server returns would show only that much later. A refused or unanswered connection costs the API server
// nothing; an answer it gives (429 from priority and fairness, 5xx) goes back to the reflector, whose backoff
// then spreads the nodes' retries.
const apiRetryInterval = time.Second

// apiServerAbsent tells a connection that reached no API server from an answer the API server gave.
func apiServerAbsent(err error) bool {
	var ne net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// retryPause waits apiRetryInterval plus up to as much again of jitter, so that a DaemonSet's exporters do not
// all come back in the same instant. False when ctx ends first.
func retryPause(ctx context.Context) bool {
	t := time.NewTimer(apiRetryInterval + rand.N(apiRetryInterval))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// List and Watch satisfy the older cache.ListerWatcher; the reflector uses the context variants above.
func (l *instrumentedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *instrumentedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported tells the reflector what the factory's own list-watch would: a fake clientset
// cannot stream the initial list.
func (l *instrumentedLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.client)
}

// newInformer is one resource's informer over api, through an instrumented list-watch, with no resync
// (kube-proxy resyncs its handlers every 15 minutes from its cache; the exporter computes its view at each
// scrape and has nothing to resync) and transform applied before anything is stored.
func newInformer(api API, resource string, example runtime.Object, stats *informerStats, tweak func(*metav1.ListOptions),
	transform cache.TransformFunc) cache.SharedIndexInformer {
	return newRetryingInformer(api, resource, example, stats, tweak, nil, transform)
}

// newRetryingInformer is newInformer whose list is asked once more, with tweak applied again, when retry says
// the apiserver's error calls for it (a selector it does not know).
func newRetryingInformer(api API, resource string, example runtime.Object, stats *informerStats,
	tweak func(*metav1.ListOptions), retry func(error) bool, transform cache.TransformFunc) cache.SharedIndexInformer {
	lw := &instrumentedLW{client: api, stats: stats,
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			asked := o
			tweak(&asked)
			obj, err := api.List(ctx, resource, asked)
			if err != nil && retry != nil && retry(err) {
				asked = o
				tweak(&asked)
				obj, err = api.List(ctx, resource, asked)
			}
			return obj, err
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return api.Watch(ctx, resource, o)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{
		ResyncPeriod: 0,
		Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	_ = inf.SetTransform(transform) // fails only once the informer runs
	return inf
}

func servicesInformer(api API, stats *informerStats, transform cache.TransformFunc) cache.SharedIndexInformer {
	f := &serviceFilter{}
	return newRetryingInformer(api, ResourceServices, &corev1.Service{}, stats, f.listOptions, f.refused, transform)
}

func endpointSlicesInformer(api API, stats *informerStats, transform cache.TransformFunc) cache.SharedIndexInformer {
	return newInformer(api, ResourceEndpointSlices, &discoveryv1.EndpointSlice{}, stats, endpointSliceListOptions, transform)
}

// nodeInformer watches only this node's Node object: a node agent must not watch every Node of a large cluster.
func nodeInformer(api API, stats *informerStats, selector string) cache.SharedIndexInformer {
	return newInformer(api, ResourceNodes, &corev1.Node{}, stats, func(o *metav1.ListOptions) { o.FieldSelector = selector },
		transformNode)
}

// status reads one informer's bookkeeping for the self-metrics.
func (s *informerStats) status(resource string, synced bool) InformerStatus {
	st := InformerStatus{Resource: resource, Synced: synced,
		ListSuccess: s.listOK.Load(), ListError: s.listErr.Load(),
		WatchSuccess: s.watchOK.Load(), WatchError: s.watchErr.Load()}
	if ns := s.lastEvent.Load(); ns != 0 {
		st.LastEvent = time.Unix(0, ns)
	}
	if ns := s.lastSuccess.Load(); ns != 0 {
		st.LastSuccess = time.Unix(0, ns)
	}
	return st
}
