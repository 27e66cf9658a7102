package arrivals

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/bpf"
)

// inSample is the filter's sampling (emitSample) written in Go: whether src's packets pass at smp.
func inSample(src netip.Addr, smp sampling) bool {
	if smp.shift == 0 {
		return true
	}
	var w uint32
	if src.Is4() {
		b := src.As4()
		w = binary.BigEndian.Uint32(b[:])
	} else {
		b := src.As16()
		for i := 0; i < 16; i += 4 {
			w ^= binary.BigEndian.Uint32(b[i:])
		}
	}
	return (w^smp.salt)*sampleMul&sampleMask(smp.shift) == 0
}

// randomAddr is an address of the family of v6 drawn from r.
func randomAddr(r *rand.Rand, v6 bool) netip.Addr {
	if !v6 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], r.Uint32())
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], r.Uint64())
	binary.BigEndian.PutUint64(b[8:], r.Uint64())
	return netip.AddrFrom16(b)
}

// TestFilterSamplesSources: while sampling, the whole filter (run in the VM) passes a source's SYNs and
// datagrams exactly when inSample says so, whatever its source port, so a source is seen whole or not at all;
// the samples are nested, a new salt draws a different one, and each holds about one source in 2^shift.
func TestFilterSamplesSources(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, v6 := range []bool{false, true} {
		node := nodeV4
		if v6 {
			node = netip.MustParseAddr("2001:db8::10")
		}
		w := Watch{NodeAddrs: []netip.Addr{node}, Dests: []Dest{NodeDest(TCP, v6, 30080), NodeDest(UDP, v6, 30053)}}
		nw, err := w.normalize()
		if err != nil {
			t.Fatal(err)
		}
		spec := specFor(nw, v6)
		const sources = 4096
		srcs := make([]netip.Addr, sources)
		for i := range srcs {
			srcs[i] = randomAddr(r, v6)
		}
		for _, salt := range []uint32{0, saltStep} {
			prev := map[netip.Addr]bool{}
			for shift := uint8(0); shift <= maxSampleShift; shift += 2 {
				smp := sampling{shift: shift, salt: salt}
				spec.sample = smp
				prog, err := buildFilter(spec, FilterExact)
				if err != nil {
					t.Fatal(err)
				}
				raw, err := bpf.Assemble(prog)
				if err != nil {
					t.Fatal(err)
				}
				vm := newVMFilter(t, raw)
				in := map[netip.Addr]bool{}
				for i, src := range srcs {
					p := testPacket{src: src, dst: node, proto: TCP, sport: uint16(40000 + i), dport: 30080, tcpFlags: tcpSYN}
					passed := vm.run(t, pktHost, 2, p.bytes()) > 0
					u := testPacket{src: src, dst: node, proto: UDP, sport: uint16(20000 + i), dport: 30053}
					if udp := vm.run(t, pktHost, 2, u.bytes()) > 0; udp != passed {
						t.Fatalf("v6 %v %+v: %v passes a SYN %v, a datagram %v: not whole", v6, smp, src, passed, udp)
					}
					if passed != inSample(src, smp) {
						t.Fatalf("v6 %v %+v: %v passes %v, the sample says %v", v6, smp, src, passed, !passed)
					}
					if passed {
						in[src] = true
					}
					if passed && shift > 0 && !prev[src] {
						t.Fatalf("v6 %v %+v: %v in the sample, but not at shift %d: not nested", v6, smp, src, shift-2)
					}
				}
				// Binomial: the count's standard deviation at sources/2^shift is at most 32; allow 5 of them.
				want := float64(sources) / float64(uint(1)<<shift)
				if got := float64(len(in)); got < want-160 || got > want+160 {
					t.Errorf("v6 %v %+v: %d of %d sources in the sample, want about %.0f", v6, smp, len(in), sources, want)
				}
				prev = in
			}
		}
		// Another salt, another sample: at one in 4, the two share about a quarter of their sources.
		a, b := sampling{shift: 2}, sampling{shift: 2, salt: saltStep}
		both, either := 0, 0
		for _, src := range srcs {
			x, y := inSample(src, a), inSample(src, b)
			if x && y {
				both++
			}
			if x || y {
				either++
			}
		}
		if both*2 > either {
			t.Errorf("v6 %v: salts 0 and %#x share %d of the %d sources either samples: not a new draw", v6, uint32(saltStep), both, either)
		}
	}
}

// TestSamplerSteps: the shift grows by one per second while the reader sheds, up to one in 1,024, and falls by
// one per window once twice the counted rate fits in a quarter of the budget.
func TestSamplerSteps(t *testing.T) {
	const rate = 1000.0
	t0 := testNow
	s := newSampler(t0)
	if s.step(t0.Add(500*time.Millisecond), rate) {
		t.Fatal("changed without shedding")
	}
	s.shed = true
	if s.step(t0.Add(500*time.Millisecond), rate) {
		t.Fatal("raised within a second of the start")
	}
	at := t0
	for want := uint8(1); want <= maxSampleShift; want++ {
		at = at.Add(time.Second)
		s.shed = true
		if !s.step(at, rate) || s.shift != want {
			t.Fatalf("at %v shedding: shift %d, want %d", at.Sub(t0), s.shift, want)
		}
	}
	at = at.Add(time.Second)
	s.shed = true
	if s.step(at, rate); s.shift != maxSampleShift {
		t.Fatalf("shift %d past the cap", s.shift)
	}
	// Still heavy: 200 packets/s counted at the cap would be 400/s at half the sampling, over a quarter of
	// the budget. No change.
	s.shed = false
	s.counted = 200 * uint64(sampleWindow/time.Second)
	at = at.Add(sampleWindow)
	if s.step(at, rate) {
		t.Fatalf("lowered with %d counted per window", 200*uint64(sampleWindow/time.Second))
	}
	// The flood over: nothing counted for a window, one step down per window.
	at = at.Add(sampleWindow)
	if !s.step(at, rate) || s.shift != maxSampleShift-1 {
		t.Fatalf("shift %d after a quiet window, want %d", s.shift, maxSampleShift-1)
	}
	if s.step(at.Add(sampleWindow/2), rate) {
		t.Fatal("lowered twice in one window")
	}
}

// TestSamplerDrawsAgainAtTheCap: a flood still shed at one in 1,024 comes from sources the sample holds, so
// each further second of shedding draws a new sample (a new salt) at the same shift; none before the cap.
func TestSamplerDrawsAgainAtTheCap(t *testing.T) {
	const rate = 1000.0
	at := testNow
	s := newSampler(at)
	for range maxSampleShift {
		at = at.Add(time.Second)
		s.shed = true
		s.step(at, rate)
		if s.salt != 0 {
			t.Fatalf("salt %#x at shift %d, below the cap", s.salt, s.shift)
		}
	}
	salts := map[uint32]bool{0: true}
	for range 3 {
		at = at.Add(time.Second)
		s.shed = true
		if !s.step(at, rate) || s.shift != maxSampleShift || salts[s.salt] {
			t.Fatalf("shedding at the cap: changed with shift %d salt %#x, want a new salt at shift %d", s.shift, s.salt, maxSampleShift)
		}
		salts[s.salt] = true
	}
	if s.step(at.Add(500*time.Millisecond), rate) {
		t.Fatal("drew again within a second")
	}
}

// TestSamplerHoldsAfterAFloodComesBack: a flood from sources that all hash out of the sample counts nothing, so
// the shift falls after a window and lets it back in; each lowering that brings back shedding within a window
// makes the next lowering wait twice as long (up to maxSampleHold), and the wait starts afresh at shift 0.
func TestSamplerHoldsAfterAFloodComesBack(t *testing.T) {
	const rate = 1000.0
	at := testNow
	s := newSampler(at)
	shed := func(want uint8) {
		t.Helper()
		at = at.Add(time.Second)
		s.shed = true
		if !s.step(at, rate) || s.shift != want {
			t.Fatalf("shedding at %v: shift %d, want %d", at.Sub(testNow), s.shift, want)
		}
	}
	// quiet steps through a silent span, one second at a time, and wants the one lowering at its end.
	quiet := func(span time.Duration, want uint8) {
		t.Helper()
		for end := at.Add(span); at.Before(end); {
			at = at.Add(time.Second)
			changed := s.step(at, rate)
			if at.Before(end) && changed {
				t.Fatalf("lowered to %d at %v, %v before the hold ends", s.shift, at.Sub(testNow), end.Sub(at))
			}
			if !at.Before(end) && (!changed || s.shift != want) {
				t.Fatalf("after a quiet %v: shift %d (changed %v), want %d", span, s.shift, changed, want)
			}
		}
	}
	shed(1)
	shed(2)
	quiet(sampleWindow, 1)
	hold := sampleWindow
	for hold < maxSampleHold {
		shed(2) // the lowering let the flood back in
		hold = min(2*hold, maxSampleHold)
		quiet(hold, 1)
	}
	shed(2)
	quiet(maxSampleHold, 1)
	quiet(maxSampleHold, 0) // no flood came back: down to 0 at the same hold
	for range sampleWindow / time.Second {
		at = at.Add(time.Second)
		if s.step(at, rate) {
			t.Fatalf("changed at shift 0 without shedding")
		}
	}
	shed(1)                // a new flood, a window after the last lowering
	quiet(sampleWindow, 0) // afresh
}
