package placement

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// benchCluster is a live cluster of 100 nodes, services Local NodePort Services in 50 namespaces, each with a
// Deployment of podsPer replicas (one ReplicaSet, its pods, one EndpointSlice), half of them spread, a tenth
// pinned, a tenth autoscaled, a tenth with a budget: the shape `kubectl localtraffic audit -A` reads.
func benchCluster(services, podsPer int) *Cluster {
	c := &Cluster{Nodes: SyntheticNodes(100), Live: true}
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%d", i)
		svc := nodePortService(name)
		svc.Namespace = fmt.Sprintf("ns-%d", i%50)
		svc.Spec.Ports[0].NodePort = int32(30000 + i%2768)
		var mods []func(*appsv1.Deployment)
		switch {
		case i%10 == 0:
			mods = append(mods, pinnedTo("node-1"))
		case i%2 == 0:
			mods = append(mods, drillFix)
		}
		d := deployment(name, int32(podsPer), mods...)
		d.Namespace = svc.Namespace
		var on []string
		for j := 0; j < podsPer; j++ {
			on = append(on, fmt.Sprintf("node-%d", (i*7+j*13)%100+1))
		}
		pods, rss, slice := readyPods(d, svc, on...)
		for _, p := range pods {
			p.Namespace = svc.Namespace
		}
		rss[0].Namespace, slice.Namespace = svc.Namespace, svc.Namespace
		c.Services = append(c.Services, svc)
		c.Deployments = append(c.Deployments, d)
		c.ReplicaSets = append(c.ReplicaSets, rss...)
		c.Pods = append(c.Pods, pods...)
		c.EndpointSlices = append(c.EndpointSlices, slice)
		if i%10 == 1 {
			h := hpa(name, 2)
			h.Namespace = svc.Namespace
			c.HPAs = append(c.HPAs, h)
		}
		if i%10 == 2 {
			p := pdb(name, intstr.FromInt32(1))
			p.Namespace = svc.Namespace
			c.PDBs = append(c.PDBs, p)
		}
	}
	return c
}

// BenchmarkAudit: audit (live mode, status included) of 5,000 Services with 50,000 pods on 100 nodes.
func BenchmarkAudit(b *testing.B) {
	c := benchCluster(5000, 10)
	b.ResetTimer()
	b.ReportAllocs()
	for b.Loop() {
		rep := Audit(c)
		if len(rep.Services) != 5000 {
			b.Fatalf("%d services audited", len(rep.Services))
		}
	}
}

// BenchmarkStatus: the status grid alone for the same cluster.
func BenchmarkStatus(b *testing.B) {
	c := benchCluster(5000, 10)
	b.ResetTimer()
	b.ReportAllocs()
	for b.Loop() {
		if st := Status(c); len(st) != 5000 {
			b.Fatalf("%d statuses", len(st))
		}
	}
}
