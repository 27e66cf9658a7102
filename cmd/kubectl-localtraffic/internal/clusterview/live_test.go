package clusterview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// pagingClientset is a fake clientset whose list calls page as the apiserver's do (the fake's own return
// everything at once, whatever the limit): at most Limit items and a continue token for the rest. It records
// each list call's options by resource, and fails the calls fail returns an error for.
type pagingClientset struct {
	*fake.Clientset
	mu    sync.Mutex
	calls map[string][]metav1.ListOptions
}

func newPagingClientset(t *testing.T, fail func(resource string, opts metav1.ListOptions) error, objs ...runtime.Object) *pagingClientset {
	t.Helper()
	cs := &pagingClientset{Clientset: fake.NewClientset(objs...), calls: map[string][]metav1.ListOptions{}}
	cs.PrependReactor("list", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		la := action.(k8stesting.ListActionImpl)
		opts, resource := la.ListOptions, la.GetResource().Resource
		cs.mu.Lock()
		cs.calls[resource] = append(cs.calls[resource], opts)
		cs.mu.Unlock()
		if fail != nil {
			if err := fail(resource, opts); err != nil {
				return true, nil, err
			}
		}
		list, err := cs.Tracker().List(la.GetResource(), la.GetKind(), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return true, nil, err
		}
		start := 0
		if opts.Continue != "" {
			if start, err = strconv.Atoi(opts.Continue); err != nil {
				return true, nil, fmt.Errorf("continue token %q is not ours", opts.Continue)
			}
		}
		end, next := len(items), ""
		if opts.Limit > 0 && int64(end-start) > opts.Limit {
			end = start + int(opts.Limit)
			next = strconv.Itoa(end)
		}
		if err := meta.SetList(list, items[start:end]); err != nil {
			return true, nil, err
		}
		list.(metav1.ListInterface).SetContinue(next)
		return true, list, nil
	})
	return cs
}

// crowd is n pods no Service selects, in their own namespace.
func crowd(n int) []runtime.Object {
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "crowd", Name: fmt.Sprintf("crowd-%04d", i)}})
	}
	return objs
}

// Live mode reads every page: 1,203 pods come in three lists of at most pageSize, each continuing where the
// last stopped; the resources of one page are listed once, with the limit.
func TestLiveReadsEveryPage(t *testing.T) {
	cs := newPagingClientset(t, nil, append(clitest.DrillObjects(true), crowd(1200)...)...)
	c, err := LoadLive(context.Background(), cs, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pods) != 1203 || len(c.Nodes) != 3 || len(c.Services) != 1 || len(c.Deployments) != 1 || len(c.ReplicaSets) != 1 || len(c.EndpointSlices) != 1 {
		t.Errorf("read %d pods (want 1203), %d nodes, %d Services, %d Deployments, %d ReplicaSets, %d EndpointSlices",
			len(c.Pods), len(c.Nodes), len(c.Services), len(c.Deployments), len(c.ReplicaSets), len(c.EndpointSlices))
	}
	var names []string
	for _, p := range c.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if slices.Sort(names); len(slices.Compact(names)) != len(c.Pods) {
		t.Errorf("a pod read twice: %d names for %d pods", len(names), len(c.Pods))
	}
	var pages []string
	for _, o := range cs.calls["pods"] {
		pages = append(pages, fmt.Sprintf("limit %d continue %q", o.Limit, o.Continue))
	}
	if want := []string{`limit 500 continue ""`, `limit 500 continue "500"`, `limit 500 continue "1000"`}; !slices.Equal(pages, want) {
		t.Errorf("pod list calls %v, want %v", pages, want)
	}
	for _, r := range []string{"nodes", "services", "endpointslices", "replicasets", "deployments", "statefulsets", "daemonsets",
		"horizontalpodautoscalers", "poddisruptionbudgets"} {
		if calls := cs.calls[r]; len(calls) != 1 || calls[0].Limit != pageSize {
			t.Errorf("%s: list calls %v, want one with limit %d", r, calls, pageSize)
		}
	}
}

// A page that fails fails the read, named by its resource, with nothing half-read in the result.
func TestLivePageError(t *testing.T) {
	denied := errors.New(`pods is forbidden: User "ci" cannot list resource "pods"`)
	cs := newPagingClientset(t, func(resource string, opts metav1.ListOptions) error {
		if resource == "pods" && opts.Continue != "" {
			return denied
		}
		return nil
	}, append(clitest.DrillObjects(true), crowd(600)...)...)
	c, err := LoadLive(context.Background(), cs, "")
	if c != nil || !errors.Is(err, denied) || !strings.HasPrefix(err.Error(), "listing pods: ") {
		t.Errorf("cluster %v, error %v: want none and the second page's error, wrapped", c, err)
	}
	if len(cs.calls["pods"]) != 2 {
		t.Errorf("pod list calls %v, want the first page and the failing second", cs.calls["pods"])
	}
}
