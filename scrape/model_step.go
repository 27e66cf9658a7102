package scrape

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// RulesWatcher is a dataplane reader that tells when what it reads changed (kernelrules.Dataplane does): the model
// reads them then, instead of polling.
type RulesWatcher interface {
	Watch(ctx context.Context, changed func(content bool))
}

// How long a job may take at most: a read of kube-proxy's rules at 10,000 Services takes seconds (a save of
// the whole table), a probe its --probe.timeout.
const rulesTimeout = 30 * time.Second

// How soon after a Service changed its health check node port is probed again: kube-proxy syncs its rules and
// its health check server's counts within its minimum sync period (1 s) of the change, and a busy one later.
var probeFollowUps = []time.Duration{0, 2 * time.Second, 10 * time.Second}

// globals is what every Service's decision reads beside its own inputs: when it moves, every Service is
// decided again and rendered anew (State.Epoch).
type globals struct {
	APIErr, NodeErr      bool
	Node                 kubeview.NodeState
	RulesConfigured      bool
	RulesRead            bool // a snapshot, whatever the error
	RulesErr             string
	Mode                 string
	Backend              string
	Families             []string
	NotProgrammed        bool
	Dataplane            DataplaneKind
	Config               nodeprobe.KubeProxyConfig
	Assigned, NodePorts  []string
	AddrsOK, AddrsListed bool
	MeterEnabled         bool
	MeterStatus          arrivals.Status
	Overloaded           bool
	Announcers           map[announce.Source]announce.SourceState
}

// step brings the model to now: it takes the results the jobs handed back, reads the fast inputs, starts the
// jobs that are due, decides the Services whose inputs changed or whose time came, and publishes a State.
func (m *Model) step(ctx context.Context, now time.Time) {
	s := &m.m
	told := m.rulesChanged.Swap(false)
	if told {
		s.rulesWanted = true
	}
	m.readAPI(now)
	m.readAddrs(now)
	m.askKubeProxy(ctx, now)
	m.takeTold(now)
	m.askRules(ctx, now)
	// A drop decided from rules read since the meter's last read would count from a count older than the
	// drop, attempts served before it included: read the meter after the rules.
	m.readMeter(now, s.meterAt.Before(s.rulesAppliedAt))
	m.askHealthChecks(ctx, now)
	st := m.globalState(now)
	g := m.globalsOf(st)
	moved := !s.primed || !reflect.DeepEqual(g, s.globals)
	// A model that stalled for longer than the quiet period (the process stopped, starved of CPU) forgets when
	// each destination was found dropped, as a scrape after a long gap did: every Service is decided afresh.
	all := moved || m.cfg.DecideAll || m.g.arrivals.stalled(now, m.g.cfg.Quiet)
	m.g.arrivals.forgetIfStalled(now, m.g.cfg.Quiet)
	if moved {
		s.globals = g
		s.epoch++
	}
	s.primed = true
	m.g.exposure.node(st, now)
	m.decide(st, now, all)
	if m.g.cfg.Meter != nil {
		m.g.exposure.checks(s.meterSnap, func(namespace, name string) (kubeview.ServiceState, bool) {
			e := s.services[namespace+"/"+name]
			if e == nil {
				return kubeview.ServiceState{}, false
			}
			return e.state, true
		})
	}
	m.publish(st)
	m.offerState(now)
}

// readAPI brings the Services up to date with the tracker.
func (m *Model) readAPI(now time.Time) {
	s := &m.m
	start := time.Now()
	defer func() { s.took[InputAPI], s.took[InputNode] = time.Since(start), time.Since(start) }()
	changed, err := m.cfg.Tracker.Update(now)
	if err != nil {
		s.apiErr = fmt.Errorf("reading the API view: %w", err)
		hadNode := s.nodeErr == nil && s.kpAsked
		s.nodeErr = s.apiErr
		if m.cfg.Node != nil {
			s.watchInputsMoved = true
			if s.node, err = m.cfg.Node(); err != nil {
				s.nodeErr = fmt.Errorf("reading the API view: %w", err)
			} else {
				s.nodeErr = nil
			}
		}
		if s.nodeErr == nil && !hadNode {
			s.kpNext = now
		}
		return
	}
	if s.nodeErr != nil || s.apiErr != nil {
		s.kpNext = now // kube-proxy is probed where the node says, as soon as it is known
	}
	s.apiErr, s.nodeErr = nil, nil
	node := m.cfg.Tracker.Node()
	if !reflect.DeepEqual(node, s.node) {
		s.watchInputsMoved = true
	}
	s.node = node
	for _, key := range changed {
		st, ok := m.cfg.Tracker.State(key)
		e := s.services[key]
		// Deleted and created again under its name between two reads, it is another Service: what was kept
		// of the old one (its drops, its warnings, what the meter learnt at its destinations) is not its.
		recreated := ok && e != nil && e.state.UID != "" && st.UID != "" && e.state.UID != st.UID
		if !ok || recreated {
			if e != nil {
				delete(s.services, key)
				delete(s.gone, e)
				m.forgetService(e)
				m.g.exposure.gone(e.state.Namespace, e.state.Name, now)
				s.servicesMoved, s.resultsMoved = true, true
			}
			if !ok {
				continue
			}
			e = nil
		}
		if e == nil {
			e = &entry{key: key, sweep: m.sweepAt(key, now, m.cfg.Resweep)}
			s.services[key] = e
			s.servicesMoved, s.resultsMoved = true, true
			s.wakes.push(e.sweep, e)
		} else if !sameDestinations(e.state, st) {
			s.servicesMoved = true
		}
		e.state = st
		s.markDirty(e)
		e.checkDue = e.checkDue[:0]
		for _, d := range probeFollowUps {
			e.checkDue = append(e.checkDue, now.Add(d))
		}
		if !probed(st) {
			e.checks, e.checkedAt, e.checkDue = nil, time.Time{}, nil
		}
		s.checkSoon(e)
	}
	if len(changed) > 0 {
		s.keys = slices.Clone(m.cfg.Tracker.Keys())
		for i, k := range s.keys {
			if e := s.services[k]; e != nil {
				e.idx = i
			}
		}
	}
	s.announcers = m.cfg.Tracker.Announcers()
}

// sameDestinations: the meter watches the same destinations of both states, for the same owner.
func sameDestinations(a, b kubeview.ServiceState) bool {
	return a.UID == b.UID && reflect.DeepEqual(a.Ports, b.Ports) && slices.Equal(a.ExternalIPs, b.ExternalIPs) &&
		slices.Equal(a.LoadBalancerIPs, b.LoadBalancerIPs) && a.Type == b.Type && a.HealthCheckNodePort == b.HealthCheckNodePort &&
		familiesOf(a) == familiesOf(b)
}

func familiesOf(s kubeview.ServiceState) string {
	out := ""
	for _, f := range s.Families {
		out += string(f.Family) + ","
	}
	return out
}

// forgetService drops what the trackers kept of a Service that is gone.
func (m *Model) forgetService(e *entry) {
	g := m.g
	g.gone.forgetService(e.state.Namespace, e.state.Name, nil)
	g.arrivals.recordService(e.result, nil, time.Time{})
	g.checkers.forgetService(e.state.Namespace, e.state.Name, nil)
	g.outcomes.forget("health-check/" + e.state.Namespace + "/" + e.state.Name + "/")
}

// sweepAt is when a Service's periodic work (its safety sweep, its health check's sweep) comes next: staggered
// by its key over the second half of period, so that sweeps do not come all at once, then rounded up to a tick
// of period/sweepTicks, so that the model wakes for a batch of Services a few times a period rather than once
// per Service. (At 1,000 Services one wake per Service meant a step every 100 ms, whose fixed part — the API
// view, the node-level state, publishing — cost more than the decisions it was woken for.)
func (m *Model) sweepAt(key string, now time.Time, period time.Duration) time.Time {
	tick := period / sweepTicks
	h := fnv.New32a()
	h.Write([]byte(key))
	// The hash's share of the span: a 32-bit hash modulo a span of nanoseconds would cover only its first 4.3 s.
	at := now.Add(period/2 + time.Duration(float64(period/2-tick)*float64(h.Sum32())/(1<<32)))
	if tick <= 0 {
		return at
	}
	if r := at.Sub(at.Truncate(tick)); r > 0 { // within period still: the stagger stops a tick short of it
		at = at.Add(tick - r) // (Add keeps the monotonic reading Truncate drops)
	}
	return at
}

// sweepTicks is how many batches a sweep period has.
const sweepTicks = 12

// readAddrs lists the node's addresses when due; a change makes every health check node port due.
func (m *Model) readAddrs(now time.Time) {
	s := &m.m
	if !m.addrsChanged.Swap(false) && s.addrsNext.After(now) && s.primed {
		return
	}
	start := time.Now()
	local, assigned, err := m.g.readAddrs()
	s.took[InputAddrs] = time.Since(start)
	s.addrsNext = now.Add(m.cfg.AddrsEvery)
	if m.addrsWatched.Load() {
		s.addrsNext = now.Add(m.cfg.AddrsSweep)
	}
	if ipStrings(local) != ipStrings(s.local) || ipStrings(assigned) != ipStrings(s.assigned) || (err == nil) != (s.addrsErr == nil) {
		m.probeAll(now)
		s.watchInputsMoved = true
	}
	s.local, s.assigned, s.addrsErr = local, assigned, err
}

func ipStrings(ips []net.IP) string {
	out := ""
	for _, ip := range ips {
		out += ip.String() + ","
	}
	return out
}

// probeAll makes every health check node port due now.
func (m *Model) probeAll(now time.Time) {
	for _, e := range m.m.services {
		if probed(e.state) {
			e.checkDue = append(e.checkDue[:0], now)
			m.m.checkSoon(e)
		}
	}
}

// askKubeProxy starts a read of kube-proxy's /configz and a probe of its health server when due.
func (m *Model) askKubeProxy(ctx context.Context, now time.Time) {
	s := &m.m
	if s.kpBusy || s.kpNext.After(now) && s.kpAsked {
		return
	}
	if s.nodeErr != nil && s.kpAsked {
		return
	}
	s.kpBusy, s.kpAsked = true, true
	node, nodeErr := s.node, s.nodeErr
	g := m.g
	m.job(ctx, func() func() {
		jctx, cancel := context.WithTimeout(ctx, g.cfg.ProbeTimeout+configzTimeout+time.Second)
		defer cancel()
		start := time.Now()
		cfg, cfgState, cfgErr := g.kubeProxyConfig(jctx)
		var kp KubeProxyState
		if nodeErr == nil {
			kp = g.probeKubeProxy(jctx, node, cfg)
			if g.cfg.KubeProxyAddress == nil && kp.Err == nil && kp.Healthz.StatusCode == 0 && kp.Livez.StatusCode == 0 {
				// Nothing answered where the configuration says: kube-proxy may have restarted with another
				// one (its health server moved). Read /configz again next time, not in a minute.
				g.configz.markStale()
			}
		}
		took := time.Since(start)
		return func() {
			s.kpBusy = false
			s.kpNext = m.cfg.Now().Add(m.cfg.KubeProxyEvery)
			if nodeErr != nil && s.nodeErr == nil {
				s.kpNext = m.cfg.Now() // asked before the node was known: ask again where it says
			}
			s.took[InputKubeProxy] = took
			if healthWord(kp) != healthWord(s.kp) || !reflect.DeepEqual(cfg, s.kpCfg) {
				// kube-proxy restarted, turned unhealthy or moved: its health check server answers anew.
				m.probeAll(m.cfg.Now())
				s.watchInputsMoved = true
			}
			s.kp, s.kpCfg, s.kpCfgState, s.kpCfgErr = kp, cfg, cfgState, cfgErr
			s.kpAnswered = s.kpAnswered || nodeErr == nil
		}
	})
}

// healthWord is what of kube-proxy's health answers changes its health check servers' answers.
func healthWord(kp KubeProxyState) string {
	return fmt.Sprint(kp.Err != nil, kp.Healthz.Result, kp.Healthz.StatusCode, kp.Livez.Result, kp.Livez.StatusCode)
}

// takeTold marks a change of the rules' content the reader told of (RulesChanged) with the meter's counts
// now: what arrives from here on meets the new rules, which are read up to RulesMinInterval later. The latest
// change marked before the read dates what it shows: where two came before it, a drop begun at the first is
// dated late and counts fewer attempts, never attempts that were served. A rewrite of the counters' chains
// alone marks nothing: kube-proxy's iptables mode rewrites them at most syncs (the removal of a stopped
// endpoint, too), and one told after a drop, before the read that shows it, would date the drop late.
func (m *Model) takeTold(now time.Time) {
	if !m.rulesContent.Swap(false) {
		return
	}
	s := &m.m
	m.readMeter(now, true)
	s.told = rulesTold{at: now, counts: s.meterSnap}
	m.log.Debug("told of a change in kube-proxy's rules", "meter_read", s.meterAt)
}

// askRules starts a read of kube-proxy's rules when one is wanted (the reader told of a change) or due (the
// drop counters), at most once per RulesMinInterval.
func (m *Model) askRules(ctx context.Context, now time.Time) {
	s := &m.m
	r := m.g.cfg.RuleReader
	if r == nil || s.rulesBusy || now.Before(s.rulesAfter) || !s.rulesWanted && s.rulesNext.After(now) && s.rulesAsked {
		return
	}
	wanted := s.rulesWanted
	s.rulesBusy, s.rulesWanted, s.rulesAsked = true, false, true
	s.toldRead, s.told = s.told, rulesTold{}
	m.job(ctx, func() func() {
		jctx, cancel := context.WithTimeout(ctx, rulesTimeout)
		defer cancel()
		start := time.Now()
		snap, err := r.Read(jctx)
		if err != nil {
			err = fmt.Errorf("reading %s: %w", m.g.cfg.Dataplane.Read(), err)
		}
		took := time.Since(start)
		return func() {
			now := m.cfg.Now()
			s.rulesBusy = false
			s.rulesNext, s.rulesAfter = now.Add(m.rulesEvery(snap, err)), now.Add(m.cfg.RulesMinInterval)
			s.took[InputRules] = took
			s.rulesRead = true
			s.toldApplied, s.rulesAppliedAt = s.toldRead, now
			m.log.Debug("dataplane read", "read", m.g.cfg.Dataplane.Read(), "took", took, "wanted", wanted, "err", err)
			m.applyRules(snap, err)
		}
	})
}

// rulesEvery is how often the rules are read without being told of a change, after a read that gave snap
// (err): a reader that tells (a RulesWatcher) only for its drop counters, and when its read found none (nftables
// mode as kube-proxy writes it), which only a change moves, every RulesSweep; another as often as a scrape used
// to read them.
func (m *Model) rulesEvery(snap dataplane.Rules, err error) time.Duration {
	if _, ok := m.g.cfg.RuleReader.(RulesWatcher); !ok {
		return min(m.cfg.RulesEvery, 2*time.Second)
	}
	if err == nil && snap != nil && !snap.Info().Counted {
		return max(m.cfg.RulesEvery, m.cfg.RulesSweep)
	}
	return m.cfg.RulesEvery
}

// applyRules takes a read of kube-proxy's rules: every Service whose ports read differently is decided again,
// and probed (kube-proxy synced it: its health check server counts anew).
func (m *Model) applyRules(snap dataplane.Rules, err error) {
	s := &m.m
	old, oldErr := s.rules, s.rulesErr
	s.rules, s.rulesErr = snap, err
	usable := func(sn dataplane.Rules, e error) dataplane.Rules {
		if e != nil {
			return nil
		}
		return sn
	}
	prev, cur := usable(old, oldErr), usable(snap, err)
	now := m.cfg.Now()
	for _, e := range s.services {
		if !samePorts(prev, cur, e.state) {
			s.markDirty(e)
			if probed(e.state) {
				e.checkDue = append(e.checkDue[:0], now)
				s.checkSoon(e)
			}
		}
	}
	// The counters' evidence: when each destination's drop rule counter last grew.
	st := &State{Rules: snap, RulesErr: err}
	services := m.serviceStates()
	s.evidence = m.g.evidence(st, kubeview.Snapshot{Services: services})
	// The counters' evidence is judged at each read's time (and says how long ago the counter grew): a Service
	// whose counter's growth was within a window at the last read is decided again at each read, until the
	// read that finds every window of it ended.
	for _, e := range s.services {
		if !e.growthDue.IsZero() {
			s.markDirty(e)
		}
		e.growthDue = m.growthDue(e)
	}
	if cur != nil {
		seen := make(map[counterKey]bool, len(services)) // sized: grown from empty it was rehashed at every read
		for _, svc := range services {
			for _, fam := range svc.Families {
				for _, p := range fam.Ports {
					seen[counterKey{namespace: svc.Namespace, name: svc.Name, port: p.Name, protocol: string(p.Protocol), family: string(fam.Family)}] = true
				}
			}
		}
		m.g.drops.forget(seen)
	}
}

// growthDue is the latest end of an evidence window of the Service's drop rule counters' growth after the
// evidence's read (zero: every one ended).
func (m *Model) growthDue(e *entry) time.Time {
	ev := m.m.evidence
	var next time.Time
	for k, at := range ev.grewAt {
		if k.namespace != e.state.Namespace || k.name != e.state.Name {
			continue
		}
		for _, w := range []time.Duration{ev.window, ev.lossWindow} {
			// Arriving holds up to and including the window's end.
			if end := at.Add(w); !end.Before(ev.at) && end.After(next) {
				next = end
			}
		}
	}
	return next
}

// samePorts: the Service's ports read the same in both snapshots (nil: not read).
func samePorts(a, b dataplane.Rules, svc kubeview.ServiceState) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	for _, fam := range svc.Families {
		f := string(fam.Family)
		if a.HasFamily(f) != b.HasFamily(f) {
			return false
		}
		for _, p := range fam.Ports {
			sp := dataplane.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Name, Protocol: string(p.Protocol)}
			if !reflect.DeepEqual(a.Family(sp, f), b.Family(sp, f)) {
				return false
			}
		}
	}
	return true
}

// serviceStates lists the Services' states in key order.
func (m *Model) serviceStates() []kubeview.ServiceState {
	out := make([]kubeview.ServiceState, 0, len(m.m.keys))
	for _, k := range m.m.keys {
		if e := m.m.services[k]; e != nil {
			out = append(out, e.state)
		}
	}
	return out
}

// readMeter tells the meter the destinations when they changed, and takes its counts when it counted
// something new (at most every MeterEvery) or MeterIdle passed. The Services whose destinations' counts
// changed are decided again.
func (m *Model) readMeter(now time.Time, force bool) {
	s := &m.m
	meter := m.g.cfg.Meter
	if meter == nil {
		return
	}
	start := time.Now()
	watched := false
	stale := false
	if s.apiErr == nil && (s.watchInputsMoved || s.watchKey == "") {
		stale, s.watchInputsMoved = s.watchStale(m), false
	}
	if s.apiErr == nil && (s.servicesMoved || stale) {
		st := m.addrState()
		services := m.serviceStates()
		s.watchErr = m.g.watchMeter(st, s.node.PodCIDRs, services)
		s.kinds = destKinds(services)
		s.destOwners = destOwners(services)
		s.servicesMoved, watched = false, true
		s.watchKey = watchKeyOf(st, s.node.PodCIDRs)
	}
	activity := uint64(0)
	act, hasActivity := meter.(ArrivalsActivity)
	if hasActivity {
		activity = act.Activity()
	}
	due := s.meterSnap == nil || watched || force || now.Sub(s.meterAt) >= m.cfg.MeterIdle ||
		!hasActivity && now.Sub(s.meterAt) >= m.cfg.MeterEvery ||
		activity != s.meterActivity && now.Sub(s.meterAt) >= m.cfg.MeterEvery
	if !due {
		return
	}
	snap := meter.Snapshot()
	old := s.meterSnap
	s.meterSnap, s.meterAt, s.meterActivity = &snap, now, activity
	s.totals = m.g.arrivals.add(&snap, s.kinds)
	s.took[InputArrivals] = time.Since(start)
	if old == nil || old.Status != snap.Status {
		return // a global change: every Service is decided again
	}
	moved := func(c arrivals.DestCount) {
		if o, ok := old.Dest(c.Dest); ok && sameCount(o, c) {
			return
		}
		for _, k := range s.destOwners[c.Dest] {
			if e := s.services[k]; e != nil {
				s.markDirty(e)
			}
		}
	}
	for _, c := range snap.Dests {
		moved(c)
	}
	if watched {
		// Only a new watch makes or changes an idle destination (a counted one never goes back to idle).
		for _, c := range snap.Idle {
			moved(arrivals.DestCount{Dest: c.Dest, WatchedSince: c.WatchedSince})
		}
	}
}

// sameCount: what the verdict reads of a destination's count did not change.
func sameCount(a, b arrivals.DestCount) bool {
	return a.Attempts == b.Attempts && a.LastSeen.Equal(b.LastSeen) && a.ActiveSince.Equal(b.ActiveSince) &&
		a.WatchedSince.Equal(b.WatchedSince) && a.SetAside == b.SetAside && a.Clients == b.Clients &&
		a.LastNewFlow.Equal(b.LastNewFlow) && a.Restored == b.Restored && slices.Equal(a.Checkers, b.Checkers)
}

// destOwners maps each meter destination to the Services it is a destination (or health check) of.
func destOwners(services []kubeview.ServiceState) map[arrivals.Dest][]string {
	out := map[arrivals.Dest][]string{}
	for _, svc := range services {
		key := svc.Namespace + "/" + svc.Name
		for _, fam := range svc.Families {
			Destinations(svc, fam, func(d verdict.Destination) {
				if ad, ok := MeterDest(d); ok && !slices.Contains(out[ad], key) {
					out[ad] = append(out[ad], key)
				}
			})
		}
	}
	return out
}

// askHealthChecks starts the health check node port probes that are due, at most Concurrency at a time.
func (m *Model) askHealthChecks(ctx context.Context, now time.Time) {
	s := &m.m
	if s.apiErr != nil {
		return
	}
	var addrOf func(corev1.IPFamily) string
	for s.probes < m.g.cfg.Concurrency {
		it, ok := s.checks.peek(s.checkLive)
		if !ok || it.at.After(now) {
			return
		}
		s.checks.pop()
		e := it.e
		if e.probing {
			continue // its probe's end schedules the next one
		}
		if addrOf == nil {
			addrOf = m.g.healthCheckAddrs(s.node, s.local, s.kpCfg)
		}
		e.probing = true
		s.probes++
		svc, sent := e.state, now
		m.job(ctx, func() func() {
			jctx, cancel := context.WithTimeout(ctx, m.g.cfg.ProbeTimeout)
			defer cancel()
			start := time.Now()
			checks := m.g.probeService(jctx, svc, addrOf, func(f func()) { f() })
			took := time.Since(start)
			return func() {
				s.probes--
				e.probing = false
				if cur := s.services[e.key]; cur != e || !reflect.DeepEqual(cur.state, svc) {
					if cur == e {
						s.checkSoon(e) // changed meanwhile: its own probes are due
					}
					return
				}
				now := m.cfg.Now()
				s.took[InputHealthChecks] = took
				e.checks, e.checkedAt = checks, sent
				s.markDirty(e)
				for len(e.checkDue) > 0 && !e.checkDue[0].After(now) {
					e.checkDue = e.checkDue[1:]
				}
				if len(e.checkDue) == 0 {
					e.checkDue = append(e.checkDue, m.sweepAt(e.key, now, m.cfg.HealthCheckSweep))
				}
				s.checkSoon(e)
			}
		})
	}
}

// addrState is a State holding what the model knows of the node's addresses and kube-proxy's configuration:
// what the meter's Watch and the NodePort addresses are computed from.
func (m *Model) addrState() *State {
	s := &m.m
	st := &State{Node: s.node, LocalAddrs: s.local, AssignedAddrs: s.assigned, AddrsErr: s.addrsErr, KubeProxyConfig: s.kpCfg}
	st.NodePortAddrs = nodePortAddrs(st)
	return st
}

// globalState is the State of this pass without its Services: everything the decisions share.
func (m *Model) globalState(now time.Time) *State {
	s := &m.m
	st := m.addrState()
	st.took = make(map[Input]time.Duration, len(s.took))
	for k, v := range s.took {
		st.took[k] = v
	}
	st.APIErr, st.NodeErr = s.apiErr, s.nodeErr
	st.Rules, st.RulesErr, st.RulesConfigured = s.rules, s.rulesErr, m.g.cfg.RuleReader != nil
	st.KubeProxy = s.kp
	if s.nodeErr != nil {
		st.KubeProxy = KubeProxyState{}
	} else if !s.kpAnswered {
		st.KubeProxy = KubeProxyState{Err: fmt.Errorf("kube-proxy's health server: %w", ErrNotYetRead)}
	}
	if st.RulesConfigured && !s.rulesRead {
		st.RulesErr = fmt.Errorf("%s: %w", m.g.cfg.Dataplane.Read(), ErrNotYetRead)
	}
	st.KubeProxyConfigState, st.KubeProxyConfigErr = s.kpCfgState, s.kpCfgErr
	if st.KubeProxyConfigState == "" {
		st.KubeProxyConfigState = ConfigDefaults
		if m.g.cfg.ConfigzURL == "" {
			st.KubeProxyConfigState = ConfigNotRead
		}
	}
	st.Announcers = s.announcers
	if m.g.cfg.Informers != nil {
		st.Informers = m.g.cfg.Informers.Informers()
	}
	if m.g.cfg.Meter != nil {
		st.Arrivals = ArrivalsState{Enabled: true, Snapshot: s.meterSnap, WatchErr: s.watchErr, Totals: s.totals}
	}
	// The dataplane is decided again only with a new read of the rules or of /configz (FindReplacement lists
	// the links): both moved the globals then.
	st.Dataplane = m.g.dataplane(st)
	return st
}

// globalsOf is what of st every decision reads.
func (m *Model) globalsOf(st *State) globals {
	g := globals{APIErr: st.APIErr != nil, NodeErr: st.NodeErr != nil, Node: st.Node, RulesConfigured: st.RulesConfigured,
		RulesRead: st.Rules != nil, NotProgrammed: st.NotProgrammed, Dataplane: st.Dataplane, Config: st.KubeProxyConfig,
		AddrsOK: st.AddrsErr == nil, AddrsListed: len(st.LocalAddrs) > 0, MeterEnabled: st.Arrivals.Enabled,
		Announcers: st.Announcers}
	if st.RulesErr != nil {
		g.RulesErr = st.RulesErr.Error()
	}
	if st.Rules != nil {
		info := st.Rules.Info()
		g.Mode, g.Backend, g.Families = info.Mode, info.Backend, info.Families
	}
	for _, ip := range st.AssignedAddrs {
		g.Assigned = append(g.Assigned, ip.String())
	}
	for _, ip := range st.NodePortAddrs {
		g.NodePorts = append(g.NodePorts, ip.String())
	}
	if st.Arrivals.Snapshot != nil {
		g.MeterStatus = st.Arrivals.Snapshot.Status
		g.Overloaded = m.g.arrivals.overloaded(m.cfg.Now(), m.g.cfg.Quiet)
	}
	return g
}

// decide decides again the Services whose inputs changed, whose time-driven change came, or whose sweep is due
// (every Service when all).
func (m *Model) decide(st *State, now time.Time, all bool) {
	s := &m.m
	if st.APIErr != nil {
		return
	}
	p := m.g.newPass(st)
	p.ev = s.evidence
	if st.Rules == nil || st.RulesErr != nil {
		p.ev = scrapeEvidence{grewAt: map[ruleKey]time.Time{}, window: m.g.cfg.ExternalIPWindow,
			lossWindow: max(m.g.cfg.ExternalIPWindow, m.g.cfg.LossHold)}
	}
	p.dropped = m.g.arrivals.droppedAt
	p.prepare(now)
	defer m.g.arrivals.looked(now)
	apiSeen, _ := endpointSlicesSeen(st)
	apiMoved := !apiSeen.Equal(s.seenAPI)
	s.seenAPI = apiSeen
	if all {
		for _, k := range s.keys {
			if e := s.services[k]; e != nil {
				m.decideOne(p, e, now)
			}
		}
		s.dirty = s.dirty[:0]
	} else {
		for _, e := range s.due(now, apiMoved) {
			m.decideOne(p, e, now)
		}
	}
	if all && p.observed != nil {
		// Each decision keeps its own destinations' dropped-since times; a pass over every Service also forgets
		// those of destinations nobody has (what the state file carried of a Service gone while the exporter
		// was down).
		results := make([]*ServiceResult, 0, len(s.services))
		for _, e := range s.services {
			if e.result != nil {
				results = append(results, e.result)
			}
		}
		m.g.arrivals.prune(results)
	}
}

// decideOne decides one Service and schedules its next time-driven decision.
func (m *Model) decideOne(p *pass, e *entry, now time.Time) {
	s := &m.m
	m.decided.Add(1)
	seen := map[counterKey]bool{}
	seenGone := map[goneKey]bool{}
	p.pendingGone = false
	r := p.decideService(e.state, e.checks, seen, seenGone)
	m.g.gone.forgetService(e.state.Namespace, e.state.Name, seenGone)
	if p.observed != nil {
		m.g.arrivals.recordService(e.result, &r, now)
		m.g.checkers.warnService(&r, m.log)
	}
	m.g.exposure.decided(p, s.node, &r, now, s.toldApplied, e.checkedAt)
	if e.result != nil {
		r.Rev = e.result.Rev
	}
	// Pointers, not values: a value in an interface is a copy of the whole result on the heap, twice per
	// decision, and the safety sweep decides every Service once a minute.
	if e.result == nil || !reflect.DeepEqual(e.result, &r) {
		s.rev++
		r.Rev = s.rev
		e.result = &r
		s.resultsMoved = true
	}
	e.dirty = false
	e.sweep = m.sweepAt(e.key, now, m.cfg.Resweep)
	e.due = m.dueOf(e, p, now)
	s.scheduled(e, p.pendingGone)
}

// dueOf is the next time the Service's verdict may change with nothing but time passing: a run of arrivals
// ending (the quiet period after the last attempt), a destination turning silent (the quiet period after it
// was first watched), a loss hold ending. Zero when none comes.
func (m *Model) dueOf(e *entry, p *pass, now time.Time) time.Time {
	if p.observed == nil || p.observed.snap == nil {
		return time.Time{}
	}
	cfg := m.g.cfg
	var next time.Time
	cand := func(t time.Time) {
		if t.IsZero() || !t.After(now) {
			return
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, fam := range e.state.Families {
		Destinations(e.state, fam, func(d verdict.Destination) {
			ad, ok := MeterDest(d)
			if !ok {
				return
			}
			c, ok := p.observed.snap.Dest(ad)
			if !ok {
				return
			}
			cand(c.WatchedSince.Add(cfg.Quiet))
			if c.Attempts > 0 {
				cand(c.LastSeen.Add(cfg.Quiet))
				cand(c.LastSeen.Add(cfg.LossHold))
			}
			if c.SetAside && c.Clients.Attempts > 0 {
				cand(c.Clients.LastSeen.Add(cfg.Quiet))
			}
			// A dropped destination's loss rests on repeated arrivals alone (a port scan's single SYNs are none).
			for _, r := range []arrivals.RepeatCount{c.Repeated, c.Clients.Repeated} {
				if r.Attempts > 0 {
					cand(r.LastSeen.Add(cfg.Quiet))
					cand(r.LastSeen.Add(cfg.LossHold))
				}
			}
		})
	}
	return next
}

// publish makes st, with every Service's latest result, the State that scrapes render. The first State with
// verdicts waits for the first answer of the inputs that decide a drop (kube-proxy's rules, the health check
// node ports), as a scrape of the full recomputation read them before it answered: a verdict from the API view
// alone, while the rules are being read, would page for a Service kube-proxy has not programmed yet (its
// NodePort refused, not dropped). Each of those reads has its own deadline, so the wait ends; kube-proxy's
// health server is not waited for (a hanging one is a state the first scrape shows). A State that says the API
// view is not ready is published at once: it holds no verdict.
func (m *Model) publish(st *State) {
	s := &m.m
	if !s.settled {
		if st.APIErr == nil && !m.firstAnswered() {
			return
		}
		s.settled = st.APIErr == nil
	}
	st.Epoch = s.epoch
	if st.APIErr == nil {
		if s.resultsMoved || s.published == nil || s.publishedEpoch != s.epoch || len(s.published) != len(s.keys) {
			s.published = make([]*ServiceResult, 0, len(s.keys))
			for _, k := range s.keys {
				if e := s.services[k]; e != nil && e.result != nil {
					s.published = append(s.published, e.result)
				}
			}
			s.resultsMoved, s.publishedEpoch = false, s.epoch
		}
		st.Services = s.published
	}
	st.StateFile = m.g.cfg.State.State()
	st.Exposure = m.g.exposure.snapshot()
	m.cur.Store(st)
	if s.settled {
		m.once.Do(func() { close(m.first) })
	}
}

// firstAnswered: the inputs publish waits for answered once (or failed): the rules when there is a reader,
// and every health check node port.
func (m *Model) firstAnswered() bool {
	s := &m.m
	if m.g.cfg.RuleReader != nil && (!s.rulesAsked || s.rulesBusy) || s.probes > 0 {
		return false
	}
	for _, e := range s.services {
		if probed(e.state) && len(e.checks) == 0 {
			return false
		}
	}
	return true
}

// idle: a timer woke the model only to look at the meter, which counted nothing new, and nothing else is due:
// the step is skipped (a step at rest would cost a pass over every Service every second for nothing).
func (m *Model) idle(now time.Time) bool {
	s := &m.m
	if !s.primed || m.rulesChanged.Load() || m.addrsChanged.Load() || !s.nextWork.After(now) {
		return false
	}
	if m.g.cfg.Meter == nil {
		return true
	}
	act, ok := m.g.cfg.Meter.(ArrivalsActivity)
	return ok && act.Activity() == s.meterActivity && now.Sub(s.meterAt) < m.cfg.MeterIdle
}

// next is when the model must look again without being told: the earliest input poll, time-driven change,
// sweep or probe due.
func (m *Model) next(now time.Time) time.Time {
	next := m.work(now)
	m.m.nextWork = next
	if m.g.cfg.Meter != nil && now.Add(m.cfg.MeterEvery).Before(next) {
		next = now.Add(m.cfg.MeterEvery)
	}
	return next
}

// work is when something other than the meter's polling is due: an input's poll, a time-driven change, a
// sweep, a probe.
func (m *Model) work(now time.Time) time.Time {
	s := &m.m
	next := now.Add(m.cfg.Resweep)
	cand := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	cand(s.addrsNext)
	if !s.kpBusy {
		cand(s.kpNext)
	}
	if m.g.cfg.RuleReader != nil && !s.rulesBusy {
		if s.rulesWanted {
			cand(s.rulesAfter)
		} else {
			cand(s.rulesNext)
		}
	}
	if until := m.g.arrivals.overloadedUntil(m.g.cfg.Quiet); m.g.cfg.Meter != nil && until.After(now) {
		cand(until) // the meter's silence means something again then
	}
	cand(m.cfg.Tracker.NextChange())
	cand(m.g.exposure.next()) // an exposure episode's quiet period ends
	if it, ok := s.wakes.peek(s.wakeLive); ok {
		cand(it.at)
	}
	if s.probes < m.g.cfg.Concurrency {
		cand(s.probeNext()) // (with every slot taken, a probe's end wakes the model)
	}
	return next
}

// watchStale: the meter's Watch was built from other addresses, another configuration or other pod CIDRs.
func (s *modelState) watchStale(m *Model) bool {
	return watchKeyOf(m.addrState(), s.node.PodCIDRs) != s.watchKey
}

// watchKeyOf is what, beside the Services, the meter's Watch is built from.
func watchKeyOf(st *State, podCIDRs []string) string {
	return fmt.Sprint(ipStrings(st.NodePortAddrs), ipStrings(st.LocalAddrs), st.KubeProxyConfig.DetectLocal, podCIDRs)
}
