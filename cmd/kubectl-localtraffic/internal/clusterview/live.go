// Package clusterview is how the plugin's verbs reach the cluster as the user: the API clients from
// cli-runtime's kubeconfig flags (with kubectl's auth providers), the paged lists of the live cluster, the
// announcers' records, a port-forward to a pod, and the completion of node names.
package clusterview

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// pageSize bounds each list call, so a large cluster is read in pages rather than one huge response.
const pageSize = 500

// ListAll reads every object of one resource through client-go's pager: pages of pageSize, and one full list
// when a continue token expires in between (what the apiserver answers to a token older than its compaction).
func ListAll[T any, PT interface {
	*T
	runtime.Object
}, L runtime.Object](ctx context.Context, what string, list func(context.Context, metav1.ListOptions) (L, error)) ([]PT, error) {
	return ListSome[T, PT](ctx, what, metav1.ListOptions{}, nil, list)
}

// ListSome is ListAll with the apiserver's selectors in opts, and page (when not nil) told of each page read.
func ListSome[T any, PT interface {
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

// LoadLive reads what the placement story needs from the apiserver: Nodes cluster-wide, the rest in namespace
// ("" for all namespaces). Read-only: the verbs the localtraffic-audit ClusterRole grants (list).
func LoadLive(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error) {
	c := &placement.Cluster{Live: true}
	var err error
	core, apps := cs.CoreV1(), cs.AppsV1()
	if c.Nodes, err = ListAll[corev1.Node](ctx, "nodes", core.Nodes().List); err != nil {
		return nil, err
	}
	if c.Services, err = ListAll[corev1.Service](ctx, "services", core.Services(namespace).List); err != nil {
		return nil, err
	}
	if c.EndpointSlices, err = ListAll[discoveryv1.EndpointSlice](ctx, "endpointslices", cs.DiscoveryV1().EndpointSlices(namespace).List); err != nil {
		return nil, err
	}
	if c.Pods, err = ListAll[corev1.Pod](ctx, "pods", core.Pods(namespace).List); err != nil {
		return nil, err
	}
	if c.ReplicaSets, err = ListAll[appsv1.ReplicaSet](ctx, "replicasets", apps.ReplicaSets(namespace).List); err != nil {
		return nil, err
	}
	if c.Deployments, err = ListAll[appsv1.Deployment](ctx, "deployments", apps.Deployments(namespace).List); err != nil {
		return nil, err
	}
	if c.StatefulSets, err = ListAll[appsv1.StatefulSet](ctx, "statefulsets", apps.StatefulSets(namespace).List); err != nil {
		return nil, err
	}
	if c.DaemonSets, err = ListAll[appsv1.DaemonSet](ctx, "daemonsets", apps.DaemonSets(namespace).List); err != nil {
		return nil, err
	}
	if c.HPAs, err = ListAll[autoscalingv2.HorizontalPodAutoscaler](ctx, "horizontalpodautoscalers",
		cs.AutoscalingV2().HorizontalPodAutoscalers(namespace).List); err != nil {
		return nil, err
	}
	if c.PDBs, err = ListAll[policyv1.PodDisruptionBudget](ctx, "poddisruptionbudgets", cs.PolicyV1().PodDisruptionBudgets(namespace).List); err != nil {
		return nil, err
	}
	return c, nil
}

// LoadWorkloads adds to c the Pods and the workload controllers (ReplicaSets, Deployments, StatefulSets,
// DaemonSets) of the given namespaces, each once: what a Service's pods' owners' templates are read from, for
// a verb that read only Nodes, Services and EndpointSlices first (status) and needs the templates of a few
// Services' namespaces afterwards. The same list calls as LoadLive's.
func LoadWorkloads(ctx context.Context, cs kubernetes.Interface, namespaces []string, c *placement.Cluster) error {
	core, apps := cs.CoreV1(), cs.AppsV1()
	for _, ns := range slices.Compact(slices.Sorted(slices.Values(namespaces))) {
		pods, err := ListAll[corev1.Pod](ctx, "pods in "+ns, core.Pods(ns).List)
		if err != nil {
			return err
		}
		rss, err := ListAll[appsv1.ReplicaSet](ctx, "replicasets in "+ns, apps.ReplicaSets(ns).List)
		if err != nil {
			return err
		}
		ds, err := ListAll[appsv1.Deployment](ctx, "deployments in "+ns, apps.Deployments(ns).List)
		if err != nil {
			return err
		}
		sts, err := ListAll[appsv1.StatefulSet](ctx, "statefulsets in "+ns, apps.StatefulSets(ns).List)
		if err != nil {
			return err
		}
		dss, err := ListAll[appsv1.DaemonSet](ctx, "daemonsets in "+ns, apps.DaemonSets(ns).List)
		if err != nil {
			return err
		}
		c.Pods, c.ReplicaSets, c.Deployments = append(c.Pods, pods...), append(c.ReplicaSets, rss...), append(c.Deployments, ds...)
		c.StatefulSets, c.DaemonSets = append(c.StatefulSets, sts...), append(c.DaemonSets, dss...)
	}
	return nil
}
