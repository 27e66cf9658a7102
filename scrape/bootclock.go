package scrape

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The state file's times are wall-clock (the meter's receive times are), and the wall clock can be stepped
// between a write and the next start: `date -s`, an NTP step after a long suspend, a VM restored from a
// snapshot. Stepped forward, runs that are seconds old would look older than the quiet period and be dropped;
// stepped back, they would lie in the future and hold a page for as long as the step. So each write also
// records the kernel's boot clock (CLOCK_BOOTTIME: it counts elapsed time across suspend and is never
// stepped) with the boot's ID. A start on the same boot knows how much time really passed since the write and
// moves every stored time by the step the wall clock took meanwhile. After a reboot the boot clock starts
// again and only the wall clock is left (the rule from before: a file that seems written in the future is
// taken as written now).

// bootIDPath holds the kernel's random ID of this boot (the host's, also inside a container).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// BootClock is a reading of the kernel's boot clock: which boot, and how long since it began.
type BootClock struct {
	ID    string
	Since time.Duration
}

// ReadBootClock reads the boot's ID and CLOCK_BOOTTIME.
func ReadBootClock() (BootClock, error) {
	id, err := os.ReadFile(bootIDPath)
	if err != nil {
		return BootClock{}, fmt.Errorf("reading the boot ID: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return BootClock{}, fmt.Errorf("reading CLOCK_BOOTTIME: %w", err)
	}
	b := BootClock{ID: strings.TrimSpace(string(id)), Since: time.Duration(ts.Nano())}
	if b.ID == "" {
		return BootClock{}, fmt.Errorf("%s is empty", bootIDPath)
	}
	return b, nil
}

// bootStamp is a BootClock as the state file stores it.
type bootStamp struct {
	ID    string `json:"id"`
	Since int64  `json:"since_nano"`
}

// wallStep is how far the wall clock was stepped between the write (written, at boot clock w) and now (at
// boot clock b): now − written − the time that really passed. 0 when the boot clock cannot tell (another
// boot, no stamp, or a boot clock that went back, which a boot's clock never does).
func wallStep(written time.Time, w *bootStamp, now time.Time, b BootClock, ok bool) (time.Duration, bool) {
	if w == nil || !ok || w.ID != b.ID || time.Duration(w.Since) > b.Since {
		return 0, false
	}
	return now.Sub(written) - (b.Since - time.Duration(w.Since)), true
}

// shift moves every time the body holds by d (0 stays 0: no time).
func (b *stateBody) shift(d time.Duration) {
	if d == 0 {
		return
	}
	mv := func(ns *int64) {
		if *ns != 0 {
			*ns += int64(d)
		}
	}
	mv(&b.WrittenAt)
	mv(&b.KubeProxySeenAt)
	for i := range b.Runs {
		r := &b.Runs[i]
		for _, ns := range []*int64{&r.FirstSeen, &r.LastSeen, &r.ActiveSince, &r.WatchedSince, &r.ClientActiveSince, &r.ClientLastSeen} {
			mv(ns)
		}
		for j := range r.Checkers {
			mv(&r.Checkers[j].LastTick)
		}
	}
	for i := range b.Dropped {
		mv(&b.Dropped[i].Since)
	}
	if b.Exposure != nil {
		for i := range b.Exposure.Open {
			mv(&b.Exposure.Open[i].Start)
			mv(&b.Exposure.Open[i].LastAttempt)
			if d := b.Exposure.Open[i].Drain; d != nil {
				mv(&d.From)
				mv(&d.LastClient)
			}
		}
	}
}
