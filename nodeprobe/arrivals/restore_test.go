package arrivals

import (
	"net/netip"
	"testing"
	"time"
)

// A run restored from an earlier meter continues when Watch first adds its destination: the counts go on, an
// attempt within the quiet period keeps ActiveSince, and Restored says how many attempts were carried over.
func TestRestoreContinuesRun(t *testing.T) {
	quiet := time.Minute
	tl := newTally(Config{QuietPeriod: quiet}.withDefaults(), nil)
	np := NodeDest(TCP, false, 30080)
	gone := lb(TCP, "203.0.113.99", 80) // no longer watched: its Service is gone
	tl.restore(map[Dest]Run{
		np: {Attempts: 40, FirstSeen: testNow.Add(-time.Hour), LastSeen: testNow.Add(-10 * time.Second),
			ActiveSince: testNow.Add(-5 * time.Minute), WatchedSince: testNow.Add(-2 * time.Hour)},
		gone:                        {Attempts: 3, LastSeen: testNow.Add(-time.Second)},
		lb(TCP, "203.0.113.7", 80):  {Attempts: 0, LastSeen: testNow}, // nothing arrived: nothing to restore
		NodeDest(UDP, false, 30053): {Attempts: 2},                    // no time: not a run
	})
	nw, err := testWatch.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow)
	if tl.restored != nil {
		t.Errorf("restored runs left after the first Watch: %v", tl.restored)
	}
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.10", 30080), testNow.Add(5*time.Second))
	s := snap(tl)
	c, _ := s.Dest(np)
	want := DestCount{Dest: np, Attempts: 41, FirstSeen: testNow.Add(-time.Hour), LastSeen: testNow.Add(5 * time.Second),
		ActiveSince: testNow.Add(-5 * time.Minute), WatchedSince: testNow.Add(-2 * time.Hour), Restored: 40}
	if !sameCount(c, want) {
		t.Errorf("restored NodePort:\n got %+v\nwant %+v", c, want)
	}
	for _, d := range []Dest{lb(TCP, "203.0.113.7", 80), NodeDest(UDP, false, 30053)} {
		if c, _ := s.Dest(d); c.Attempts != 0 || c.Restored != 0 || !c.LastSeen.IsZero() {
			t.Errorf("%v restored from a run without attempts or times: %+v", d, c)
		}
	}
	// After a pause of the quiet period the run ends, restored or not.
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.10", 30080), testNow.Add(5*time.Second+quiet))
	if c, _ := snap(tl).Dest(np); !c.ActiveSince.Equal(testNow.Add(5*time.Second + quiet)) {
		t.Errorf("active since %v after a quiet period, want the new attempt", c.ActiveSince)
	}
	// Watched later on, the gone destination starts at zero: its restored run was forgotten.
	w := testWatch
	w.Dests = append(w.Dests, gone)
	nw, err = w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow.Add(time.Minute))
	if c, _ := snap(tl).Dest(gone); c.Attempts != 0 {
		t.Errorf("a restored run outlived the first Watch: %+v", c)
	}
}

// A destination the meter watches already keeps its own, newer counts; restored times out of order are
// straightened so the run stays a run (first ≤ active ≤ last).
func TestRestoreKeepsWatchedAndStraightensTimes(t *testing.T) {
	tl := newTestTally(t, Config{}, testWatch)
	np := NodeDest(TCP, false, 30080)
	countBytes(t, tl, syn("10.9.9.9", "192.0.2.10", 30080), testNow)
	mapped := Dest{Protocol: TCP, Addr: netip.MustParseAddr("::ffff:203.0.113.50"), Port: 443} // unmapped on restore
	tl.restore(map[Dest]Run{
		np:     {Attempts: 99, LastSeen: testNow.Add(-time.Hour)},
		mapped: {Attempts: 5, FirstSeen: testNow, LastSeen: testNow.Add(-time.Second), ActiveSince: testNow.Add(time.Hour)},
	})
	w := testWatch
	w.Dests = append(w.Dests, lb(TCP, "203.0.113.50", 443)) // added by a later Watch
	nw, err := w.normalize()
	if err != nil {
		t.Fatal(err)
	}
	tl.setWatch(nw, testNow.Add(time.Second))
	s := snap(tl)
	if c, _ := s.Dest(np); c.Attempts != 1 || c.Restored != 0 {
		t.Errorf("a watched destination took a restored run: %+v", c)
	}
	c, _ := s.Dest(lb(TCP, "203.0.113.50", 443))
	last := testNow.Add(-time.Second)
	if c.Attempts != 5 || !c.FirstSeen.Equal(last) || !c.ActiveSince.Equal(last) || !c.LastSeen.Equal(last) || !c.WatchedSince.Equal(last) {
		t.Errorf("restored run with times out of order: %+v", c)
	}
}

func sameCount(a, b DestCount) bool {
	return a.Dest == b.Dest && a.Attempts == b.Attempts && a.Restored == b.Restored && a.FirstSeen.Equal(b.FirstSeen) &&
		a.LastSeen.Equal(b.LastSeen) && a.ActiveSince.Equal(b.ActiveSince) && a.WatchedSince.Equal(b.WatchedSince)
}
