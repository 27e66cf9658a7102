package arrivals

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestKernelSamplesUnderAFlood: a flood far over the meter's budget, from 128 sources, makes the kernel filter
// pass a sample of the sources, so the kernel copies fewer packets into the ring than arrive
// (FamilyStats.Received counts what the filter passed); the meter says it samples and is overloaded, and its
// estimate of what it left out grows. Beside the flood, a source the sample holds is counted whole, every
// datagram, and one the sample leaves out is not counted at all: a source keeps its cadence or is not seen.
func TestKernelSamplesUnderAFlood(t *testing.T) {
	node, client := newPair(t)
	m := openIn(t, node, Config{BlockSize: 4096, Blocks: 64, BlockTimeout: 10 * time.Millisecond, MaxPacketRate: 1000}, nil)
	flood, held, left := NodeDest(UDP, false, 30053), NodeDest(UDP, false, 30054), NodeDest(UDP, false, 30055)
	if err := m.Watch(Watch{NodeAddrs: []netip.Addr{nodeV4}, Dests: []Dest{flood, held, left}}); err != nil {
		t.Fatal(err)
	}
	var floodSrcs []netip.Addr
	for i := range 128 {
		floodSrcs = append(floodSrcs, netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}))
	}
	// The salt stays 0 below the cap: heldSrc is in every sample up to one in 1,024, leftSrc in none.
	var heldSrc, leftSrc netip.Addr
	for i := uint32(1); !heldSrc.IsValid() || !leftSrc.IsValid(); i++ {
		a := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)})
		switch {
		case !heldSrc.IsValid() && inSample(a, sampling{shift: maxSampleShift}):
			heldSrc = a
		case !leftSrc.IsValid() && !inSample(a, sampling{shift: 1}):
			leftSrc = a
		}
	}
	conns := map[netip.Addr]*net.UDPConn{}
	for _, a := range append(floodSrcs, heldSrc, leftSrc) {
		client.ip(t, "addr add "+a.String()+"/32 dev c0")
		client.do(t, func() {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
			if err != nil {
				t.Fatalf("udp socket from %v: %v", a, err)
			}
			t.Cleanup(func() { _ = c.Close() })
			conns[a] = c
		})
	}
	send := func(src netip.Addr, d Dest) {
		// Not connected: a connected socket fails its next write after the ICMP port unreachable.
		if _, err := conns[src].WriteToUDPAddrPort([]byte("arrival"), netip.AddrPortFrom(nodeV4, d.Port)); err != nil {
			t.Errorf("udp from %v: %v", src, err)
		}
	}
	// 100 datagrams every 20 ms over the 128 sources: 5,000 a second, five times the budget, under the veth's
	// receive backlog; and one from each of heldSrc and leftSrc.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, sentHeld := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				for range 100 {
					send(floodSrcs[i%len(floodSrcs)], flood)
					i++
				}
				send(heldSrc, held)
				send(leftSrc, left)
				sent, sentHeld = sent+102, sentHeld+1
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	sentNow := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return sent, sentHeld
	}
	// The shift settles where the reader no longer sheds: a shed block, like a packet sample, takes packets
	// from every source.
	eventually(t, 30*time.Second, "sampling one in 4 or fewer, nothing shed for a second", func() bool {
		s0 := m.Snapshot().Families[0]
		time.Sleep(time.Second)
		s1 := m.Snapshot().Families[0]
		return s1.Sampling >= 4 && s1.Sampling == s0.Sampling && s1.Shed == s0.Shed
	})
	// The window starts and ends between two ticks, after the last tick's datagrams reached the ring; one in
	// which the sampler moved (a loaded machine sends unevenly) is taken again.
	var before, after Snapshot
	var sentBefore, heldBefore, sentAfter, heldAfter int
	for try := 0; ; try++ {
		time.Sleep(10 * time.Millisecond)
		before = m.Snapshot()
		sentBefore, heldBefore = sentNow()
		time.Sleep(time.Second)
		after = m.Snapshot()
		sentAfter, heldAfter = sentNow()
		b, a := before.Families[0], after.Families[0]
		if a.Sampling == b.Sampling && a.Shed == b.Shed {
			break
		}
		if try == 4 {
			t.Fatalf("the sampler never held still for a second: sampling one in %d then %d, %d then %d shed", b.Sampling, a.Sampling, b.Shed, a.Shed)
		}
	}
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
	if c, _ := after.Dest(flood); c.Attempts == 0 {
		t.Error("nothing counted while sampling: a sample must still show that attempts arrive")
	}
	// The source in the sample, whole: each of its datagrams sent in the window, give or take those the reader
	// had not taken from the ring yet at either edge (a tenth of them, on a loaded machine). A packet sample of
	// one in 4 or fewer would count a quarter.
	h0, _ := before.Dest(held)
	h1, _ := after.Dest(held)
	if got, want := int(h1.Attempts-h0.Attempts), heldAfter-heldBefore; got < want-max(1, want/10) || got > want+max(1, want/10) {
		t.Errorf("%v, in the sample: %d of its %d datagrams counted in the window, want all", heldSrc, got, want)
	}
	l0, _ := before.Dest(left)
	if l1, _ := after.Dest(left); l1.Attempts != l0.Attempts {
		t.Errorf("%v, out of the sample: %d datagrams counted in the window", leftSrc, l1.Attempts-l0.Attempts)
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
