package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// statusQuery is what status reads: the nodes --node-selector selects (the one --node names, when it names
// one), the Services -l selects (the one named, when a SERVICE is given, with its EndpointSlices alone), all
// through the apiserver's selectors.
type statusQuery struct {
	nodeSelector, selector, service, node string
	progress                              *progress // nil: no progress line
}

// load reads only what status decides from — Nodes, Services and EndpointSlices — the three lists at once:
// on a large cluster the Pods and workloads the audit reads are most of the bytes, and status decides from none
// of them (the preStop advice reads those of the few namespaces it needs afterwards: clusterview.LoadWorkloads).
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
	wg.Go(func() {
		c.Nodes, errs[0] = clusterview.ListSome[corev1.Node](ctx, "nodes", nodes, page, cs.CoreV1().Nodes().List)
	})
	wg.Go(func() {
		c.Services, errs[1] = clusterview.ListSome[corev1.Service](ctx, "services", services, page, cs.CoreV1().Services(namespace).List)
	})
	wg.Go(func() {
		c.EndpointSlices, errs[2] = clusterview.ListSome[discoveryv1.EndpointSlice](ctx, "endpointslices", slices, page,
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
