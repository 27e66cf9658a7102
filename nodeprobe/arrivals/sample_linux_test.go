package arrivals

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestKernelSamplesUnderAFlood: a flood far over the meter's budget makes the kernel filter pass a sample of
// the matched packets, so the kernel copies fewer into the ring than arrive (FamilyStats.Received counts what
// the filter passed); the meter says it samples and is overloaded, and its estimate of what it left out
// grows.
func TestKernelSamplesUnderAFlood(t *testing.T) {
	node, client := newPair(t)
	m := openIn(t, node, Config{BlockSize: 4096, Blocks: 64, BlockTimeout: 10 * time.Millisecond, MaxPacketRate: 100}, nil)
	d := NodeDest(UDP, false, 30053)
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{d}}); err != nil {
		t.Fatal(err)
	}
	// 100 datagrams every 20 ms: 5,000 a second, fifty times the budget, under the veth's receive backlog.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sendUDP(t, client, netip.AddrPortFrom(nodeV4, 30053), 100)
				mu.Lock()
				sent += 100
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	sentNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
	eventually(t, 15*time.Second, "sampling one in 4 or fewer", func() bool { return m.Snapshot().Families[0].Sampling >= 4 })
	before, sentBefore := m.Snapshot(), sentNow()
	time.Sleep(time.Second)
	after, sentAfter := m.Snapshot(), sentNow()
	f := after.Families[0]
	passed, arrived := f.Received-before.Families[0].Received, sentAfter-sentBefore
	t.Logf("over a second: %d datagrams sent, %d passed the filter; sampling one in %d, %d estimated left out, %d shed",
		arrived, passed, f.Sampling, f.Sampled, f.Shed)
	if arrived == 0 || passed*2 > uint64(arrived) {
		t.Errorf("the kernel passed %d of %d datagrams while sampling one in %d: want at most half", passed, arrived, before.Families[0].Sampling)
	}
	if f.Sampled <= before.Families[0].Sampled || !after.Overloaded() {
		t.Errorf("sampled estimate %d (was %d), overloaded %v: the left-out packets are not accounted",
			f.Sampled, before.Families[0].Sampled, after.Overloaded())
	}
	if c, _ := after.Dest(d); c.Attempts == 0 {
		t.Error("nothing counted while sampling: a sample must still show that attempts arrive")
	}
}

// Overloaded says whether any family has lost packets to a full ring, to the rate budget or to sampling: the
// counts are lower bounds.
func (s Snapshot) Overloaded() bool {
	for _, f := range s.Families {
		if f.Dropped > 0 || f.Shed > 0 || f.Sampled > 0 {
			return true
		}
	}
	return false
}
