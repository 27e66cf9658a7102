package scrape

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The node model. The exporter used to think only when scraped: every scrape read every input, decided every
// Service and rendered every series, so its cost grew with Prometheus' cadence and the number of Services, and
// a verdict's timing depended on when Prometheus asked. The model instead keeps the node's state current as
// its inputs change — informer events, kube-proxy's rule changes, the meter's arrivals, health check answers,
// and a timer for every time-driven transition — deciding again only the Services whose inputs changed, and
// publishes a read-only State after each change. A scrape renders the latest State (Model.Gather); it reads,
// it never gathers.
//
// Who owns what: one goroutine (Run) owns the model's state and every decision. The slow inputs (kube-proxy's
// rules, its health server and /configz, the health check node ports) are read by jobs off that goroutine,
// which hand their results back to it; the fast ones (the API view's tracker, the node's addresses, the
// meter's counts) it reads itself.

// APITracker is what the model reads of the API view: kubeview.Tracker.
type APITracker interface {
	Update(now time.Time) ([]string, error)
	Keys() []string
	State(key string) (kubeview.ServiceState, bool)
	Node() kubeview.NodeState
	Announcers() map[announce.Source]announce.SourceState
	NextChange() time.Time
}

// ArrivalsActivity is a meter that tells, cheaply, whether a Snapshot would count anything new
// (*arrivals.Meter).
type ArrivalsActivity interface {
	Activity() uint64
}

// ModelConfig is how often the model asks the inputs that do not tell it when they change. Zero values are
// the defaults.
type ModelConfig struct {
	// Tracker is the API view kept current by events; required.
	Tracker APITracker
	// Node is this node's state alone, for the kube-proxy probes before the Service informers synced (nil:
	// none until they have).
	Node func() (kubeview.NodeState, error)
	// KubeProxyEvery: kube-proxy's /healthz and /livez (and /configz, within its own minute) are asked this
	// often (default 10 s).
	KubeProxyEvery time.Duration
	// AddrsEvery: the node's addresses are listed this often where nothing tells of their changes (default
	// 5 s); with a nodeprobe.AddrWatcher, when it tells, and every AddrsSweep (default 1 min) besides.
	AddrsEvery, AddrsSweep time.Duration
	// RulesEvery: kube-proxy's rules are read at least this often, for the drop counters (default 15 s); a
	// rule reader that tells its changes (a RulesWatcher) is read as soon as they come, at most once per
	// RulesMinInterval (default 1 s), and, while its last read found no drop rule with a counter (nftables
	// mode: kube-proxy puts none on its elements), only every RulesSweep besides (default 5 min): its rules
	// then change only as it tells.
	RulesEvery, RulesMinInterval, RulesSweep time.Duration
	// HealthCheckSweep: every health check node port is probed again at least this often (default 5 min),
	// beside the probes its Service's changes, its rules' changes and kube-proxy's answers ask for: kube-proxy
	// answers from the rules it synced and its own health, both of which the model follows.
	HealthCheckSweep time.Duration
	// MeterEvery: the meter's counts are taken at most this often while arrivals come (default 1 s), and at
	// least every MeterIdle (default 10 s) for its own statistics.
	MeterEvery, MeterIdle time.Duration
	// Resweep: every Service is decided again at least this often (default 5 min), whatever the model knows
	// of its inputs: a bound on any time-driven change the model has no timer for. The property test holds the
	// model equal to a full recomputation with no sweep at all, so the sweep is a net, not a source of truth;
	// at 1 min it was most of the model's work at 1,000 Services (docs/performance.md).
	Resweep time.Duration
	// MinPass spaces the model's evaluations, so that a burst of events is decided once (default 100 ms).
	MinPass time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Synchronous runs the model's jobs (rule reads, probes) within Step instead of beside it, so that a
	// test that drives Step itself gets a deterministic model. Run never needs it.
	Synchronous bool
	// DecideAll decides every Service at every step: the full recomputation the model's incremental one is
	// held equal to in tests (it costs O(Services) per step).
	DecideAll bool
}

func (c ModelConfig) withDefaults() ModelConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.KubeProxyEvery, 10*time.Second)
	def(&c.AddrsEvery, 5*time.Second)
	def(&c.AddrsSweep, time.Minute)
	def(&c.RulesEvery, 15*time.Second)
	def(&c.RulesMinInterval, time.Second)
	def(&c.RulesSweep, 5*time.Minute)
	def(&c.HealthCheckSweep, 5*time.Minute)
	def(&c.MeterEvery, time.Second)
	def(&c.MeterIdle, 10*time.Second)
	def(&c.Resweep, 5*time.Minute)
	def(&c.MinPass, 100*time.Millisecond)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Model is the node model (see above). NewModel builds it, Run runs it, Gather hands out its latest State.
type Model struct {
	g   *Gatherer
	cfg ModelConfig
	log *slog.Logger

	kick    chan struct{} // an input changed: evaluate
	results chan func()   // a job's result, applied by Run's goroutine
	cur     atomic.Pointer[State]
	first   chan struct{} // closed once a State is published
	once    sync.Once
	// writer writes the state file off the model's goroutine (nil: no state file).
	writer *stateWriter
	// rulesChanged: the rule reader told of a change (RulesWatcher) since the last step; rulesContent: of one
	// that was more than a counter chain's rewrite, not yet marked (takeTold); addrsChanged: the address
	// watcher told of one; addrsWatched: it runs and has not failed.
	rulesChanged, rulesContent, addrsChanged, addrsWatched atomic.Bool
	decided                                                atomic.Uint64

	m modelState // Run's goroutine only
}

// NewModel returns the node model over g's inputs and settings.
func NewModel(g *Gatherer, cfg ModelConfig) *Model {
	cfg = cfg.withDefaults()
	m := &Model{g: g, cfg: cfg, log: g.cfg.Logger, kick: make(chan struct{}, 1), results: make(chan func(), 64),
		first: make(chan struct{})}
	if g.cfg.State != nil {
		m.writer = newStateWriter(g.cfg.State)
	}
	m.m = newModelState()
	return m
}

// Notify wakes the model: an input changed. It never blocks (a wake-up pending covers this one).
func (m *Model) Notify() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Gather returns the latest State: the node model's, with the node-level reads that cost nothing taken now
// (the informers' status, the state file's). Before the first evaluation it waits for it, at most until ctx
// ends (then a State that says the API view is not ready). It never reads a source: the model does.
func (m *Model) Gather(ctx context.Context) *State {
	select {
	case <-m.first:
	case <-ctx.Done():
		if cur := m.cur.Load(); cur != nil {
			// The API view is not ready: that State says so.
			st := *cur
			st.StateFile = m.g.cfg.State.State()
			return &st
		}
		st := &State{took: map[Input]time.Duration{}, RulesConfigured: m.g.cfg.RuleReader != nil,
			APIErr: fmt.Errorf("the node model has not evaluated yet: %w", ctx.Err()), NodeErr: ctx.Err(),
			StateFile: m.g.cfg.State.State()}
		return st
	}
	st := *m.cur.Load()
	if m.g.cfg.Informers != nil {
		st.Informers = m.g.cfg.Informers.Informers()
	}
	st.StateFile = m.g.cfg.State.State()
	return &st
}

// RulesChanged tells the model that kube-proxy's rules changed (what a RulesWatcher's callback does): the next
// step reads them. content: more than a rewrite of the chains whose counters a read carries may have changed,
// so the change may begin a drop (takeTold marks it).
func (m *Model) RulesChanged(content bool) {
	if content {
		m.rulesContent.Store(true)
	}
	m.rulesChanged.Store(true)
	m.Notify()
}

// Step brings the model to now once: what Run does at each wake-up. Tests drive it with their own clock.
func (m *Model) Step(ctx context.Context, now time.Time) {
	m.drainResults()
	m.step(ctx, now)
}

// Decided is how many times the model decided a Service since it started: its cost, which tests compare with
// the full recomputation's.
func (m *Model) Decided() uint64 { return m.decided.Load() }

// Ready: the model has published a State decided from the API view (its informers synced) and the first
// answers of its other inputs (publish).
func (m *Model) Ready() bool {
	st := m.cur.Load()
	return st != nil && st.APIErr == nil // (publish stores none with verdicts before those answers)
}

// Latest is the latest published State as it was published (nil before the first): what the tests of the
// model compare.
func (m *Model) Latest() *State { return m.cur.Load() }

// Run evaluates until ctx ends, then writes the state file one last time.
func (m *Model) Run(ctx context.Context) {
	if m.writer != nil {
		go m.writer.run(ctx)
	}
	if w, ok := m.g.cfg.RuleReader.(RulesWatcher); ok {
		go w.Watch(ctx, m.RulesChanged)
	}
	if w, ok := m.g.cfg.Addrs.(nodeprobe.AddrWatcher); ok {
		changed := func() {
			m.addrsChanged.Store(true)
			m.Notify()
		}
		failed := func(err error) {
			m.log.Warn("address and link notifications failed: listing the node's addresses every few seconds instead", "err", err)
			m.addrsWatched.Store(false)
			changed()
		}
		if err := w.WatchAddrs(ctx, changed, failed); err != nil {
			m.log.Warn("no address and link notifications: listing the node's addresses every few seconds instead", "err", err)
		} else {
			m.addrsWatched.Store(true)
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	last := time.Time{}
	for {
		select {
		case <-ctx.Done():
			m.SaveState()
			return
		case f := <-m.results:
			f()
			m.drainResults()
		case <-m.kick:
		case <-timer.C:
			if m.idle(m.cfg.Now()) {
				timer.Reset(max(m.next(m.cfg.Now()).Sub(m.cfg.Now()), 0))
				continue
			}
		}
		// Space the evaluations: a burst of events (a rollout's EndpointSlices) is decided once. A change of
		// kube-proxy's rules is marked as it is told meanwhile: an episode it begins counts from then.
		if wait := m.cfg.MinPass - m.cfg.Now().Sub(last); wait > 0 && !last.IsZero() {
			m.takeTold(m.cfg.Now())
			spaced := time.NewTimer(wait)
		spacing:
			for {
				select {
				case <-ctx.Done():
					spaced.Stop()
					m.SaveState()
					return
				case <-m.kick:
					m.takeTold(m.cfg.Now())
				case <-spaced.C:
					break spacing
				}
			}
			m.drainResults()
		}
		now := m.cfg.Now()
		last = now
		m.step(ctx, now)
		timer.Reset(max(m.next(now).Sub(m.cfg.Now()), 0))
	}
}

func (m *Model) drainResults() {
	for {
		select {
		case f := <-m.results:
			f()
		default:
			return
		}
	}
}

// job runs f off the model's goroutine; f returns what to apply on it.
func (m *Model) job(ctx context.Context, f func() func()) {
	if m.cfg.Synchronous {
		f()()
		return
	}
	go func() {
		apply := f()
		select {
		case m.results <- apply:
		case <-ctx.Done():
		}
	}()
}

// SaveState writes the state file now (on shutdown): the latest arrivals, for the next process.
func (m *Model) SaveState() {
	if m.writer == nil {
		return
	}
	m.writer.stop()
	m.g.SaveState()
}

// modelState is everything the model knows; Run's goroutine alone touches it.
type modelState struct {
	primed bool
	// settled: a State with verdicts was published (publish's first answers are in); from then on every
	// step publishes.
	settled bool
	// The API view.
	apiErr, nodeErr error
	node            kubeview.NodeState
	services        map[string]*entry
	keys            []string // sorted as State.Services
	announcers      map[announce.Source]announce.SourceState
	servicesMoved   bool // membership or a Service's destinations changed: the meter's Watch is rebuilt
	// kube-proxy's health server and configuration.
	kp                     KubeProxyState
	kpCfg                  nodeprobe.KubeProxyConfig
	kpCfgState             ConfigState
	kpCfgErr               error
	kpNext                 time.Time
	kpBusy                 bool
	kpAsked                bool
	kpAnswered             bool // a probe ran with the node known
	rulesRead              bool // a read of the rules came back
	local, assigned        []net.IP
	addrsErr               error
	addrsNext              time.Time
	rules                  dataplane.Rules
	rulesErr               error
	rulesNext, rulesAfter  time.Time // next read due; no read before rulesAfter
	rulesWanted, rulesBusy bool
	rulesAsked             bool
	// told is the latest change of the rules' content the reader told of that no read has started since,
	// with the meter's counts then; toldRead the one the read in flight started after, toldApplied the one the
	// rules last applied started after (zero: they were read without being told). The exposure recorder
	// starts a drop found in a reading at its change (docs/exposure.md).
	told, toldRead, toldApplied rulesTold
	rulesAppliedAt              time.Time
	// The meter.
	meterSnap     *arrivals.Snapshot
	meterActivity uint64
	meterAt       time.Time
	watchErr      error
	totals        map[ArrivalKey]uint64
	destOwners    map[arrivals.Dest][]string // which Services each watched destination is a destination of
	kinds         map[arrivals.Dest]verdict.Kind
	watchKey      string // what the meter's Watch was built from, beside the Services
	// watchInputsMoved: the addresses, kube-proxy's configuration or the node moved since watchKey was last
	// compared, so the key is worth computing again (not every meter read: it prints every address).
	watchInputsMoved bool
	// What every decision reads beside a Service's own inputs; when it moves, every Service is decided again.
	globals  globals
	epoch    uint64
	took     map[Input]time.Duration
	rev      uint64
	evidence scrapeEvidence
	seenAPI  time.Time // the EndpointSlice informer's last answer, as the last pass saw it
	// published is the Services of the last State published; republished as they are while no result, no
	// membership and no epoch changed.
	published      []*ServiceResult
	publishedEpoch uint64
	resultsMoved   bool
	// statePosted is when the state was last offered to the state file.
	statePosted time.Time
	probes      int // health check probes in flight
	// nextWork is when anything but the meter's polling is due, as of the last step (idle compares with it).
	nextWork time.Time
	// The schedule (model_sched.go): the Services' due and sweep times, their next health check probe
	// times, the Services marked to be decided, and those waiting for the API view to confirm endpoints gone.
	wakes, checks timeQueue
	dirty         []*entry
	gone          map[*entry]bool
}

func newModelState() modelState {
	return modelState{services: map[string]*entry{}, took: map[Input]time.Duration{}, gone: map[*entry]bool{}}
}

// entry is one Local Service in the model.
type entry struct {
	key   string
	state kubeview.ServiceState
	// checks are its health check node port's latest answers; checkedAt is when the probe that gave them was
	// sent (the step that started it), which dates a 503 (package exposure's drain).
	checks    []FamilyCheck
	checkedAt time.Time
	// checkDue are the times a probe is due (now, the follow-ups after a change, the sweep); probing: one is
	// in flight.
	checkDue []time.Time
	probing  bool
	result   *ServiceResult
	// dirty: an input of the Service changed since it was last decided (modelState.markDirty); due: a
	// time-driven change of its verdict may come then; sweep: it is decided again then whatever happened.
	dirty      bool
	due, sweep time.Time
	// idx is the Service's place in the model's keys: the order Services are decided in.
	idx int
	// growthDue: until a read of the rules at or after it, the counters' evidence of its drops is within a
	// window, and judged anew at each read (zero: none).
	growthDue time.Time
}
