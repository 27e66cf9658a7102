package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return list(ctx, opts) })
	p.PageSize = pageSize
	var out []PT
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
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

// loadStatus reads only what status decides from — Nodes, Services and EndpointSlices — the three lists at once:
// on a large cluster the Pods and workloads the audit reads are most of the bytes, and status needs none of them.
func loadStatus(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error) {
	c := &placement.Cluster{Live: true}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { c.Nodes, errs[0] = listAll[corev1.Node](ctx, "nodes", cs.CoreV1().Nodes().List) })
	wg.Go(func() {
		c.Services, errs[1] = listAll[corev1.Service](ctx, "services", cs.CoreV1().Services(namespace).List)
	})
	wg.Go(func() {
		c.EndpointSlices, errs[2] = listAll[discoveryv1.EndpointSlice](ctx, "endpointslices", cs.DiscoveryV1().EndpointSlices(namespace).List)
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}
