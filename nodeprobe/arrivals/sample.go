package arrivals

import (
	"time"

	"golang.org/x/net/bpf"
)

// Sampling bounds the kernel's side of a flood. The rate budget (Config.MaxPacketRate) bounds what the reader
// counts, but every packet the filter accepts is still copied into the ring by the kernel, under the socket's
// lock, in the softirq of the receiving CPU. Once the reader sheds, the filter is rebuilt to accept one matched
// packet in 2^shift, drawn by the kernel's per-packet random number (SKF_AD_RANDOM), so the copies fall with
// the rate: the shift grows by one each second the reader still sheds, up to maxSampleShift (one in 1,024),
// and falls by one when, over a sampleWindow, twice the counted rate would stay under a quarter of the budget.
// A packet left out is neither copied nor counted; FamilyStats.Sampled estimates them (each counted packet
// stands for 2^shift), and they make the meter overloaded like shed ones: silence while sampling is not "no
// traffic", and every count is a lower bound.
const (
	maxSampleShift = 10
	sampleWindow   = 10 * time.Second
)

// sampler is one family's sampling control, owned by the receive loop.
type sampler struct {
	shift   uint8
	changed time.Time // the last change of shift
	window  time.Time // the start of the window counted below
	shed    bool      // the reader shed packets since window
	counted uint64    // packets counted since window
}

func newSampler(now time.Time) sampler { return sampler{changed: now, window: now} }

// step reports whether the shift changed at now, with rate the budget in packets per second.
func (s *sampler) step(now time.Time, rate float64) bool {
	if s.shed && s.shift < maxSampleShift && now.Sub(s.changed) >= time.Second {
		s.shift++
		s.changed, s.window, s.shed, s.counted = now, now, false, 0
		return true
	}
	span := now.Sub(s.window)
	if span < sampleWindow {
		return false
	}
	lower := s.shift > 0 && !s.shed && float64(s.counted)*2/span.Seconds() < rate/4
	s.window, s.shed, s.counted = now, false, 0
	if lower {
		s.shift--
		s.changed = now
	}
	return lower
}

// emitSample emits the filter's sampling: with A free to use, jump to drop unless the kernel's random number
// has its low shift bits clear (one packet in 2^shift passes). X is left alone.
func emitSample(a *asm, shift uint8, drop label) {
	if shift == 0 {
		return
	}
	a.emit(bpf.LoadExtension{Num: bpf.ExtRand})
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 1<<shift - 1})
	a.jif(bpf.JumpNotEqual, 0, drop, next)
}
