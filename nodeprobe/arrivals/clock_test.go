package arrivals

import (
	"strings"
	"testing"
	"time"
)

// TestStampThroughWallClockSteps: a packet's place on the meter's timeline is its age at the read, whatever
// the wall clock did before; a step between its arrival and the read can place it no earlier than the
// previous read and no later than this one.
func TestStampThroughWallClockSteps(t *testing.T) {
	const ms = int64(time.Millisecond)
	nowNs := testNow.UnixNano() + 3600_000*ms // an hour into the meter's life
	prev := nowNs - 20*ms                     // the last block was read 20 ms ago
	for _, tc := range []struct {
		name             string
		frameAge         int64 // wall time of the read minus the kernel's stamp
		step             int64 // the wall clock's step, already done when the read happens
		steppedInBetween bool  // the step came between the packet's arrival and the read
		want             int64
	}{
		{"no step", 5 * ms, 0, false, nowNs - 5*ms},
		{"stepped back ten minutes before the packet", 5 * ms, -600_000 * ms, false, nowNs - 5*ms},
		{"stepped forward an hour before the packet", 5 * ms, 3600_000 * ms, false, nowNs - 5*ms},
		{"stepped back between arrival and read", 5 * ms, -600_000 * ms, true, nowNs},
		{"stepped forward between arrival and read", 5 * ms, 600_000 * ms, true, prev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The wall clock reads the timeline's time plus the step; the kernel stamped the frame with the
			// wall clock of its arrival, which had the step already unless it came in between.
			nowWall := nowNs + tc.step
			frameWall := nowWall - tc.frameAge
			if tc.steppedInBetween {
				frameWall -= tc.step
			}
			if got := stampAt(frameWall, nowWall, nowNs, prev); got != tc.want {
				t.Errorf("stamp %d ms from the read, want %d ms", (got-nowNs)/ms, (tc.want-nowNs)/ms)
			}
		})
	}
}

// TestMeterClockRoundTrip: the meter's times carry the monotonic reading that keeps ages right after a wall
// clock step; a time from an earlier process (without one) keeps its wall time; zero stays zero.
func TestMeterClockRoundTrip(t *testing.T) {
	start := time.Now()
	clk := newMeterClock(start)
	later := start.Add(90 * time.Second)
	got := clk.time(clk.ns(later))
	if !got.Equal(later) || got.Sub(later) != 0 {
		t.Errorf("round trip of %v: %v", later, got)
	}
	if !strings.Contains(got.String(), "m=") {
		t.Errorf("%v carries no monotonic reading: an age computed from it would follow wall clock steps", got)
	}
	stored := later.Add(-time.Hour).Round(0) // as a state file hands it back
	if back := clk.time(clk.ns(stored)); back.UnixNano() != stored.UnixNano() {
		t.Errorf("stored time %v came back as %v", stored, back)
	}
	if clk.ns(time.Time{}) != 0 || !clk.time(0).IsZero() {
		t.Error("the zero time is not kept as never")
	}
	var wall meterClock
	if wall.ns(later) != later.UnixNano() || wall.time(later.UnixNano()).UnixNano() != later.UnixNano() {
		t.Error("the zero clock is not the wall clock")
	}
}
