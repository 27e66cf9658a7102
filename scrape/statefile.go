package scrape

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// The state file keeps what the verdict needs to resume after the exporter restarts (a DaemonSet rollout, an
// OOM kill): when each destination was first found dropped, the arrival runs the meter counted, and when
// kube-proxy was last seen on the node. Without it a restarted exporter starts every run at zero, so a node
// that was paging health_check_ignored or traffic_lost reports nothing critical until new arrivals have kept
// coming for a whole grace window again, and the page resolves and re-fires minutes later.

// DefaultStateFile is where the shipped DaemonSet keeps the state file: a hostPath directory, so the file
// outlives the container and the pod.
const DefaultStateFile = "/var/lib/localtraffic-exporter/state.json"

// How the state file is written and bounded.
const (
	stateFileVersion = 1
	// stateWriteInterval: a changed state is written at most this often (runs change with every attempt; the
	// file is rewritten by a scrape, never per packet). A restart loses at most this much of the latest
	// arrivals, far less than the meter's quiet period that ends a run.
	stateWriteInterval = 5 * time.Second
	// stateRefreshInterval: an unchanged state is written again this often, so the file's write time says when
	// a scrape last looked; dropped-since times are forgotten on load when it is older than the quiet period.
	stateRefreshInterval = 30 * time.Second
	// maxStateEntries bounds each list of the file: runs of the destinations where attempts arrived most
	// recently, and the dropped-since times of those destinations. An entry is under 300 bytes (a NodePort's run
	// with its checkers' clocks and its clients' run under 600), so the file stays under about 4.5 MB even at
	// the cap; a node sees recent arrivals at far fewer destinations.
	maxStateEntries = 4096
	// maxStateCheckers bounds the checkers' clocks kept per run (one source's two, or two sources'), under 100
	// bytes each.
	maxStateCheckers = 2
	// maxStateFileBytes: a larger file was not written by this version and is not read at all.
	maxStateFileBytes = 8 << 20
	// kubeProxySeenHorizon: a restarted exporter still takes the node for kube-proxy's when kube-proxy was seen
	// here this recently, though it is gone now (a reboot whose kube-proxy never comes up is a missing
	// kube-proxy, not a replacement). A day outlasts any reboot or maintenance window; a node moved to a
	// kube-proxy replacement is recognised at the exporter's first start after it (--dataplane=replacement says
	// so at once).
	kubeProxySeenHorizon = 24 * time.Hour
)

// The states of localtraffic_state_file_state.
const (
	stateRestored    = "restored"     // read and trusted: runs and dropped-since times carried over
	stateExpired     = "expired"      // read and trusted, but written longer ago than the quiet period: nothing to carry over
	stateNew         = "new"          // no file yet (the node's first start): one is written
	stateCorrupt     = "corrupt"      // not a state file this version wrote whole (undecodable, checksum, oversized): replaced
	stateForeign     = "foreign"      // another format version or another node's: replaced
	stateUnreadable  = "unreadable"   // could not be read (permissions, I/O): replaced when it can be written
	stateWriteFailed = "write_failed" // the latest write failed: the next restart may start afresh
	stateDisabled    = "disabled"     // --state.file is empty
)

// StateFileStates lists every state of localtraffic_state_file_state.
var StateFileStates = []string{stateRestored, stateExpired, stateNew, stateCorrupt, stateForeign, stateUnreadable,
	stateWriteFailed, stateDisabled}

// StateFileConfig configures OpenStateFile.
type StateFileConfig struct {
	// Path is the file; "" disables it (OpenStateFile returns nil).
	Path string
	// Node is this node's name: a file written for another node is foreign.
	Node string
	// Horizon is how old an entry may be and still be carried over (DefaultQuiet when 0). The exporter passes
	// the longer of the meter's quiet period, after which a run has ended anyway, and the loss hold, so that a
	// traffic_lost held after a rare client's last attempt survives a restart too.
	Horizon time.Duration
	Logger  *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Boot reads the kernel's boot clock, which tells how far the wall clock was stepped between a write and
	// the next start: ReadBootClock when both it and Now are nil; none when only Now is given.
	Boot func() (BootClock, error)
}

// StateFile is the node-local file the exporter's cross-scrape state survives a restart in. OpenStateFile
// reads it once; the Gatherer restores what it held and writes it from its scrapes. Safe for concurrent use.
type StateFile struct {
	cfg StateFileConfig

	mu       sync.Mutex
	loaded   *restoredState // what the file held, until the Gatherer takes it
	started  string         // the load's outcome (one of the states above)
	writeErr error          // the latest write's error
	last     stateBody      // the state last written (WrittenAt aside)
	lastAt   time.Time      // when it was written
	armed    bool           // a scrape decided with the API view: only then is there a state worth writing
}

// restoredState is what a state file carries over.
type restoredState struct {
	runs          map[arrivals.Dest]arrivals.Run
	dropped       map[verdict.Destination]dropMark
	kubeProxySeen time.Time     // zero: not within kubeProxySeenHorizon
	wallStep      time.Duration // how far the wall clock was stepped since the write; the times above moved with it
	// exposure is the exposure recorder's state; exposureFresh: the file is younger than the horizon, so its
	// open episodes resume.
	exposure      *exposure.Saved
	exposureFresh bool
}

// The file: a versioned envelope around the state and its checksum. The checksum covers the state's bytes as
// written, so a file cut short or changed is corrupt, not misread.
type stateEnvelope struct {
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	State   json.RawMessage `json:"state"`
}

// stateBody is the state. Times are wall-clock Unix nanoseconds (the meter's receive times are wall-clock);
// Boot is the boot clock at WrittenAt (bootclock.go), absent where it could not be read.
type stateBody struct {
	Node            string         `json:"node"`
	WrittenAt       int64          `json:"written_at_unix_nano"`
	Boot            *bootStamp     `json:"boot,omitempty"`
	KubeProxySeenAt int64          `json:"kube_proxy_seen_at_unix_nano,omitempty"`
	Runs            []runEntry     `json:"runs"`
	Dropped         []droppedEntry `json:"dropped"`
	// Exposure is the exposure recorder's totals and open episodes (absent in files of exporters before it).
	Exposure *exposure.Saved `json:"exposure,omitempty"`
}

// runEntry is one destination's arrivals (arrivals.Run). Address 0.0.0.0 or :: is the node's own addresses
// of that family (a NodePort).
type runEntry struct {
	Protocol     string `json:"protocol"`
	Address      string `json:"address"`
	Port         uint16 `json:"port"`
	Attempts     uint64 `json:"attempts"`
	FirstSeen    int64  `json:"first_seen_unix_nano"`
	LastSeen     int64  `json:"last_seen_unix_nano"`
	ActiveSince  int64  `json:"active_since_unix_nano"`
	WatchedSince int64  `json:"watched_since_unix_nano"`
	// Told: the meter told checkers from clients here (a NodePort); Checkers are the checkers' clocks it had
	// proven (at most maxStateCheckers), Client* the clients' repeated arrivals (arrivals.Run).
	Told              bool           `json:"told,omitempty"`
	Checkers          []checkerEntry `json:"checkers,omitempty"`
	ClientAttempts    uint64         `json:"client_attempts,omitempty"`
	ClientActiveSince int64          `json:"client_active_since_unix_nano,omitempty"`
	ClientLastSeen    int64          `json:"client_last_seen_unix_nano,omitempty"`
	// Owner is the UID of the Service (Services) whose traffic the run was (arrivals.DestCount.Owner): a Service
	// that took the destination over while no exporter ran does not inherit the run, its checkers nor its
	// clients. Absent in files of exporters before it: such a run is restored onto whoever holds it.
	Owner string `json:"owner,omitempty"`
}

// checkerEntry is a checker's clock (arrivals.CheckerSource): a restarted exporter takes its source for a
// checker at once instead of paging while it proves its cadence again.
type checkerEntry struct {
	Address  string `json:"address"`
	Interval int64  `json:"interval_nano"`
	LastTick int64  `json:"last_tick_unix_nano"`
}

// droppedEntry is when a destination (verdict.Destination) was first found dropped.
type droppedEntry struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	Port      string `json:"port"`
	Protocol  string `json:"protocol"`
	Family    string `json:"family"`
	Kind      string `json:"kind"`
	Address   string `json:"address,omitempty"`
	DestPort  int32  `json:"dest_port"`
	Since     int64  `json:"since_unix_nano"`
	// Owner is the UID of the Service the drop was found for: restored onto another Service of the name (one
	// deleted and created again while the exporter was down), the time is not that Service's.
	Owner string `json:"owner,omitempty"`
}

// OpenStateFile reads the state file once and reports what it found (a log line, and the state metric from
// then on). A file that cannot be trusted is never used: the next write replaces it. nil when cfg.Path is "".
func OpenStateFile(cfg StateFileConfig) *StateFile {
	if cfg.Path == "" {
		return nil
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultQuiet
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
		if cfg.Boot == nil {
			cfg.Boot = ReadBootClock // (a clock of the caller's own has no boot clock unless it gives one)
		}
	}
	s := &StateFile{cfg: cfg}
	removeStaleTemps(cfg.Path)
	boot, bootErr := BootClock{}, errors.New("no boot clock configured")
	if cfg.Boot != nil {
		if boot, bootErr = cfg.Boot(); bootErr != nil {
			cfg.Logger.Warn("no boot clock: a wall-clock step between a write and a restart moves the state file's times", "err", bootErr)
		}
	}
	rs, state, err := loadStateFile(cfg.Path, cfg.Node, cfg.Horizon, cfg.Now(), boot, bootErr == nil)
	s.started, s.loaded = state, rs
	log := cfg.Logger.With("path", cfg.Path, "state", state)
	// Under a second is the two clocks' reading jitter or NTP's slewing, not a step (the times move by it all
	// the same): every restart would log one.
	if rs != nil && rs.wallStep.Abs() >= time.Second {
		log.Info("the wall clock was stepped since the state file was written: its times moved with it", "step", rs.wallStep)
	}
	switch state {
	case stateRestored:
		log.Info("state file restored: arrival runs and dropped-since times carried over the restart",
			"runs", len(rs.runs), "dropped", len(rs.dropped), "kube_proxy_seen", !rs.kubeProxySeen.IsZero())
	case stateExpired:
		log.Info("state file older than the quiet period: no arrival run carried over", "kube_proxy_seen", !rs.kubeProxySeen.IsZero())
	case stateNew:
		log.Info("no state file yet: starting afresh, writing one")
	default:
		log.Warn("state file not trusted: starting afresh, it will be replaced", "err", err)
	}
	return s
}

// loadStateFile reads and checks the file. It never returns a state it did not fully check. boot is the boot
// clock now (ok: it could be read).
func loadStateFile(path, node string, horizon time.Duration, now time.Time, boot BootClock, ok bool) (*restoredState, string, error) {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, stateNew, nil
	case err != nil:
		return nil, stateUnreadable, fmt.Errorf("opening the state file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateFileBytes+1))
	switch {
	case err != nil:
		return nil, stateUnreadable, fmt.Errorf("reading the state file: %w", err)
	case len(data) > maxStateFileBytes:
		return nil, stateCorrupt, fmt.Errorf("state file larger than %d bytes", maxStateFileBytes)
	}
	var env stateEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, stateCorrupt, fmt.Errorf("decoding the state file: %w", err)
	}
	if env.Version != stateFileVersion {
		return nil, stateForeign, fmt.Errorf("state file format version %d, this exporter reads %d", env.Version, stateFileVersion)
	}
	if sum := sha256.Sum256(env.State); hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, stateCorrupt, errors.New("state file checksum does not match its content")
	}
	var body stateBody
	dec := json.NewDecoder(bytes.NewReader(env.State))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, stateCorrupt, fmt.Errorf("decoding the state file's state: %w", err)
	}
	if body.Node != node {
		return nil, stateForeign, fmt.Errorf("state file written for node %q, this is %q", body.Node, node)
	}
	if body.Boot != nil && (body.Boot.ID == "" || body.Boot.Since < 0) {
		return nil, stateCorrupt, fmt.Errorf("state file: boot clock %+v", *body.Boot)
	}
	step, _ := wallStep(time.Unix(0, body.WrittenAt), body.Boot, now, boot, ok)
	body.shift(step)
	rs, err := body.restore(horizon, now)
	if err != nil {
		return nil, stateCorrupt, err
	}
	rs.wallStep = step
	if len(rs.runs) == 0 && len(rs.dropped) == 0 && time.Unix(0, body.WrittenAt).Before(now.Add(-horizon)) {
		return rs, stateExpired, nil
	}
	return rs, stateRestored, nil
}

// restore checks every entry and keeps the fresh ones: a run whose latest attempt is older than horizon,
// relative to the file's write time or to now, has ended; dropped-since times only while the file is younger
// than horizon (the exporter did not look for longer: it cannot tell the destination stayed dropped).
func (b stateBody) restore(horizon time.Duration, now time.Time) (*restoredState, error) {
	if b.WrittenAt <= 0 {
		return nil, errors.New("state file without a write time")
	}
	if len(b.Runs) > maxStateEntries || len(b.Dropped) > maxStateEntries {
		return nil, fmt.Errorf("state file holds %d runs and %d dropped-since times, more than the %d this exporter writes",
			len(b.Runs), len(b.Dropped), maxStateEntries)
	}
	written := time.Unix(0, b.WrittenAt)
	cutoff := now.Add(-horizon)
	if written.After(now) {
		cutoff = written.Add(-horizon) // the clock was set back since: the file's own time is the later one
	}
	rs := &restoredState{runs: map[arrivals.Dest]arrivals.Run{}, dropped: map[verdict.Destination]dropMark{}}
	for _, r := range b.Runs {
		d, run, err := r.run()
		if err != nil {
			return nil, err
		}
		if !run.LastSeen.Before(cutoff) {
			rs.runs[d] = run
		}
	}
	fresh := written.After(now.Add(-horizon))
	for _, e := range b.Dropped {
		d, since, err := e.destination()
		if err != nil {
			return nil, err
		}
		if fresh {
			rs.dropped[d] = dropMark{since: since, owner: types.UID(e.Owner)}
		}
	}
	if b.KubeProxySeenAt < 0 {
		return nil, errors.New("state file: negative kube-proxy time")
	}
	if seen := time.Unix(0, b.KubeProxySeenAt); b.KubeProxySeenAt > 0 && seen.After(now.Add(-kubeProxySeenHorizon)) {
		rs.kubeProxySeen = seen
	}
	if b.Exposure != nil {
		if len(b.Exposure.Open) > maxStateEntries {
			return nil, fmt.Errorf("state file holds %d open exposure episodes, more than the %d this exporter writes",
				len(b.Exposure.Open), maxStateEntries)
		}
		if len(b.Exposure.Finished) > exposure.FinishedRing {
			return nil, fmt.Errorf("state file holds %d ended exposure episodes, more than the %d this exporter keeps",
				len(b.Exposure.Finished), exposure.FinishedRing)
		}
		rs.exposure, rs.exposureFresh = b.Exposure, fresh
	}
	return rs, nil
}

func (r runEntry) run() (arrivals.Dest, arrivals.Run, error) {
	p, err := arrivals.ParseProtocol(r.Protocol)
	if err != nil {
		return arrivals.Dest{}, arrivals.Run{}, fmt.Errorf("state file run: %w", err)
	}
	a, err := netip.ParseAddr(r.Address)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return arrivals.Dest{}, arrivals.Run{}, fmt.Errorf("state file run: address %q", r.Address)
	}
	// The order of the times is not checked: the meter counts packets as its rings hand them over, and
	// Meter.Restore straightens a run whose times are out of order.
	if r.Port == 0 || r.Attempts == 0 || r.LastSeen <= 0 || r.FirstSeen < 0 || r.ActiveSince < 0 || r.WatchedSince < 0 {
		return arrivals.Dest{}, arrivals.Run{}, fmt.Errorf("state file run %s %s:%d: no port, attempt or time", r.Protocol, r.Address, r.Port)
	}
	run := arrivals.Run{Attempts: r.Attempts,
		FirstSeen: unixNanoTime(r.FirstSeen), LastSeen: unixNanoTime(r.LastSeen), ActiveSince: unixNanoTime(r.ActiveSince),
		WatchedSince: unixNanoTime(r.WatchedSince), Told: r.Told, Owner: r.Owner}
	if len(r.Checkers) > maxStateCheckers || r.ClientActiveSince < 0 || r.ClientLastSeen < 0 {
		return arrivals.Dest{}, arrivals.Run{}, fmt.Errorf("state file run %s %s:%d: %d checkers or a negative client time",
			r.Protocol, r.Address, r.Port, len(r.Checkers))
	}
	if r.Told {
		run.Clients = arrivals.RepeatCount{Attempts: r.ClientAttempts, ActiveSince: unixNanoTime(r.ClientActiveSince),
			LastSeen: unixNanoTime(r.ClientLastSeen)}
	}
	for _, e := range r.Checkers {
		ca, err := netip.ParseAddr(e.Address)
		if err != nil || e.Interval <= 0 || e.LastTick <= 0 {
			return arrivals.Dest{}, arrivals.Run{}, fmt.Errorf("state file run %s %s:%d: checker %q every %dns", r.Protocol,
				r.Address, r.Port, e.Address, e.Interval)
		}
		run.Checkers = append(run.Checkers, arrivals.CheckerSource{Addr: ca, Interval: time.Duration(e.Interval),
			LastSeen: unixNanoTime(e.LastTick), LastTick: unixNanoTime(e.LastTick)})
	}
	return arrivals.Dest{Protocol: p, Addr: a, Port: r.Port}, run, nil
}

// timeUnixNano is t as Unix nanoseconds, 0 for the zero time.
func timeUnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// unixNanoTime is the time of Unix nanoseconds, 0 the zero time.
func unixNanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func (e droppedEntry) destination() (verdict.Destination, time.Time, error) {
	d := verdict.Destination{Namespace: e.Namespace, Service: e.Service, Port: e.Port, Protocol: corev1.Protocol(e.Protocol),
		Family: corev1.IPFamily(e.Family), Kind: verdict.Kind(e.Kind), Address: e.Address, DestPort: e.DestPort}
	_, ok := MeterDest(d)
	switch {
	case e.Namespace == "" || e.Service == "" || e.Since <= 0 || !ok:
		return d, time.Time{}, fmt.Errorf("state file: dropped-since entry %+v", e)
	case d.Family != corev1.IPv4Protocol && d.Family != corev1.IPv6Protocol:
		return d, time.Time{}, fmt.Errorf("state file: dropped-since entry of family %q", e.Family)
	case d.Kind == verdict.NodePort && d.Address != "",
		d.Kind != verdict.NodePort && d.Kind != verdict.LoadBalancerIP && d.Kind != verdict.ExternalIP:
		return d, time.Time{}, fmt.Errorf("state file: dropped-since entry of kind %q at %q", e.Kind, e.Address)
	}
	return d, time.Unix(0, e.Since), nil
}

// take hands what the file held to the Gatherer, once.
func (s *StateFile) take() *restoredState {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.loaded
	s.loaded = nil
	return rs
}

// State is the state metric's value: the load's outcome, or write_failed while the latest write failed.
func (s *StateFile) State() string {
	if s == nil {
		return stateDisabled
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return stateWriteFailed
	}
	return s.started
}

// offer writes b when it is due: changed and stateWriteInterval after the last write, or unchanged for
// stateRefreshInterval; force writes it anyway (shutdown). A write in progress makes a concurrent scrape skip
// its own: the next one writes.
func (s *StateFile) offer(b stateBody, force bool) {
	if !s.mu.TryLock() {
		if !force {
			return
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	now := s.cfg.Now()
	since := now.Sub(s.lastAt)
	changed := !b.sameAs(s.last)
	if !force && !s.lastAt.IsZero() && (!changed || since < stateWriteInterval) && since < stateRefreshInterval {
		return
	}
	b.Node, b.WrittenAt, b.Boot = s.cfg.Node, now.UnixNano(), nil
	if s.cfg.Boot != nil {
		if boot, err := s.cfg.Boot(); err == nil {
			b.Boot = &bootStamp{ID: boot.ID, Since: int64(boot.Since)}
		}
	}
	err := writeStateFile(s.cfg.Path, b)
	switch {
	case err != nil && s.writeErr == nil:
		s.cfg.Logger.Warn("writing the state file failed: a restart will start afresh", "path", s.cfg.Path, "err", err)
	case err == nil && s.writeErr != nil:
		s.cfg.Logger.Info("state file written again", "path", s.cfg.Path)
	}
	s.writeErr = err
	if err == nil {
		s.last, s.lastAt = b, now
	}
}

func (b stateBody) sameAs(o stateBody) bool {
	return b.KubeProxySeenAt == o.KubeProxySeenAt && slices.EqualFunc(b.Runs, o.Runs, runEntry.equal) &&
		slices.Equal(b.Dropped, o.Dropped) && reflect.DeepEqual(b.Exposure, o.Exposure)
}

// equal: r and o hold the same run (runEntry is not comparable: its Checkers).
func (r runEntry) equal(o runEntry) bool {
	return slices.Equal(r.Checkers, o.Checkers) && r.Protocol == o.Protocol && r.Address == o.Address &&
		r.Port == o.Port && r.Attempts == o.Attempts && r.FirstSeen == o.FirstSeen && r.LastSeen == o.LastSeen && r.ActiveSince == o.ActiveSince &&
		r.WatchedSince == o.WatchedSince && r.Told == o.Told && r.ClientAttempts == o.ClientAttempts &&
		r.ClientActiveSince == o.ClientActiveSince && r.ClientLastSeen == o.ClientLastSeen && r.Owner == o.Owner
}

// writeStateFile replaces the file atomically: a temporary file beside it, written and synced, renamed over
// it, and the directory synced, so a crash leaves the old file or the new one, never a part.
func writeStateFile(path string, b stateBody) error {
	state, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("encoding the state: %w", err)
	}
	sum := sha256.Sum256(state)
	data, err := json.Marshal(stateEnvelope{Version: stateFileVersion, SHA256: hex.EncodeToString(sum[:]), State: state})
	if err != nil {
		return fmt.Errorf("encoding the state file: %w", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, tempPattern(base))
	if err != nil {
		return fmt.Errorf("creating the state file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename there is nothing left to remove
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the state file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing the state file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing the state file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing the state file: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing the state file's directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing the state file's directory: %w", err)
	}
	return nil
}

func tempPattern(base string) string { return "." + base + ".*.tmp" }

// removeStaleTemps removes temporary files a killed exporter left beside the state file.
func removeStaleTemps(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	matches, _ := filepath.Glob(filepath.Join(dir, tempPattern(base)))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// restoreState applies what the state file held: dropped-since times, kube-proxy seen, and the meter's runs
// (seeded when each destination is first watched).
func (g *Gatherer) restoreState(rs *restoredState) {
	if rs == nil {
		return
	}
	if !rs.kubeProxySeen.IsZero() {
		g.kubeProxy.restore(rs.kubeProxySeen)
	}
	g.arrivals.mu.Lock()
	for d, m := range rs.dropped {
		g.arrivals.dropped[d] = m
	}
	g.arrivals.mu.Unlock()
	if r, ok := g.cfg.Meter.(ArrivalsRestorer); ok && len(rs.runs) > 0 {
		r.Restore(rs.runs)
	}
	if rs.exposure != nil {
		g.exposure.restore(*rs.exposure, rs.exposureFresh)
	}
}

// ArrivalsRestorer is a meter that can continue runs an earlier one counted (*arrivals.Meter).
type ArrivalsRestorer interface {
	Restore(map[arrivals.Dest]arrivals.Run)
}

// saveState offers this scrape's state to the file. Only a scrape that decided (the API view answered) has
// one: before that the meter watches nothing, and writing would throw away what the file carries over.
func (g *Gatherer) saveState(st *State) {
	sf := g.cfg.State
	if sf == nil {
		return
	}
	if st.APIErr != nil {
		sf.mu.Lock()
		armed := sf.armed
		sf.mu.Unlock()
		if !armed {
			return
		}
	}
	sf.mu.Lock()
	sf.armed = true
	sf.mu.Unlock()
	sf.offer(g.stateBody(st.Arrivals.Snapshot, sf.cfg.Horizon), false)
}

// SaveState writes the state now, whatever the write interval: on shutdown, so the file holds the latest
// arrivals. Nothing is written before a scrape decided.
func (g *Gatherer) SaveState() {
	sf := g.cfg.State
	if sf == nil {
		return
	}
	sf.mu.Lock()
	armed := sf.armed
	sf.mu.Unlock()
	if !armed {
		return
	}
	var snap *arrivals.Snapshot
	if g.cfg.Meter != nil {
		s := g.cfg.Meter.Snapshot()
		snap = &s
	}
	sf.offer(g.stateBody(snap, sf.cfg.Horizon), true)
}

// stateBody is what the file keeps: the runs of the destinations where attempts arrived within horizon (the
// most recent first, at most maxStateEntries), the dropped-since times of those destinations (elsewhere
// nothing arrives, and the time a destination was found dropped changes no verdict until attempts do), and
// when kube-proxy was last seen.
func (g *Gatherer) stateBody(snap *arrivals.Snapshot, horizon time.Duration) stateBody {
	var b stateBody
	if at := g.kubeProxy.last.Load(); at > 0 {
		b.KubeProxySeenAt = at
	}
	b.Exposure = g.exposure.save()
	if snap == nil || snap.Status != arrivals.StatusOK {
		return b
	}
	var runs []arrivals.DestCount
	for _, c := range snap.Dests {
		if c.Attempts > 0 && !c.LastSeen.Before(snap.Taken.Add(-horizon)) {
			runs = append(runs, c)
		}
	}
	slices.SortFunc(runs, func(a, b arrivals.DestCount) int { return b.LastSeen.Compare(a.LastSeen) })
	if len(runs) > maxStateEntries {
		runs = runs[:maxStateEntries]
	}
	kept := make(map[arrivals.Dest]bool, len(runs))
	for _, c := range runs {
		kept[c.Dest] = true
		e := runEntry{Protocol: c.Protocol.String(), Address: c.Addr.String(), Port: c.Port,
			Attempts: c.Attempts, FirstSeen: timeUnixNano(c.FirstSeen), LastSeen: timeUnixNano(c.LastSeen),
			ActiveSince: timeUnixNano(c.ActiveSince), WatchedSince: timeUnixNano(c.WatchedSince), Owner: c.Owner}
		if c.SetAside {
			e.Told, e.ClientAttempts = true, c.Clients.Repeated.Attempts
			e.ClientActiveSince, e.ClientLastSeen = timeUnixNano(c.Clients.Repeated.ActiveSince), timeUnixNano(c.Clients.Repeated.LastSeen)
			for _, ch := range c.Checkers {
				tick := ch.LastTick
				if tick.IsZero() {
					tick = ch.LastSeen
				}
				if len(e.Checkers) < maxStateCheckers && ch.Interval > 0 && !tick.IsZero() {
					e.Checkers = append(e.Checkers, checkerEntry{Address: ch.Addr.String(), Interval: int64(ch.Interval),
						LastTick: tick.UnixNano()})
				}
			}
		}
		b.Runs = append(b.Runs, e)
	}
	g.arrivals.eachDropped(snap.Taken, horizon, func(d verdict.Destination, m dropMark) {
		if len(kept) == 0 {
			return
		}
		if ad, ok := MeterDest(d); ok && kept[ad] {
			b.Dropped = append(b.Dropped, droppedEntry{Namespace: d.Namespace, Service: d.Service, Port: d.Port,
				Protocol: string(d.Protocol), Family: string(d.Family), Kind: string(d.Kind), Address: d.Address,
				DestPort: d.DestPort, Since: m.since.UnixNano(), Owner: string(m.owner)})
		}
	})
	slices.SortFunc(b.Runs, func(x, y runEntry) int {
		return cmp.Or(cmp.Compare(x.Protocol, y.Protocol), cmp.Compare(x.Address, y.Address), cmp.Compare(x.Port, y.Port))
	})
	slices.SortFunc(b.Dropped, func(x, y droppedEntry) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Service, y.Service), cmp.Compare(x.Port, y.Port),
			cmp.Compare(x.Family, y.Family), cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Address, y.Address),
			cmp.Compare(x.DestPort, y.DestPort))
	})
	if len(b.Dropped) > maxStateEntries {
		b.Dropped = b.Dropped[:maxStateEntries]
	}
	return b
}

// restore takes kube-proxy for seen at at (the state file): a kube-proxy seen before the restart and gone
// now is down, not replaced.
func (k *kubeProxySeen) restore(at time.Time) {
	k.ever.Store(true)
	k.last.CompareAndSwap(0, at.UnixNano())
}
