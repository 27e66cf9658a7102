package arrivals

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// osMeter holds one ring per family and an eventfd that wakes the receive loop to stop.
type osMeter struct {
	rings [2]*ring
	wake  int
}

func openOS(cfg Config) (*osMeter, error) {
	o := &osMeter{wake: -1}
	var err error
	for i, et := range [2]uint16{unix.ETH_P_IP, unix.ETH_P_IPV6} {
		if o.rings[i], err = openRing(et, cfg); err != nil {
			o.close()
			return nil, fmt.Errorf("arrivals meter: %s: %w", familyNames[i], err)
		}
	}
	if o.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		o.close()
		return nil, fmt.Errorf("arrivals meter: eventfd: %w", err)
	}
	return o, nil
}

// apply installs the finest filter for spec that the kernel takes and binds the socket when anything is
// watched, unbinds it when nothing is.
func (o *osMeter) apply(fam int, spec familySpec) (FilterLevel, error) {
	r := o.rings[fam]
	raw, level, err := compileFilter(spec, FilterExact, r.setFilter)
	if err != nil {
		return 0, err
	}
	if raw == nil {
		return 0, errors.New("no filter level fits")
	}
	if level == FilterNone {
		if err := r.setFilter(raw); err != nil {
			return 0, err
		}
	}
	return level, r.bind(level != FilterNone)
}

func (o *osMeter) stats(fam int) (uint64, uint64, error) { return o.rings[fam].stats() }

func (o *osMeter) stop() {
	var one = [8]byte{1}
	_, _ = unix.Write(o.wake, one[:])
}

func (o *osMeter) close() {
	for _, r := range o.rings {
		if r != nil {
			r.close()
		}
	}
	if o.wake >= 0 {
		_ = unix.Close(o.wake)
		o.wake = -1
	}
}

// lockBatch is how many packets the reader counts per hold of m.mu.
const lockBatch = 128

// run reads both rings until stop: every block the kernel has handed over is counted and given back, then
// the loop sleeps in poll(2) until a block is ready (full, or BlockTimeout after its first packet) or stop.
func (m *Meter) run() {
	defer close(m.done)
	o := m.sys
	fds := []unix.PollFd{
		{Fd: int32(o.rings[0].fd), Events: unix.POLLIN},
		{Fd: int32(o.rings[1].fd), Events: unix.POLLIN},
		{Fd: int32(o.wake), Events: unix.POLLIN},
	}
	budgets := [2]budget{newBudget(m.cfg.MaxPacketRate, time.Now()), newBudget(m.cfg.MaxPacketRate, time.Now())}
	// prevRead is when the last block was read, on the meter's timeline: no packet of a later block can have
	// arrived before it.
	prevRead := m.tally.clk.ns(m.since)
	samplers := [2]sampler{newSampler(m.since), newSampler(m.since)}
	for {
		if m.gate != nil {
			m.gate()
		}
		for fam, r := range o.rings {
			for b := r.ready(); b != nil; b = r.ready() {
				if n := blockPackets(b); !budgets[fam].take(n, time.Now()) {
					m.mu.Lock()
					m.fams[fam].shed += uint64(n)
					m.fams[fam].sampled += uint64(n) * (1<<m.fams[fam].sample.shift - 1)
					m.mu.Unlock()
					r.release(b)
					samplers[fam].shed = true
					continue
				}
				samplers[fam].counted += uint64(blockPackets(b))
				m.mu.Lock()
				m.fams[fam].sampled += uint64(blockPackets(b)) * (1<<m.fams[fam].sample.shift - 1)
				n := 0
				now := time.Now()
				walkBlock(b, func(data []byte, wall int64, ifindex int32) {
					m.countPacket(fam, data, m.tally.clk.stamp(wall, now, prevRead), ifindex)
					// A full block under a flood is about 900 packets: let a waiting Snapshot in between
					// batches, so a scrape waits for a batch, not a block.
					if n++; n%lockBatch == 0 {
						m.mu.Unlock()
						m.mu.Lock()
					}
				})
				m.mu.Unlock()
				r.release(b)
				prevRead = m.tally.clk.ns(now)
			}
		}
		timeout := -1
		for fam := range samplers {
			if samplers[fam].step(time.Now(), float64(m.cfg.MaxPacketRate)) {
				m.resample(fam, samplers[fam].sampling)
			}
			if samplers[fam].shift > 0 {
				timeout = 1000 // come back to lower the shift when the flood is over
			}
		}
		if _, err := unix.Poll(fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
			m.mu.Lock()
			m.failLocked(fmt.Errorf("arrivals meter: poll: %w", err))
			m.mu.Unlock()
			return
		}
		if fds[2].Revents != 0 {
			return
		}
	}
}

// linkName is the name of interface ifindex in the network namespace of the meter's sockets (SIOCGIFNAME on
// one of them: one ioctl, where net.InterfaceByIndex dumps every link, and in the sockets' namespace whatever
// thread asks).
func (o *osMeter) linkName(ifindex int32) (string, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return "", err
	}
	ifr.SetUint32(uint32(ifindex))
	if err := unix.IoctlIfreq(o.rings[0].fd, unix.SIOCGIFNAME, ifr); err != nil {
		return "", fmt.Errorf("interface %d: SIOCGIFNAME: %w", ifindex, err)
	}
	return ifr.Name(), nil
}

// resample rebuilds family fam's filter with sampling smp (sample.go).
func (m *Meter) resample(fam int, smp sampling) {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.fams[fam].sample.shift
	m.fams[fam].sample = smp
	if m.status != StatusOK || !m.watched {
		return
	}
	spec := specFor(m.tally.watch, fam == 1)
	spec.sample = smp
	level, err := m.sys.apply(fam, spec)
	if err != nil {
		m.failLocked(fmt.Errorf("arrivals meter: %s filter: %w", familyNames[fam], err))
		return
	}
	m.fams[fam].level = level
	switch {
	case was == 0 && smp.shift > 0:
		m.cfg.Logger.Warn("arrivals meter: over its packet budget, the kernel now passes the packets of a sample of the sources: counts are lower bounds, silence is not evidence",
			"family", familyNames[fam])
	case was > 0 && smp.shift == 0:
		m.cfg.Logger.Info("arrivals meter: back under its packet budget, the kernel passes every matched packet", "family", familyNames[fam])
	}
}
