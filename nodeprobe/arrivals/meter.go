package arrivals

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Meter counts arrivals. New opens it; Watch says what to count; Snapshot copies the counts; Close stops
// it. Its methods are safe for concurrent use.
type Meter struct {
	cfg Config

	// mu guards everything below. The receive loop holds it while it counts a batch of packets (lockBatch),
	// so Snapshot and Watch wait at most that long.
	mu      sync.Mutex
	status  Status
	err     error
	since   time.Time
	watched bool
	// lastIn is the Watch as last given, before normalising: a caller that builds the same Watch every scrape
	// is answered by one comparison, without sorting a copy.
	lastIn Watch
	tally  *tally
	fams   [2]famState

	sys  *osMeter // sockets and the receive loop; nil when opening failed
	done chan struct{}
	once sync.Once
	// gate, when set (tests only), is called before each round of reading the rings: a test holds the
	// reader to fill a ring.
	gate func()
}

type famState struct {
	level             FilterLevel
	received, dropped uint64
	shed              uint64
	// sample is the filter's sampling (sample.go), set by the receive loop; sampled estimates the matched
	// packets it left out.
	sample  sampling
	sampled uint64
}

// budget is a token bucket of packets: rate per second, at most a tenth of a second's worth saved up. It
// may go into debt by one block, so a block larger than the burst still passes when the bucket is full.
type budget struct {
	rate, tokens float64
	last         time.Time
}

func newBudget(rate int, now time.Time) budget {
	return budget{rate: float64(rate), tokens: float64(rate) / 10, last: now}
}

// take reports whether n more packets may be counted at now.
func (b *budget) take(n int, now time.Time) bool {
	b.tokens = min(b.rate/10, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens <= 0 {
		return false
	}
	b.tokens -= float64(n)
	return true
}

var familyNames = [2]string{"IPv4", "IPv6"}

// New opens the meter's sockets and starts counting, in the network namespace of the calling thread (the
// host's, for a hostNetwork pod). It never fails: without CAP_NET_RAW the meter is in StatusPermissionDenied,
// on other errors in StatusFailed, and Snapshot says so.
func New(cfg Config) *Meter {
	return newMeter(cfg, nil)
}

func newMeter(cfg Config, gate func()) *Meter {
	cfg = cfg.withDefaults()
	m := &Meter{cfg: cfg, since: time.Now(), tally: newTally(cfg, nil), done: make(chan struct{}), gate: gate}
	m.tally.clk = newMeterClock(m.since)
	sys, err := openOS(cfg)
	if err != nil {
		m.status, m.err = statusOf(err), err
		close(m.done)
		cfg.Logger.Warn("arrivals meter unavailable: nothing is observed", "status", m.status, "err", err)
		return m
	}
	m.sys = sys
	m.tally.links.resolve = sys.linkName
	go m.run()
	return m
}

func statusOf(err error) Status {
	if errors.Is(err, os.ErrPermission) {
		return StatusPermissionDenied
	}
	return StatusFailed
}

// Watch makes w what the meter counts. It rebuilds the kernel filters only when w differs from the current
// Watch (so calling it on every scrape is cheap), keeps the counts of destinations in both, and starts those
// added at zero. An error wrapping ErrInvalidWatch leaves the current Watch in place; any other error means
// a filter could not be installed and the meter is now StatusFailed.
func (m *Meter) Watch(w Watch) error {
	m.mu.Lock()
	same := m.watched && w.equal(m.lastIn)
	m.mu.Unlock()
	if same {
		return nil
	}
	nw, err := w.normalize()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastIn = w.clone()
	if m.watched && nw.equal(m.tally.watch) {
		return nil
	}
	m.tally.setWatch(nw, time.Now())
	m.watched = true
	if m.status != StatusOK || m.sys == nil {
		return nil
	}
	for i := range m.fams {
		spec := specFor(nw, i == 1)
		spec.sample = m.fams[i].sample
		level, err := m.sys.apply(i, spec)
		if err != nil {
			err = fmt.Errorf("arrivals meter: %s filter: %w", familyNames[i], err)
			m.failLocked(err)
			return err
		}
		if level != m.fams[i].level && level > FilterExact {
			m.cfg.Logger.Info("arrivals meter: the exact kernel filter does not fit, a coarser one passes more packets to user space",
				"family", familyNames[i], "filter", level, "destinations", len(nw.Dests), "health_checks", len(nw.HealthChecks))
		}
		m.fams[i].level = level
	}
	return nil
}

// failLocked stops counting: the counts so far stay, the status says they no longer grow.
func (m *Meter) failLocked(err error) {
	if m.status != StatusOK {
		return
	}
	m.status, m.err = statusOf(err), err
	m.cfg.Logger.Warn("arrivals meter failed: nothing is observed from now on", "err", err)
}

// Snapshot copies the counts. It never waits for packets: at most for the counting of one batch of them.
func (m *Meter) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Status: m.status, Err: m.err, Since: m.since, Taken: time.Now(), Families: make([]FamilyStats, 2)}
	if m.sys != nil && m.status == StatusOK {
		for i := range m.fams {
			recv, drop, err := m.sys.stats(i)
			if err != nil {
				m.failLocked(fmt.Errorf("arrivals meter: %s: %w", familyNames[i], err))
				s.Status, s.Err = m.status, m.err
				break
			}
			m.fams[i].received += recv
			m.fams[i].dropped += drop
		}
	}
	for i, f := range m.fams {
		s.Families[i] = FamilyStats{Family: familyNames[i], Filter: f.level, Received: f.received, Dropped: f.dropped, Shed: f.shed,
			Sampling: 1 << f.sample.shift, Sampled: f.sampled}
	}
	m.tally.fill(&s)
	return s
}

// Activity is a number that grows whenever a Snapshot would count something the previous one did not: an
// arrival or probe counted at a watched destination, a new Watch. Asking costs a lock, not a copy of the
// counts: the node model takes a Snapshot only when it moved.
func (m *Meter) Activity() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tally.activity
}

// Close stops the meter and releases its sockets. Snapshot keeps working (StatusClosed, the last counts).
func (m *Meter) Close() error {
	m.once.Do(func() {
		if m.sys != nil {
			m.sys.stop()
		}
		<-m.done
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sys != nil {
			for i := range m.fams {
				if recv, drop, err := m.sys.stats(i); err == nil {
					m.fams[i].received += recv
					m.fams[i].dropped += drop
				}
			}
			m.sys.close()
		}
		if m.status == StatusOK {
			m.status = StatusClosed
		}
	})
	return nil
}

// countPacket decodes and counts one packet of family fam received on interface ifindex; the caller holds m.mu.
func (m *Meter) countPacket(fam int, data []byte, at int64, ifindex int32) {
	p, ok := decode(data)
	if !ok {
		m.tally.fam[fam].unmatched++
		return
	}
	m.tally.count(p, at, ifindex)
}
