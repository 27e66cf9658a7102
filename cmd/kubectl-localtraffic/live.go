package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/kubeview/placement"
)

// pageSize bounds each list call, so a large cluster is read in pages rather than one huge response.
const pageSize = 500

// listAll pages through one resource.
func listAll[L any, T any](ctx context.Context, what string, list func(context.Context, metav1.ListOptions) (L, error),
	items func(L) []T, cont func(L) string) ([]*T, error) {
	var out []*T
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		l, err := list(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
		its := items(l)
		for i := range its {
			out = append(out, &its[i])
		}
		if opts.Continue = cont(l); opts.Continue == "" {
			return out, nil
		}
	}
}

// loadLive reads what the placement story needs from the apiserver: Nodes cluster-wide, the rest in namespace
// ("" for all namespaces). Read-only: the verbs the localtraffic-audit ClusterRole grants (list).
func loadLive(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error) {
	c := &placement.Cluster{Live: true}
	var err error
	core, apps := cs.CoreV1(), cs.AppsV1()
	if c.Nodes, err = listAll(ctx, "nodes", core.Nodes().List,
		func(l *corev1.NodeList) []corev1.Node { return l.Items }, func(l *corev1.NodeList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.Services, err = listAll(ctx, "services", core.Services(namespace).List,
		func(l *corev1.ServiceList) []corev1.Service { return l.Items }, func(l *corev1.ServiceList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.EndpointSlices, err = listAll(ctx, "endpointslices", cs.DiscoveryV1().EndpointSlices(namespace).List,
		func(l *discoveryv1.EndpointSliceList) []discoveryv1.EndpointSlice { return l.Items },
		func(l *discoveryv1.EndpointSliceList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.Pods, err = listAll(ctx, "pods", core.Pods(namespace).List,
		func(l *corev1.PodList) []corev1.Pod { return l.Items }, func(l *corev1.PodList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.ReplicaSets, err = listAll(ctx, "replicasets", apps.ReplicaSets(namespace).List,
		func(l *appsv1.ReplicaSetList) []appsv1.ReplicaSet { return l.Items }, func(l *appsv1.ReplicaSetList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.Deployments, err = listAll(ctx, "deployments", apps.Deployments(namespace).List,
		func(l *appsv1.DeploymentList) []appsv1.Deployment { return l.Items }, func(l *appsv1.DeploymentList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.StatefulSets, err = listAll(ctx, "statefulsets", apps.StatefulSets(namespace).List,
		func(l *appsv1.StatefulSetList) []appsv1.StatefulSet { return l.Items }, func(l *appsv1.StatefulSetList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.DaemonSets, err = listAll(ctx, "daemonsets", apps.DaemonSets(namespace).List,
		func(l *appsv1.DaemonSetList) []appsv1.DaemonSet { return l.Items }, func(l *appsv1.DaemonSetList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.HPAs, err = listAll(ctx, "horizontalpodautoscalers", cs.AutoscalingV2().HorizontalPodAutoscalers(namespace).List,
		func(l *autoscalingv2.HorizontalPodAutoscalerList) []autoscalingv2.HorizontalPodAutoscaler {
			return l.Items
		},
		func(l *autoscalingv2.HorizontalPodAutoscalerList) string { return l.Continue }); err != nil {
		return nil, err
	}
	if c.PDBs, err = listAll(ctx, "poddisruptionbudgets", cs.PolicyV1().PodDisruptionBudgets(namespace).List,
		func(l *policyv1.PodDisruptionBudgetList) []policyv1.PodDisruptionBudget { return l.Items },
		func(l *policyv1.PodDisruptionBudgetList) string { return l.Continue }); err != nil {
		return nil, err
	}
	return c, nil
}
