package scrape

import (
	"testing"
	"time"
)

// The boot clock this node reads: one boot's ID, and a clock that only moves forward.
func TestReadBootClock(t *testing.T) {
	a, err := ReadBootClock()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	b, err := ReadBootClock()
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == "" || a.ID != b.ID {
		t.Errorf("boot IDs %q then %q, want one non-empty ID", a.ID, b.ID)
	}
	if a.Since <= 0 || b.Since-a.Since < 10*time.Millisecond {
		t.Errorf("boot clock %v then %v, 10ms apart", a.Since, b.Since)
	}
}
