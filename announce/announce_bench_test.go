package announce

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// BenchmarkAnnouncerRecordMemory: what the informer cache keeps per announcer object, as the API server sends
// it (a ServiceL2Status with its managedFields, a Cilium lease) and after the transform.
func BenchmarkAnnouncerRecordMemory(b *testing.B) {
	withManagedFields := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{
			"manager": "speaker", "operation": "Update", "apiVersion": "metallb.io/v1beta1", "time": "2026-12-03T10:00:00Z",
			"fieldsType": "FieldsV1", "subresource": "status",
			"fieldsV1": map[string]any{"f:status": map[string]any{".": map[string]any{}, "f:interfaces": map[string]any{},
				"f:node": map[string]any{}, "f:serviceName": map[string]any{}, "f:serviceNamespace": map[string]any{}}},
		}}
		u.Object["metadata"].(map[string]any)["uid"] = "0b8b6c1e-5f2e-4f7a-9d1c-3a1e2b4c5d6e"
		u.Object["metadata"].(map[string]any)["creationTimestamp"] = "2026-12-03T10:00:00Z"
		return u
	}
	for _, c := range []struct {
		name      string
		obj       func(i int) *unstructured.Unstructured
		transform func(any) (any, error)
	}{
		{"servicel2status", func(i int) *unstructured.Unstructured {
			return withManagedFields(l2Status(fmt.Sprintf("l2-%d", i), "node-2", "shop", fmt.Sprintf("svc-%d", i)))
		}, transformL2Status},
		{"lease", func(i int) *unstructured.Unstructured {
			return withManagedFields(lease("kube-system", CiliumLeaseName("shop", fmt.Sprintf("svc-%d", i)), "node-2", time.Now(), 15))
		}, transformLease},
	} {
		for _, mode := range []string{"raw", "transformed"} {
			b.Run(c.name+"/"+mode, func(b *testing.B) {
				var per float64
				for i := 0; i < b.N; i++ {
					const n = 2000
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					store := make([]any, n)
					for j := range store {
						var o any = c.obj(j)
						if mode == "transformed" {
							o, _ = c.transform(o)
						}
						store[j] = o
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					runtime.KeepAlive(store)
					per = float64(after.HeapAlloc-before.HeapAlloc) / n
				}
				b.ReportMetric(per, "retained-B/object")
			})
		}
	}
}

// BenchmarkAnnouncerSnapshot is a scrape's announcer work at 2,000 LoadBalancer Services, each with a
// ServiceL2Status and a Cilium lease: the snapshot of the stores and every Service's announcements.
func BenchmarkAnnouncerSnapshot(b *testing.B) {
	const n = 2000
	s := Snapshot{States: map[Source]SourceState{}, byService: map[string][]Announcement{}, leases: map[string]leaseRecord{}}
	var objs []*unstructured.Unstructured
	names := make([]string, n)
	for i := 0; i < n; i++ {
		names[i] = fmt.Sprintf("svc-%d", i)
		u, _ := transformL2Status(l2Status(fmt.Sprintf("l2-%d", i), "node-2", "shop", fmt.Sprintf("svc-%d", i)))
		l, _ := transformLease(lease("kube-system", CiliumLeaseName("shop", fmt.Sprintf("svc-%d", i)), "node-3", time.Now(), 15))
		objs = append(objs, u.(*unstructured.Unstructured), l.(*unstructured.Unstructured))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(s.byService)
		clear(s.leases)
		for j, u := range objs {
			src := SourceMetalLBL2
			if j%2 == 1 {
				src = SourceCiliumL2
			}
			s.addRecord(src, u, "node-1")
		}
		for _, name := range names {
			_ = s.AnnouncementsFor("shop", name)
		}
	}
}
