package scrape

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The node's arrival totals only grow: a destination dropped from the watch (its Service deleted) takes its
// count out of the meter's snapshot, not out of the total, and one watched anew counts from zero again.
func TestArrivalTotalsMonotonic(t *testing.T) {
	a := arrivals.NodeDest(arrivals.TCP, false, 30090)
	b := arrivals.Dest{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.10"), Port: 80}
	kinds := map[arrivals.Dest]verdict.Kind{a: verdict.NodePort, b: verdict.LoadBalancerIP}
	tot := newArrivalTotals()
	t0 := time.Unix(1_800_000_000, 0)
	taken := 0
	snap := func(na, nb uint64, withB bool) *arrivals.Snapshot {
		taken++
		s := &arrivals.Snapshot{Taken: t0.Add(time.Duration(taken) * time.Second), Dests: []arrivals.DestCount{{Dest: a, Attempts: na}}}
		if withB {
			s.Dests = append(s.Dests, arrivals.DestCount{Dest: b, Attempts: nb})
		}
		return s
	}
	np, lb := ArrivalKey{"node_port", "IPv4"}, ArrivalKey{"load_balancer_ip", "IPv4"}
	steps := []struct {
		s      *arrivals.Snapshot
		np, lb uint64
	}{
		{snap(5, 7, true), 5, 7},
		{snap(9, 10, true), 9, 10},
		{snap(12, 0, false), 12, 10}, // b's Service deleted: its 10 stay counted
		{snap(13, 2, true), 13, 12},  // b watched anew, from zero: 2 more
	}
	for i, st := range steps {
		got := tot.add(st.s, kinds)
		if got[np] != st.np || got[lb] != st.lb {
			t.Errorf("step %d: node_port %d load_balancer_ip %d, want %d %d", i, got[np], got[lb], st.np, st.lb)
		}
	}
	// Two scrapes at once, the older snapshot folded second: it changes nothing (folded, its lower counts
	// would read as restarts and add 15 and 3 again).
	newer, older := snap(20, 5, true), snap(15, 3, true)
	older.Taken, newer.Taken = newer.Taken, older.Taken
	if got := tot.add(newer, kinds); got[np] != 20 || got[lb] != 15 {
		t.Errorf("newer snapshot: %d %d, want 20 15", got[np], got[lb])
	}
	if got := tot.add(older, kinds); got[np] != 20 || got[lb] != 15 {
		t.Errorf("older snapshot folded after a newer one: %d %d, want 20 15", got[np], got[lb])
	}
}

// "Dropped since" is forgotten after a gap without scrapes longer than the quiet period: the gap is unknown,
// and the old time would count it all against the grace window. A concurrent scrape older than the last
// recorded changes nothing.
func TestDroppedSinceForgottenAfterAGap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	d := verdict.Destination{Namespace: "kubelings", Service: "checkout", Protocol: "TCP", Family: "IPv4", Kind: verdict.NodePort, DestPort: 30090}
	dropped := []*ServiceResult{{Verdict: verdict.Verdict{Families: []verdict.FamilyVerdict{{Entries: []verdict.Entry{{Destination: d, Dropped: true}}}}}}}
	tot := newArrivalTotals()
	tot.recordDropped(dropped, t0)
	tot.recordDropped(dropped, t0.Add(time.Minute))
	if got := tot.droppedSince(t0.Add(90*time.Second), 2*time.Minute)[d]; !got.since.Equal(t0) {
		t.Fatalf("scraped every minute: dropped since %v, want %v", got.since, t0)
	}
	tot.recordDropped(nil, t0.Add(30*time.Second)) // an older concurrent scrape that saw nothing dropped
	if got := tot.droppedSince(t0.Add(90*time.Second), 2*time.Minute)[d]; !got.since.Equal(t0) {
		t.Fatalf("an older scrape forgot it: dropped since %v", got.since)
	}
	if got, ok := tot.droppedSince(t0.Add(10*time.Minute), 2*time.Minute)[d]; ok {
		t.Fatalf("after 9 minutes without a scrape: still dropped since %v", got.since)
	}
	tot.recordDropped(dropped, t0.Add(10*time.Minute))
	if got := tot.droppedSince(t0.Add(11*time.Minute), 2*time.Minute)[d]; !got.since.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("after the gap: dropped since %v, want the first scrape after it", got.since)
	}
}

// What the meter leaves out as pod traffic is what kube-proxy's local detector sends to every endpoint: its
// CIDR (the first of each family) or interfaces, and always the node's own addresses; no detector, no pod
// traffic (a pod's dropped attempt is lost like a client's). Unread, this node's pod CIDRs stand in.
func TestInternalSourcesFollowKubeProxysDetector(t *testing.T) {
	pod := []string{"10.244.1.0/24", "fd00:244:1::/64"}
	local := []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")}
	extra := []netip.Prefix{netip.MustParsePrefix("172.30.0.0/16")}
	own := []string{"10.0.0.1/32", "fd00::1/128"}
	for _, c := range []struct {
		name  string
		det   *nodeprobe.LocalDetector
		extra []netip.Prefix
		want  []string
		links []arrivals.LinkMatch
	}{
		{"unread: this node's pod CIDRs", nil, nil, append(own, pod...), nil},
		{"unread, with the flag", nil, extra, append([]string{"172.30.0.0/16"}, append(own, pod...)...), nil},
		{"cluster CIDR, both families", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeClusterCIDR,
			ClusterCIDRs: []string{"10.244.0.0/16", "10.96.0.0/12", "fd00:244::/32"}}, nil,
			append(own, "10.244.0.0/16", "fd00:244::/32"), nil},
		{"cluster CIDR unset: no detector", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeClusterCIDR}, nil, own, nil},
		{"node CIDR", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeNodeCIDR, ClusterCIDRs: []string{"10.0.0.0/8"}}, nil,
			append(own, pod...), nil},
		{"bridge", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeBridgeInterface, BridgeInterface: "cbr0",
			ClusterCIDRs: []string{"10.244.0.0/16"}}, nil, own, []arrivals.LinkMatch{{Name: "cbr0"}}},
		{"prefix", &nodeprobe.LocalDetector{Mode: nodeprobe.LocalModeInterfaceNamePrefix, InterfaceNamePrefix: "cali"}, nil,
			own, []arrivals.LinkMatch{{Name: "cali", Prefix: true}}},
	} {
		got, links := internalSources(c.det, pod, local, c.extra)
		var gotS []string
		for _, p := range got {
			gotS = append(gotS, p.String())
		}
		if !slices.Equal(gotS, c.want) || !slices.Equal(links, c.links) {
			t.Errorf("%s: %v %v, want %v %v", c.name, gotS, links, c.want, c.links)
		}
	}
}

// The verdict's view of a scanned destination: the single SYNs are arrivals (Attempts, Ongoing), but the run
// of repeated ones is empty, and a destination nothing else reached for the quiet period stays silent; a
// retransmitted SYN is a repeated attempt and breaks the silence.
func TestObservationOfAPortScan(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	scan := arrivals.DestCount{Dest: np, Attempts: 3, FirstSeen: now.Add(-time.Minute), ActiveSince: now.Add(-time.Minute),
		LastSeen: now.Add(-10 * time.Second), WatchedSince: now.Add(-time.Hour)}
	o := &observations{snap: &arrivals.Snapshot{Status: arrivals.StatusOK, Dests: []arrivals.DestCount{scan}}, quiet: 2 * time.Minute, now: now,
		dropped: func(verdict.Destination, types.UID) time.Time { return now.Add(-time.Hour) }}
	d := verdict.Destination{Kind: verdict.NodePort, Protocol: "TCP", Family: "IPv4", DestPort: 30090}
	got := o.Observe(d)
	if !got.Watched || got.Attempts != 3 || !got.Ongoing || !got.Repeats || got.Repeated.Attempts != 0 || got.Repeated.Ongoing || !got.Silent {
		t.Errorf("single SYNs: %+v, want 3 ongoing attempts, none repeated, silent", got)
	}
	client := scan
	client.Attempts = 5
	client.Repeated = arrivals.RepeatCount{Attempts: 2, ActiveSince: now.Add(-6 * time.Second), LastSeen: now.Add(-5 * time.Second)}
	o.snap.Dests[0] = client
	got = o.Observe(d)
	if !got.Repeated.Ongoing || got.Repeated.Attempts != 2 || !got.Repeated.LastSeen.Equal(now.Add(-5*time.Second)) || got.Silent {
		t.Errorf("a retransmitted SYN: %+v, want 2 repeated attempts, ongoing, not silent", got)
	}
}

// TestSamplingIsBlindForSilence: while the meter's filter samples, the meter is overloaded even when its
// estimate of what it left out stands still (the sources counted all in the sample, others not seen at all),
// and for the quiet period after the sample ends.
func TestSamplingIsBlindForSilence(t *testing.T) {
	tot := newArrivalTotals()
	t0 := time.Unix(1_800_000_000, 0)
	const quiet = 2 * time.Minute
	snap := func(at time.Duration, sampling uint32, sampled uint64) *arrivals.Snapshot {
		return &arrivals.Snapshot{Taken: t0.Add(at),
			Families: []arrivals.FamilyStats{{Family: "IPv4", Sampling: sampling, Sampled: sampled}, {Family: "IPv6", Sampling: 1}}}
	}
	tot.add(snap(0, 8, 100), nil)
	tot.add(snap(3*time.Minute, 8, 100), nil) // still sampling, nothing more estimated
	if !tot.overloaded(t0.Add(3*time.Minute+time.Second), quiet) {
		t.Error("sampling, the estimate standing still: not overloaded")
	}
	tot.add(snap(4*time.Minute, 1, 100), nil) // the sample over
	if !tot.overloaded(t0.Add(4*time.Minute+time.Second), quiet) {
		t.Error("not overloaded within the quiet period after the sample ended")
	}
	if tot.overloaded(t0.Add(3*time.Minute+quiet+time.Second), quiet) {
		t.Error("still overloaded a quiet period after the last snapshot that sampled")
	}
}
