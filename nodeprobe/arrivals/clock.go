package arrivals

import "time"

// meterClock is the meter's timeline: nanoseconds on the wall clock as it read when the meter started, plus
// the monotonic time elapsed since. Every time the meter keeps is on it, so a step of the wall clock (NTP
// correcting a drifted node, an operator's date) after the start neither moves a past arrival into the future
// nor ages a recent one: a clock stepped back would otherwise make the last attempt look newer than any scrape
// for as long as the step, keep a drained node in rotation and turn a normal drain into a page.
//
// The times it hands out (Snapshot's) carry Go's monotonic reading, so the collector's time.Now()-based ages
// are monotonic too. A time without one (a state file's, from an earlier process) maps to its own wall time.
// The zero meterClock is the plain wall clock (unix nanoseconds), for tests that build a tally by hand.
type meterClock struct {
	start   time.Time
	startNs int64
}

func newMeterClock(start time.Time) meterClock {
	return meterClock{start: start, startNs: start.UnixNano()}
}

// ns is t on the meter's timeline, 0 for the zero time.
func (c meterClock) ns(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case c.start.IsZero():
		return t.UnixNano()
	}
	return c.startNs + int64(t.Sub(c.start))
}

// time is the time at ns on the meter's timeline, the zero time for 0.
func (c meterClock) time(ns int64) time.Time {
	switch {
	case ns == 0:
		return time.Time{}
	case c.start.IsZero():
		return time.Unix(0, ns)
	}
	return c.start.Add(time.Duration(ns - c.startNs))
}

// stamp places a packet the kernel stamped with the wall clock at frameWall (unix nanoseconds) on the
// timeline, read at now, the previous read having been at prev (on the timeline). How long ago the kernel
// received it is now's wall time minus frameWall, whatever the wall clock's steps before; only a step
// between the packet's arrival and this read can distort that, and the result is held between prev and now,
// the only span in which the packet can have arrived unread.
func (c meterClock) stamp(frameWall int64, now time.Time, prev int64) int64 {
	return stampAt(frameWall, now.UnixNano(), c.ns(now), prev)
}

// stampAt is stamp with now read as nowWall on the wall clock and nowNs on the timeline.
func stampAt(frameWall, nowWall, nowNs, prev int64) int64 {
	return min(max(nowNs-(nowWall-frameWall), prev), nowNs)
}
