package arrivals

import (
	"testing"
	"time"
)

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
	if s.step(at, rate) || s.shift != maxSampleShift {
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
