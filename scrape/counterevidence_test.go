package scrape

import (
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// Without the arrivals meter (--no-arrivals.enabled), kube-proxy's NodePort drop rule counter is the evidence
// of lost traffic at a NodePort the node is declared in rotation for. Gather 1 is the counter's baseline
// (not_observed: nothing seen yet); gather 2 it grew: traffic_lost; it holds for the loss hold (15 minutes by
// default, longer than the 1-minute evidence window here) without growth, then falls back to not_observed. A
// rule for all destinations at once (kube-proxy 1.24 and older) names no destination: no evidence.
func TestNodePortCounterEvidence(t *testing.T) {
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	at := time.Unix(1700000000, 0)
	snapAt := func(packets uint64, t time.Time, all bool) *kernelrules.Snapshot {
		rule := kernelrules.DropRule{Port: 30090, Packets: packets, Counted: true}
		if all {
			rule = kernelrules.DropRule{AllDestinations: true, Packets: packets, Counted: true}
		}
		return kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, t,
			map[kernelrules.ServicePort]kernelrules.PortState{sp: {Programmed: true, Drop: true, DropPackets: packets,
				Drops: []kernelrules.DropRule{rule}}})
	}
	reader := &scrapetest.Reader{Snap: snapAt(0, at, false)}
	setup := gatherSetup{view: view, reader: reader, kept: &keptGatherer{}, window: time.Minute, addrs: scrapetest.Addrs{"127.0.0.1"}}
	steps := []struct {
		packets uint64
		after   time.Duration
		all     bool
		want    verdict.Reason
	}{
		{3, 0, false, verdict.ReasonNotObserved},                               // a baseline: counted before this exporter looked
		{5, 30 * time.Second, false, verdict.ReasonTrafficLost},                // grew: clients arrive and are dropped
		{5, 14 * time.Minute, false, verdict.ReasonTrafficLost},                // held: within the loss hold of the last growth
		{5, 16 * time.Minute, false, verdict.ReasonNotObserved},                // the hold is over
		{9, 17 * time.Minute, true, verdict.ReasonNotObserved},                 // kube-proxy ≤1.24's rule for all destinations: a new rule, a baseline
		{20, 17*time.Minute + 30*time.Second, true, verdict.ReasonNotObserved}, // it grew, but names no destination
	}
	for i, s := range steps {
		reader.Snap = snapAt(s.packets, at.Add(s.after), s.all)
		r := resultOf(t, setup.gather(t), "checkout")
		if !r.Verdict.Blackhole || r.Verdict.Reason != s.want {
			t.Errorf("step %d: blackhole %v reason %s, want a blackhole for %s", i, r.Verdict.Blackhole, r.Verdict.Reason, s.want)
		}
	}
}
