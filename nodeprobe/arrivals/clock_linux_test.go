package arrivals

import (
	"strings"
	"testing"
	"time"
)

// TestKernelArrivalTimesOnTheMeterTimeline: real packets, stamped by the kernel with the wall clock, come out
// of Snapshot on the meter's timeline: with Go's monotonic reading (so the collector's ages ignore wall clock
// steps), after the moment they were sent and no later than the snapshot.
func TestKernelArrivalTimesOnTheMeterTimeline(t *testing.T) {
	tb := newTestbed(t)
	m := openIn(t, tb.node, Config{BlockTimeout: 20 * time.Millisecond}, nil)
	if err := m.Watch(testbedWatch()); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	settle(t, m, tb.client, nodeV4, nodeV6)
	s := m.Snapshot()
	for _, v6 := range []bool{false, true} {
		c, ok := s.Dest(NodeDest(UDP, v6, markerPort))
		if !ok || c.Attempts == 0 {
			t.Fatalf("IPv6 %v: marker not counted", v6)
		}
		if !strings.Contains(c.LastSeen.String(), "m=") {
			t.Errorf("IPv6 %v: last seen %v carries no monotonic reading", v6, c.LastSeen)
		}
		if c.LastSeen.Before(sent) || c.LastSeen.After(s.Taken) {
			t.Errorf("IPv6 %v: last seen %v outside [%v, %v]", v6, c.LastSeen, sent, s.Taken)
		}
	}
}
