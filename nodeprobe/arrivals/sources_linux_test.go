package arrivals

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestKernelTellsCheckersFromClients: on a real kernel, a TCP checker on the second client's link opens a
// connection to the dropped NodePort every 2 s (each retransmitted once by the kernel before the check gives
// up), and a client on the first link connects at an irregular cadence. The meter names the checker, counts
// its SYNs and retransmissions as arrivals, and counts the client's attempts alone as clients.
func TestKernelTellsCheckersFromClients(t *testing.T) {
	tb := newTestbed(t)
	m := openIn(t, tb.node, Config{BlockTimeout: 20 * time.Millisecond}, nil)
	if err := m.Watch(testbedWatch()); err != nil {
		t.Fatal(err)
	}
	d := NodeDest(TCP, false, 30090)
	const checks = 10
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for i := range checks {
			if i > 0 {
				<-tick.C
			}
			// Dropped: the SYN and its retransmission 1 s later, then the check times out.
			if err := dialTCP(t, tb.client2, netip.AddrPortFrom(node2V4, 30090), 1200*time.Millisecond); !isTimeout(err) {
				t.Errorf("check %d: %v, want a timeout", i, err)
			}
		}
	}()
	// Five attempts: four off every clock might still begin two clocks (two checkers behind one address).
	gaps := []time.Duration{300 * time.Millisecond, 1700 * time.Millisecond, 800 * time.Millisecond, 2600 * time.Millisecond, 1200 * time.Millisecond}
	for _, gap := range gaps {
		time.Sleep(gap)
		if err := dialTCP(t, tb.client, netip.AddrPortFrom(nodeV4, 30090), 500*time.Millisecond); !isTimeout(err) {
			t.Fatalf("client: %v, want a timeout", err)
		}
	}
	wg.Wait()
	settle(t, m, tb.client, nodeV4, nodeV6)
	c, _ := m.Snapshot().Dest(d)
	if len(c.Checkers) != 1 || c.Checkers[0].Addr != netip.MustParseAddr("198.51.100.1") {
		t.Fatalf("checkers %+v, want the checker 198.51.100.1", c.Checkers)
	}
	ch := c.Checkers[0]
	if ch.Interval < 1900*time.Millisecond || ch.Interval > 2100*time.Millisecond || ch.Attempts != 2*checks {
		t.Errorf("checker %+v: want every 2s, %d SYNs (each check retransmitted once)", ch, 2*checks)
	}
	if !c.SetAside || c.Clients.Attempts != uint64(len(gaps)) || c.Attempts != uint64(2*checks+len(gaps)) {
		t.Errorf("clients %+v of %d attempts, want the client's %d of %d", c.Clients, c.Attempts, len(gaps), 2*checks+len(gaps))
	}
}
