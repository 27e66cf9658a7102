package kubeview

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// bigSlice is one EndpointSlice as the controller writes it at its 100-endpoint cap: one endpoint on node-1,
// the rest spread over other nodes, with the fields real slices carry (zone, hints, target refs).
func bigSlice(i int) *discoveryv1.EndpointSlice {
	s := slice("shop", fmt.Sprintf("svc-%d", i), fmt.Sprintf("svc-%d-abc", i), nil)
	for j := 0; j < 100; j++ {
		node := fmt.Sprintf("node-%d", 2+j)
		if j == 0 {
			node = "node-1"
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i%250, j/250, j%250)},
			NodeName:   ptr.To(node),
			Zone:       ptr.To("zone-a"),
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("svc-%d-pod-%d", i, j)},
		})
	}
	return s
}

// retained measures the heap kept by n slices after keep has been applied to each, per slice.
func retained(b *testing.B, n int, keep func(*discoveryv1.EndpointSlice) any) float64 {
	b.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	store := make([]any, n)
	for i := range store {
		store[i] = keep(bigSlice(i))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkSliceMemory compares what the informer cache keeps per EndpointSlice of 100 endpoints (one local)
// with and without the transform: the exporter's memory must not grow with endpoints on other nodes.
func BenchmarkSliceMemory(b *testing.B) {
	transform := TransformEndpointSlice("node-1")
	for _, c := range []struct {
		name string
		keep func(*discoveryv1.EndpointSlice) any
	}{
		{"raw", func(s *discoveryv1.EndpointSlice) any { return s }},
		{"transformed", func(s *discoveryv1.EndpointSlice) any { out, _ := transform(s); return out }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var per float64
			for i := 0; i < b.N; i++ {
				per = retained(b, 1000, c.keep)
			}
			b.ReportMetric(per, "retained-B/slice")
		})
	}
}

// BenchmarkServiceState is the per-Service cost of a scrape's API view: 4 slices of 100 endpoints each.
func BenchmarkServiceState(b *testing.B) {
	transform := TransformEndpointSlice("node-1")
	svc := localService("shop", "svc-0", corev1.ServiceTypeNodePort)
	var slices []*discoveryv1.EndpointSlice
	for i := 0; i < 4; i++ {
		out, _ := transform(bigSlice(i))
		s := out.(*discoveryv1.EndpointSlice)
		s.Labels[labelServiceName] = "svc-0"
		slices = append(slices, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = ServiceStateOf(svc, slices)
	}
}
