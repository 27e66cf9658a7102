package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// pageSize bounds each list call, so a large cluster is read in pages rather than one huge response.
const pageSize = 500

// listAll reads every object of one resource through client-go's pager: pages of pageSize, and one full list
// when a continue token expires in between (what the apiserver answers to a token older than its compaction).
func listAll[T any, PT interface {
	*T
	runtime.Object
}, L runtime.Object](ctx context.Context, what string, list func(context.Context, metav1.ListOptions) (L, error)) ([]PT, error) {
	return listSome[T, PT](ctx, what, metav1.ListOptions{}, nil, list)
}

// listSome is listAll with the apiserver's selectors in opts, and page (when not nil) told of each page read.
func listSome[T any, PT interface {
	*T
	runtime.Object
}, L runtime.Object](ctx context.Context, what string, opts metav1.ListOptions, page func(what string, items int),
	list func(context.Context, metav1.ListOptions) (L, error)) ([]PT, error) {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		l, err := list(ctx, opts)
		if err == nil && page != nil {
			page(what, meta.LenList(l))
		}
		return l, err
	})
	p.PageSize = pageSize
	var out []PT
	err := p.EachListItem(ctx, opts, func(o runtime.Object) error {
		item, ok := o.(PT)
		if !ok {
			return fmt.Errorf("a %T in the list, want a %T", o, item)
		}
		out = append(out, item)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// loadLive reads what the placement story needs from the apiserver: Nodes cluster-wide, the rest in namespace
// ("" for all namespaces). Read-only: the verbs the localtraffic-audit ClusterRole grants (list).
func loadLive(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error) {
	c := &placement.Cluster{Live: true}
	var err error
	core, apps := cs.CoreV1(), cs.AppsV1()
	if c.Nodes, err = listAll[corev1.Node](ctx, "nodes", core.Nodes().List); err != nil {
		return nil, err
	}
	if c.Services, err = listAll[corev1.Service](ctx, "services", core.Services(namespace).List); err != nil {
		return nil, err
	}
	if c.EndpointSlices, err = listAll[discoveryv1.EndpointSlice](ctx, "endpointslices", cs.DiscoveryV1().EndpointSlices(namespace).List); err != nil {
		return nil, err
	}
	if c.Pods, err = listAll[corev1.Pod](ctx, "pods", core.Pods(namespace).List); err != nil {
		return nil, err
	}
	if c.ReplicaSets, err = listAll[appsv1.ReplicaSet](ctx, "replicasets", apps.ReplicaSets(namespace).List); err != nil {
		return nil, err
	}
	if c.Deployments, err = listAll[appsv1.Deployment](ctx, "deployments", apps.Deployments(namespace).List); err != nil {
		return nil, err
	}
	if c.StatefulSets, err = listAll[appsv1.StatefulSet](ctx, "statefulsets", apps.StatefulSets(namespace).List); err != nil {
		return nil, err
	}
	if c.DaemonSets, err = listAll[appsv1.DaemonSet](ctx, "daemonsets", apps.DaemonSets(namespace).List); err != nil {
		return nil, err
	}
	if c.HPAs, err = listAll[autoscalingv2.HorizontalPodAutoscaler](ctx, "horizontalpodautoscalers",
		cs.AutoscalingV2().HorizontalPodAutoscalers(namespace).List); err != nil {
		return nil, err
	}
	if c.PDBs, err = listAll[policyv1.PodDisruptionBudget](ctx, "poddisruptionbudgets", cs.PolicyV1().PodDisruptionBudgets(namespace).List); err != nil {
		return nil, err
	}
	return c, nil
}

// statusQuery is what status reads: the nodes --node-selector selects (the one --node names, when it names
// one), the Services -l selects (the one named, when a SERVICE is given, with its EndpointSlices alone), all
// through the apiserver's selectors.
type statusQuery struct {
	nodeSelector, selector, service, node string
	progress                              *progress // nil: no progress line
}

// load reads only what status decides from — Nodes, Services and EndpointSlices — the three lists at once:
// on a large cluster the Pods and workloads the audit reads are most of the bytes, and status needs none of
// them.
func (q statusQuery) load(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error) {
	c := &placement.Cluster{Live: true}
	nodes := metav1.ListOptions{LabelSelector: q.nodeSelector}
	if q.node != "" {
		nodes.FieldSelector = fields.OneTermEqualSelector("metadata.name", q.node).String()
	}
	services := metav1.ListOptions{LabelSelector: q.selector}
	var slices metav1.ListOptions
	if q.service != "" {
		services.FieldSelector = fields.OneTermEqualSelector("metadata.name", q.service).String()
		slices.LabelSelector = labels.Set{discoveryv1.LabelServiceName: q.service}.String()
	}
	var page func(string, int)
	if q.progress != nil {
		page = q.progress.page
		defer q.progress.done()
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { c.Nodes, errs[0] = listSome[corev1.Node](ctx, "nodes", nodes, page, cs.CoreV1().Nodes().List) })
	wg.Go(func() {
		c.Services, errs[1] = listSome[corev1.Service](ctx, "services", services, page, cs.CoreV1().Services(namespace).List)
	})
	wg.Go(func() {
		c.EndpointSlices, errs[2] = listSome[discoveryv1.EndpointSlice](ctx, "endpointslices", slices, page,
			cs.DiscoveryV1().EndpointSlices(namespace).List)
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// progress is the line status keeps up to date on a terminal's stderr while it reads: what, how many pages and
// objects so far. It is erased when the reading is done, so the output starts on a clean screen.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	order []string
	pages map[string]int
	items map[string]int
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, pages: map[string]int{}, items: map[string]int{}}
}

func (p *progress) page(what string, items int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pages[what]; !ok {
		p.order = append(p.order, what)
	}
	p.pages[what]++
	p.items[what] += items
	parts := make([]string, 0, len(p.order))
	for _, w := range p.order {
		parts = append(parts, fmt.Sprintf("%s %d (%d pages)", w, p.items[w], p.pages[w]))
	}
	fmt.Fprintf(p.w, "\r\x1b[Kreading %s", strings.Join(parts, ", "))
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) > 0 {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
