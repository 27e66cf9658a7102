package scrape

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// BenchmarkModelDecide: what deciding one Service costs the node model (ns and allocations per decision), with
// the meter on and nothing arriving, as in the safety sweep that decides every Service once a minute.
func BenchmarkModelDecide(b *testing.B) {
	const n = 1000
	// Every tenth NodePort Service is served locally, as in the CPU benchmark's cluster.
	tr := &mapTracker{states: map[string]kubeview.ServiceState{}}
	ports := map[kernelrules.ServicePort]kernelrules.PortState{}
	for i := range n {
		local := 0
		if i%10 == 0 {
			local = 1
		}
		st := scrapetest.NodePortService(local, scrapetest.Family(corev1.IPv4Protocol, local, true))
		st.Name = fmt.Sprintf("web-%d", i)
		tr.states[st.Namespace+"/"+st.Name] = st
		ps := kernelrules.PortState{Programmed: true, LocalEndpoints: local}
		if local == 0 {
			ps.Drop, ps.Drops = true, []kernelrules.DropRule{{Port: int32(30000 + i)}}
		}
		ports[kernelrules.ServicePort{Namespace: st.Namespace, Name: st.Name, Port: "http", Protocol: "TCP"}] = ps
	}
	now := time.Unix(1_800_000_000, 0)
	rules := &scrapetest.Reader{Snap: kernelrules.NewSnapshot(kernelrules.ModeNFTables, "", []string{kernelrules.FamilyIPv4}, now, ports)}
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: now, Counts: map[arrivals.Dest]arrivals.DestCount{}}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: rules, Addrs: scrapetest.Addrs{"10.250.0.12"},
		Meter: meter, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	clock := func() time.Time { return now }
	m := NewModel(g, ModelConfig{Tracker: tr, Synchronous: true, Now: clock, RulesEvery: time.Hour, DecideAll: true})
	m.Step(context.Background(), now)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(time.Second)
		meter.Mu.Lock()
		meter.Now = now
		meter.Mu.Unlock()
		m.Step(context.Background(), now)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/decision")
}
