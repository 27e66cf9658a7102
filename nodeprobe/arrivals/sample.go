package arrivals

import (
	"time"

	"golang.org/x/net/bpf"
)

// Sampling bounds the kernel's side of a flood. The rate budget (Config.MaxPacketRate) bounds what the reader
// counts, but every packet the filter accepts is still copied into the ring by the kernel, under the socket's
// lock, in the softirq of the receiving CPU. Once the reader sheds, the filter is rebuilt to accept the packets
// of one source address in 2^shift: the shift grows by one each second the reader still sheds, up to
// maxSampleShift (one in 1,024), and falls by one when, over a sampleWindow, twice the counted rate would stay
// under a quarter of the budget. A packet left out is neither copied nor counted; FamilyStats.Sampled estimates
// them (each counted packet stands for 2^shift), and they make the meter overloaded like shed ones: silence
// while sampling is not "no traffic", and every count is a lower bound.
//
// The sample is of sources, not of packets, because what the meter learns lives in a source's sequence: a
// health checker is told from a client by its cadence, a lost attempt by its retransmission, a scan by its
// lack of one. A packet sample thins every sequence at random, so a checker probing every 2 s arrives at
// 2, 4 and 6 s gaps with the odd retransmission, a client that pages. A source in the sample is seen whole; one
// left out is not seen at all, which the overloaded meter already reads as nothing known. The samples are
// nested (a source in at one shift is in at every lower one), so lowering the shift only adds sources.
//
// A source is in when the top shift bits of a multiplicative hash of its address (IPv6: its four words
// folded by XOR) and a salt are clear. A flood from few sources that all hash in would keep the kernel
// copying at the cap; there, each further second of shedding draws a new salt, and so a new sample. A flood
// from few sources that all hash out counts nothing, so the shift falls after a window and lets it back in;
// each time a lowering brings back shedding within a window, the next lowering waits twice as long, up to
// maxSampleHold, and the wait starts afresh once the shift is back at 0.
const (
	maxSampleShift = 10
	sampleWindow   = 10 * time.Second
	maxSampleHold  = 5 * time.Minute
	// sampleMul is the hash's multiplier: 2^32 divided by the golden ratio, odd, so the top bits of the
	// product depend on every bit of the address (Knuth's multiplicative hashing).
	sampleMul = 0x9e3779b1
	// saltStep moves the salt to the next sample: any odd constant walks all 2^32 salts.
	saltStep = 0x7f4a7c15
)

// sampling is a family's filter sampling: the packets of one source in 2^shift, drawn by salt.
type sampling struct {
	shift uint8
	salt  uint32
}

// sampler is one family's sampling control, owned by the receive loop.
type sampler struct {
	sampling
	changed time.Time     // the last change of shift or salt
	lowered time.Time     // the last lowering of shift
	hold    time.Duration // the window a lowering waits for; sampleWindow when zero
	window  time.Time     // the start of the window counted below
	shed    bool          // the reader shed packets since window
	counted uint64        // packets counted since window
}

func newSampler(now time.Time) sampler { return sampler{changed: now, window: now} }

// step reports whether the sampling changed at now, with rate the budget in packets per second.
func (s *sampler) step(now time.Time, rate float64) bool {
	hold := max(s.hold, sampleWindow)
	if s.shed && now.Sub(s.changed) >= time.Second {
		switch {
		case s.shift == maxSampleShift:
			s.salt += saltStep // the cap's sample still floods: draw another
		case !s.lowered.IsZero() && now.Sub(s.lowered) < sampleWindow:
			s.hold = min(2*hold, maxSampleHold) // the lowering let a flood back in
			s.lowered = time.Time{}
			fallthrough
		default:
			s.shift++
		}
		s.changed, s.window, s.shed, s.counted = now, now, false, 0
		return true
	}
	span := now.Sub(s.window)
	if span < hold {
		return false
	}
	lower := s.shift > 0 && !s.shed && float64(s.counted)*2/span.Seconds() < rate/4
	s.window, s.shed, s.counted = now, false, 0
	if lower {
		s.shift--
		s.changed, s.lowered = now, now
		if s.shift == 0 {
			s.hold = 0
		}
	}
	return lower
}

// emitSample emits the filter's sampling: with A free to use, jump to drop unless the source address is in
// the sample. X is left alone (saved in scratch word 0 while IPv6's words are folded).
func emitSample(a *asm, ipv6 bool, smp sampling, drop label) {
	if smp.shift == 0 {
		return
	}
	if ipv6 {
		a.emit(bpf.StoreScratch{Src: bpf.RegX, N: 0})
		a.emit(bpf.LoadAbsolute{Off: ipv6Src, Size: 4})
		for w := uint32(1); w < 4; w++ {
			a.emit(bpf.TAX{})
			a.emit(bpf.LoadAbsolute{Off: ipv6Src + 4*w, Size: 4})
			a.emit(bpf.ALUOpX{Op: bpf.ALUOpXor})
		}
		a.emit(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
	} else {
		a.emit(bpf.LoadAbsolute{Off: ipv4Src, Size: 4})
	}
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpXor, Val: smp.salt})
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: sampleMul})
	a.jif(bpf.JumpBitsSet, sampleMask(smp.shift), drop, next)
}

// sampleMask is the top shift bits of a word.
func sampleMask(shift uint8) uint32 { return ^uint32(0) << (32 - shift) }
