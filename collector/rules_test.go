package collector

import (
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/rules"
)

// kube-proxy rewrites the filter table on every sync, which resets the DROP rule's counters. The exported
// counter must still only go up, and count the packets after each reset.
func TestDropCounterSurvivesResets(t *testing.T) {
	r := NewMemory()
	sp := counterKey{namespace: "kubelings", name: "checkout", port: "http", protocol: "TCP"}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		raw  uint64
		at   time.Duration
		want uint64
	}{
		{raw: 5, at: 0, want: 5},                        // first sight: the rule's count so far
		{raw: 9, at: time.Second, want: 9},              // +4
		{raw: 9, at: 2 * time.Second, want: 9},          // nothing new
		{raw: 2, at: 3 * time.Second, want: 11},         // kube-proxy rewrote the rule: 2 new packets
		{raw: 7, at: 2500 * time.Millisecond, want: 11}, // an older snapshot (a racing scrape) changes nothing
		{raw: 7, at: 4 * time.Second, want: 16},         // +5
		{raw: 0, at: 5 * time.Second, want: 16},         // reset to zero
	}
	var last uint64
	for i, s := range steps {
		got := r.countDrops(sp, s.raw, t0.Add(s.at))
		if got != s.want {
			t.Fatalf("step %d: total %d, want %d", i, got, s.want)
		}
		if got < last {
			t.Fatalf("step %d: counter went down from %d to %d", i, last, got)
		}
		last = got
	}
	r.forget(map[counterKey]bool{})
	if len(r.counters) != 0 {
		t.Errorf("forget kept %d counters", len(r.counters))
	}
}

func TestPortMismatch(t *testing.T) {
	cases := []struct {
		name string
		api  kubeview.PortEndpoints
		st   rules.PortState
		want bool
	}{
		{"agree: local endpoints", kubeview.PortEndpoints{Local: 2, ClusterWide: true}, rules.PortState{Programmed: true, LocalEndpoints: 2}, false},
		{"agree: drop", kubeview.PortEndpoints{Local: 0, ClusterWide: true}, rules.PortState{Programmed: true, Drop: true}, false},
		{"wrong hostname-override: API local, rules drop", kubeview.PortEndpoints{Local: 1, ClusterWide: true}, rules.PortState{Programmed: true, Drop: true}, true},
		{"stale rules: API none, rules forward", kubeview.PortEndpoints{Local: 0, ClusterWide: true}, rules.PortState{Programmed: true, LocalEndpoints: 1}, true},
		{"count differs", kubeview.PortEndpoints{Local: 3, ClusterWide: true}, rules.PortState{Programmed: true, LocalEndpoints: 1}, true},
		{"no endpoints anywhere is not judged", kubeview.PortEndpoints{Local: 0, ClusterWide: false}, rules.PortState{Programmed: true, Reject: true}, false},
	}
	// No NodePort and no external address yet (allocateLoadBalancerNodePorts false, LB pending): nothing to drop.
	if portMismatch(kubeview.PortEndpoints{Local: 1, ClusterWide: true}, rules.PortState{Programmed: true}, false) {
		t.Error("an unreachable port is never a mismatch")
	}
	for _, c := range cases {
		if got := portMismatch(c.api, c.st, true); got != c.want {
			t.Errorf("%s: mismatch %v, want %v", c.name, got, c.want)
		}
	}
}
