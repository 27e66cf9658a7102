package arrivals

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// check adds one dropped check from src at at, a new connection: the SYN and the kernel's retransmissions of
// it until the check's timeout (1 s, 3 s, 7 s … after it), a datagram for UDP.
func (tl *timeline) check(src netip.Addr, at, timeout time.Duration) {
	tl.add(src, uint16(1024+tl.rng.IntN(60000)), at)
	if tl.tmpl.proto == UDP {
		return
	}
	sport := tl.wire[len(tl.wire)-1].p.sport
	for backoff, r := time.Second, at+time.Second; r < at+timeout; backoff, r = backoff*2, r+backoff*2 {
		tl.add(src, sport, r)
	}
}

// haproxy adds an HAProxy checker with `spread-checks` from src: each check lasts until its timeout (dropped,
// it never completes), and the next one starts inter plus a spread drawn uniformly within ±spread of inter
// after it ends (HAProxy's process_chk: rv = inter*spread/100, less 2*rv*random, added to inter from the
// moment the check ends).
func (tl *timeline) haproxy(src netip.Addr, inter, timeout time.Duration, spread float64, phase, end time.Duration) {
	for at := phase; at < end; {
		tl.check(src, at, timeout)
		rv := float64(inter) * spread
		at += timeout + inter + time.Duration(rv-2*rv*tl.rng.Float64())
	}
}

// envoy adds an Envoy health checker from src: after each check's timeout, the next one starts interval later
// plus interval_jitter_percent of it drawn uniformly from [0, interval*percent/100) and interval_jitter drawn
// uniformly from [0, jitter) (Envoy's HealthCheckerImplBase::intervalWithJitter).
func (tl *timeline) envoy(src netip.Addr, interval, timeout time.Duration, percent int, jitter, phase, end time.Duration) {
	for at := phase; at < end; {
		tl.check(src, at, timeout)
		next := timeout + interval
		if mod := int64(interval) * int64(percent) / 100; mod > 0 {
			next += time.Duration(tl.rng.Int64N(mod))
		}
		if jitter > 0 {
			next += time.Duration(tl.rng.Int64N(int64(jitter)))
		}
		at += next
	}
}

// TestJitteredCheckersSeeded: 600 recorded timelines, seeded, of one load balancer checker alone at a NodePort,
// TCP or UDP, five minutes long, 200 of each shape: on its timer (every 1 to 10 s, to a few milliseconds);
// HAProxy (inter 1 to 4 s) with `spread-checks` of 0 to 36 and its default check timeout (inter) in half of
// them; in the other half a timeout of 0.5 s to inter (`timeout check` set) and a spread up to the widest whose
// gaps stay within 1.45 times (18 % with a timeout near nothing, 32 % with 1.5 s at inter 2 s); Envoy
// (interval 1 to 4 s, a timeout of 0.5 s up to the interval) with interval_jitter_percent of 0 to 40 and
// interval_jitter below a twentieth of the interval, or interval_jitter_percent of 41 to 50 and a timeout of
// at least an eighth of the interval. These are the spreads a band takes (sources.go: gaps within 1.45 times
// the shortest). Its probes are never a client's at any 2 s snapshot, and it is named a checker at the end.
func TestJitteredCheckersSeeded(t *testing.T) {
	const end = 5 * time.Minute
	src := netip.MustParseAddr("198.18.0.11")
	for _, shape := range []string{"fixed", "haproxy", "envoy"} {
		for seed := range uint64(200) {
			tl, d := nodePortTimeline(seed, 0x717e)
			rng := tl.rng
			var name string
			switch shape {
			case "fixed":
				every := time.Duration(1000+rng.IntN(9000)) * time.Millisecond
				phase := time.Duration(rng.Int64N(int64(every)))
				tl.probes(src, every, phase, end)
				name = fmt.Sprintf("every %s from +%s", every, phase)
			case "haproxy":
				inter := time.Duration(1000+rng.IntN(3001)) * time.Millisecond
				timeout, spread := inter, float64(rng.IntN(37))/100
				if seed%4 >= 2 {
					timeout = 500*time.Millisecond + time.Duration(rng.Int64N(int64(inter-500*time.Millisecond)+1))
					// (timeout + inter(1+s)) / (timeout + inter(1-s)) <= 1.45
					spread = 0.45 * float64(timeout+inter) / (2.45 * float64(inter)) * rng.Float64()
				}
				phase := time.Duration(rng.Int64N(int64(inter)))
				tl.haproxy(src, inter, timeout, spread, phase, end)
				name = fmt.Sprintf("HAProxy inter %s, timeout %s, spread-checks %.1f, from +%s", inter, timeout, spread*100, phase)
			case "envoy":
				interval := time.Duration(1000+rng.IntN(3001)) * time.Millisecond
				percent := rng.IntN(51)
				lo, jitter := 500*time.Millisecond, time.Duration(0)
				if percent <= 40 {
					jitter = time.Duration(rng.Int64N(int64(interval / 20)))
				} else {
					lo = max(lo, interval/8)
				}
				timeout := lo + time.Duration(rng.Int64N(int64(interval-lo)+1))
				phase := time.Duration(rng.Int64N(int64(interval)))
				tl.envoy(src, interval, timeout, percent, jitter, phase, end)
				name = fmt.Sprintf("Envoy interval %s, timeout %s, interval_jitter_percent %d, interval_jitter %s, from +%s",
					interval, timeout, percent, jitter, phase)
			}
			neverClients(t, fmt.Sprintf("%s seed %d: %v %s at %v", shape, seed, src, name, d), tl, d, end, src)
		}
	}
}

// TestClientShapesPageSeeded: 600 recorded timelines, seeded, of a client at a NodePort, TCP or UDP, five
// minutes long, 200 of each shape (irregular, bursty, 20 to 60 clients behind one NAT address: see
// TestScansAndClientsSeeded), each dropped attempt retransmitted until its connect timeout, counted by a meter
// that recognises checkers with a spread and by one that does not (the meter before it, Config.noBands). At
// every 2 s snapshot from the end of the client's candidate window on (66 s after its first attempt, the most
// today's meter waits for a source not on a clock), its repeated attempts count as a client's whenever they
// do without bands; before then, a band may keep it a candidate where the meter without bands counted it at
// its fifth attempt off every clock. It is never named a checker unless it is without bands too: a band
// neither lengthens a client's candidate window nor proves a client a checker. Every client also counts by
// the end of its candidate window, and is never named a checker, but in the few timelines where the meter
// without bands takes its attempts for clocks (docs/rotation.md).
func TestClientShapesPageSeeded(t *testing.T) {
	const end = 5 * time.Minute
	client := netip.MustParseAddr("203.0.113.60")
	late := 0
	for _, shape := range []string{"irregular", "bursty", "population"} {
		for seed := range uint64(200) {
			tl, d := nodePortTimeline(seed, 0xc11e)
			var first, last time.Duration
			switch shape {
			case "irregular":
				first, last = tl.irregular(client, end)
			case "bursty":
				first, last = tl.bursty(client, end)
			case "population":
				first, last = tl.population(client, end)
			}
			name := fmt.Sprintf("%s seed %d at %v, first attempt +%s", shape, seed, d, first)
			slices.SortStableFunc(tl.wire, func(a, b wirePacket) int { return cmp.Compare(a.at, b.at) })
			bands, before := newTestTally(t, Config{}, testWatch), newTestTally(t, Config{noBands: true}, testWatch)
			var c, b DestCount
			i, j, counted := 0, 0, false
			for at := 2 * time.Second; at <= end; at += 2 * time.Second {
				c, i = countUntil(t, bands, tl.wire, i, d, at)
				b, j = countUntil(t, before, tl.wire, j, d, at)
				if len(c.Checkers) != 0 && len(b.Checkers) == 0 {
					t.Errorf("%s: at +%s the client taken for a checker with a spread: %v", name, at, checkerAddrs(c))
					break
				}
				if b.Clients.Repeated.Attempts != 0 && c.Clients.Repeated.Attempts == 0 && at >= first+candidateWindow+2*time.Second {
					t.Errorf("%s: at +%s no client's repeated attempt, %d without bands: %+v", name, at,
						b.Clients.Repeated.Attempts, c.Clients)
					break
				}
				counted = counted || c.Clients.Repeated.Attempts != 0
				// Still trying (an attempt within the quiet period) a candidate window after its first attempt.
				if at >= first+candidateWindow+2*time.Second && at <= last+DefaultQuietPeriod && !counted || len(c.Checkers) != 0 {
					late++
					t.Logf("%s: at +%s not counted, or taken for a checker, with bands or without", name, at)
					break
				}
			}
		}
	}
	// Measured: the irregular clients the meter without bands too takes for clocks (a chance clock lengthens
	// the window, or two clocks of one interval keep its attempts).
	if late > 8 {
		t.Errorf("%d clients counted late or never, want at most the 8 the meter without bands misses too", late)
	}
}
