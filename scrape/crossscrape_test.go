package scrape

import (
	"testing"
	"time"
)

// kube-proxy rewrites the filter table on every sync, which resets the DROP rule's counters. The exported
// counter must still only go up, and count the packets after each reset.
func TestDropCounterSurvivesResets(t *testing.T) {
	r := newDropTotals()
	sp := counterKey{namespace: "kubelings", name: "checkout", port: "http", protocol: "TCP"}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		raw  uint64
		at   time.Duration
		want uint64
	}{
		{raw: 5, at: 0, want: 0},                       // first sight: a baseline (counted before the exporter started)
		{raw: 9, at: time.Second, want: 4},             // +4
		{raw: 9, at: 2 * time.Second, want: 4},         // nothing new
		{raw: 2, at: 3 * time.Second, want: 6},         // kube-proxy rewrote the rule: 2 new packets
		{raw: 7, at: 2500 * time.Millisecond, want: 6}, // an older snapshot (a racing scrape) changes nothing
		{raw: 7, at: 4 * time.Second, want: 11},        // +5
		{raw: 0, at: 5 * time.Second, want: 11},        // reset to zero
	}
	var last uint64
	for i, s := range steps {
		got := r.count(sp, s.raw, t0.Add(s.at))
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

// After an exporter restart kube-proxy's rules still hold what they counted before: the first value seen is
// a baseline, for the monotonic total and for the externalIP evidence alike. Growth after it counts.
func TestCountersSeenFirstAreBaselines(t *testing.T) {
	growth, drops := newRuleGrowth(), newDropTotals()
	t0 := time.Unix(1000, 0)
	k := ruleKey{counterKey: counterKey{namespace: "kubelings", name: "reports", port: "http", protocol: "TCP"},
		family: "IPv4", address: "192.0.2.70", port: 80}
	if grew := growth.observe(k, 500, t0); !grew.IsZero() {
		t.Errorf("a counter of 500 seen first grew at %v, want never", grew)
	}
	if grew := growth.observe(k, 500, t0.Add(time.Second)); !grew.IsZero() {
		t.Errorf("an unchanged counter grew at %v", grew)
	}
	if grew := growth.observe(k, 501, t0.Add(2*time.Second)); !grew.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("one more packet: grew at %v", grew)
	}
	// kube-proxy rewrote the rule (reset) and a packet came: growth.
	if grew := growth.observe(k, 1, t0.Add(3*time.Second)); !grew.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("packet after a reset: grew at %v", grew)
	}
	c := counterKey{namespace: "kubelings", name: "reports", port: "http", protocol: "TCP", family: "IPv4"}
	if got := drops.count(c, 500, t0); got != 0 {
		t.Errorf("total at first sight of 500: %d, want 0", got)
	}
	if got := drops.count(c, 503, t0.Add(time.Second)); got != 3 {
		t.Errorf("total after 3 more: %d, want 3", got)
	}
}
