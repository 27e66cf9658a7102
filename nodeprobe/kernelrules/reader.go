package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reader reads kube-proxy's rules on this node.
type Reader interface {
	// Read returns a snapshot of the rules. With ErrUnsupported (IPVS) the
	// snapshot is non-nil and says the mode. Concurrent calls share one read, and a
	// snapshot is reused for Options.CacheTTL.
	Read(ctx context.Context) (*Snapshot, error)
}

// Options configure NewReader.
type Options struct {
	// Mode: ModeAuto ("" too), ModeIPTables or ModeNFTables.
	Mode Mode
	// ProxyModeURL is kube-proxy's /proxyMode, e.g. http://127.0.0.1:10249/proxyMode.
	// Asked first in ModeAuto; when empty or failing, the tables present decide.
	ProxyModeURL string
	// HTTPClient for ProxyModeURL; nil: a client with a 2 s timeout.
	HTTPClient *http.Client
	// Runner runs iptables-save, nft and cat; nil: ExecRunner.
	Runner Runner
	// CacheTTL: how long a snapshot is reused; 0: 2 s; negative: never reused
	// (concurrent reads are still shared).
	CacheTTL time.Duration
	// DetectTTL: how long a detected mode and iptables backend are kept before being
	// detected again; 0: 5 minutes. A failed read always forgets them.
	DetectTTL time.Duration
	// LegacyVerify: with the legacy iptables backend, nat is kept while its
	// GET_INFO (entry count, size, hooks) is unchanged, and read again at most
	// this often even when it is: a change that keeps the entry count and the
	// size — two rules swapped for two of the same size in one sync — is seen
	// within this bound. 0: 5 min; negative: every read (exact; a nat save
	// costs about 0.5–1 s at 10,000 Services). 5 min keeps a legacy node's
	// scrapes at the shipped 30 s interval near 0.2× one bare save on average
	// (2 min: about 0.3×); such a change needs a compensating one in the same
	// sync, and filter's drops, the verdict's input, are read every time.
	LegacyVerify time.Duration
	// PollInterval: while Watch runs where no change notifications exist (the
	// legacy backend, or the watcher could not subscribe), how often the cheap
	// change signal is read (legacy: each table's GET_INFO; else the nf_tables
	// generation). 0: DefaultPollInterval (1 s).
	PollInterval time.Duration
	// FullVerify: a table kept because no relevant change was notified since
	// it was saved is saved again at most this long after it was, and
	// compared; a difference is counted in Snapshot.Resyncs and logged at
	// warn (the notifications missed a change). 0: DefaultFullVerify (10 min);
	// negative: never.
	FullVerify time.Duration
	// NotifyBuffer: the receive buffer, in bytes, of the change notification
	// socket. 0: DefaultNotifyBuffer. Tests set a tiny one to overrun it.
	NotifyBuffer int
	// LookPath finds binaries (iptables-legacy-save, …) in PATH, then in /usr/sbin
	// and /sbin as the kube-proxy image's wrapper does; nil: exec.LookPath. Tests
	// with a fake Runner set it to accept every name.
	LookPath func(file string) (string, error)
	// Logger; nil: discard.
	Logger *slog.Logger
	// Now; nil: time.Now.
	Now func() time.Time
}

// NewReader returns a Reader. It does no I/O until the first Read.
func NewReader(opts Options) Reader {
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 2 * time.Second}
	}
	if opts.Runner == nil {
		opts.Runner = ExecRunner{}
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = 2 * time.Second
	}
	if opts.DetectTTL == 0 {
		opts.DetectTTL = 5 * time.Minute
	}
	if opts.LegacyVerify == 0 {
		opts.LegacyVerify = 5 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.FullVerify == 0 {
		opts.FullVerify = DefaultFullVerify
	}
	if opts.NotifyBuffer <= 0 {
		opts.NotifyBuffer = DefaultNotifyBuffer
	}
	if opts.LookPath == nil {
		opts.LookPath = exec.LookPath
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	keep := func(s *Snapshot, _ error) bool {
		// What says something about the node is kept: a snapshot (also the IPVS
		// one), not a failure, which the next scrape should retry.
		return s != nil
	}
	return &reader{opts: opts, shared: &sharedRead[*Snapshot]{ttl: opts.CacheTTL, now: opts.Now, keep: keep}}
}

// reader is one way through: detect (mode and backend, kept for DetectTTL) →
// read (per table and family, a table re-read only when its change signal
// moved) → parse → snapshot. The single-flight cache in front (sharedRead)
// knows nothing of rules.
type reader struct {
	opts   Options
	shared *sharedRead[*Snapshot]

	// Everything below is touched only by the read in flight: shared runs one
	// at a time and its mutex orders one leader's writes before the next's reads.
	det        detection
	loggedIPVS bool
	tables     tableCache

	// The watcher, while Watch runs (watch.go), and what the reads tell it.
	watchMu sync.Mutex
	watch   *nftWatch
	scope   atomic.Pointer[watchScope] // the mode and backend read last
	// resyncs counts the full re-reads forced by lost notifications or a
	// verification that found a kept table differing (Snapshot.Resyncs).
	resyncs atomic.Uint64
	// lossEvents counts the watcher's losses of notifications.
	lossEvents atomic.Uint64
	// relists counts the tables brought up to date by reading only the
	// objects notifications named (nftables mode), relistDumps the netlink
	// requests they made: for tests and benchmarks.
	relists     atomic.Uint64
	relistDumps atomic.Uint64
}

// scopeNow is the scope of the mode and backend read last.
func (r *reader) scopeNow() watchScope {
	if s := r.scope.Load(); s != nil {
		return *s
	}
	return watchScope{}
}

// detection is what rarely changes: the mode and, in iptables mode, the backend.
type detection struct {
	mode      Mode // "" when not detected yet (ModeAuto only)
	at        time.Time
	backend   Backend // iptables mode; "" when not detected yet
	backendAt time.Time
}

// Read implements Reader: one read in flight at a time, shared by all callers.
func (r *reader) Read(ctx context.Context) (*Snapshot, error) {
	return r.shared.Do(ctx, r.read)
}

// read does one pass through the pipeline. A failure forgets the detection and
// every table kept, so the next read starts from nothing.
func (r *reader) read(ctx context.Context) (*Snapshot, error) {
	start := r.opts.Now()
	snap, err := r.detectAndRead(ctx)
	if err != nil {
		r.det = detection{}
		r.tables = tableCache{loggedNoSignal: r.tables.loggedNoSignal, lossesSeen: r.tables.lossesSeen}
	}
	if snap != nil {
		snap.ReadAt = start
		snap.Duration = r.opts.Now().Sub(start)
	}
	return snap, err
}

func (r *reader) detectAndRead(ctx context.Context) (*Snapshot, error) {
	mode, snap, err := r.detectMode(ctx)
	if err != nil || snap != nil {
		return snap, err
	}
	switch mode {
	case ModeIPTables:
		return r.readIPTables(ctx)
	case ModeNFTables:
		return r.readNFT(ctx)
	}
	return r.ipvs(), fmt.Errorf("kube-proxy mode ipvs: %w", ErrUnsupported)
}

// detectMode says which mode to read. Detecting by the tables present reads
// them: that first snapshot is returned too, so they are not read twice.
func (r *reader) detectMode(ctx context.Context) (Mode, *Snapshot, error) {
	switch r.opts.Mode {
	case ModeIPTables, ModeNFTables:
		return r.opts.Mode, nil, nil
	case ModeAuto:
	default:
		return "", nil, fmt.Errorf("rule reader mode %q: want auto, iptables or nftables", r.opts.Mode)
	}
	if r.det.mode != "" && r.opts.Now().Sub(r.det.at) >= r.opts.DetectTTL {
		r.det.mode = ""
	}
	if r.det.mode != "" {
		return r.det.mode, nil, nil
	}
	mode := r.askProxyMode(ctx)
	if mode != "" {
		r.det.mode, r.det.at = mode, r.opts.Now()
		return mode, nil, nil
	}
	snap, err := r.detectByTables(ctx)
	if snap != nil && (err == nil || errors.Is(err, ErrUnsupported)) {
		r.det.mode, r.det.at = snap.Mode, r.opts.Now()
	}
	if err == nil && snap == nil {
		err = errors.New("detecting kube-proxy mode from tables: no result")
	}
	return snap.modeOrEmpty(), snap, err
}

func (s *Snapshot) modeOrEmpty() Mode {
	if s == nil {
		return ""
	}
	return s.Mode
}

// ipvs is the snapshot of IPVS mode, whose rules are not read; it warns once.
func (r *reader) ipvs() *Snapshot {
	if !r.loggedIPVS {
		r.loggedIPVS = true
		r.opts.Logger.Warn("kube-proxy runs in IPVS mode: its rules are not read; blackhole detection falls back to the API view")
	}
	st := WatchPolled
	if r.changeSignals() == nil {
		st = WatchNone
	}
	return &Snapshot{Mode: ModeIPVS, Watch: st, Resyncs: r.resyncs.Load()}
}

// binary returns how to run a tool: its bare name when PATH finds it, else its
// full path in /usr/sbin or /sbin (PATH often lacks them outside login shells).
// Not found is ErrNoRules: no rules of that kind can be read here.
func (r *reader) binary(name string) (string, error) {
	_, err := r.opts.LookPath(name)
	if err == nil {
		return name, nil
	}
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if _, e := r.opts.LookPath(dir + name); e == nil {
			return dir + name, nil
		}
	}
	return "", fmt.Errorf("%s not found (%v): %w", name, err, ErrNoRules)
}

// askProxyMode asks kube-proxy's /proxyMode; "" when it cannot say.
func (r *reader) askProxyMode(ctx context.Context) Mode {
	if r.opts.ProxyModeURL == "" {
		return ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.ProxyModeURL, nil)
	if err != nil {
		r.opts.Logger.Debug("kube-proxy /proxyMode request", "url", r.opts.ProxyModeURL, "err", err)
		return ""
	}
	resp, err := r.opts.HTTPClient.Do(req)
	if err != nil {
		r.opts.Logger.Debug("kube-proxy /proxyMode unreachable; looking at tables", "url", r.opts.ProxyModeURL, "err", err)
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil || resp.StatusCode != http.StatusOK {
		r.opts.Logger.Debug("kube-proxy /proxyMode failed; looking at tables", "url", r.opts.ProxyModeURL, "status", resp.StatusCode, "err", err)
		return ""
	}
	switch m := strings.TrimSpace(string(body)); m {
	case "iptables":
		return ModeIPTables
	case "nftables":
		return ModeNFTables
	case "ipvs":
		return ModeIPVS
	default:
		r.opts.Logger.Debug("kube-proxy /proxyMode answer not understood; looking at tables", "answer", m)
		return ""
	}
}

// detectByTables decides the mode from what exists: kube-proxy's nftables table,
// or KUBE-SERVICES in iptables (IPVS mode has its own chains there).
func (r *reader) detectByTables(ctx context.Context) (*Snapshot, error) {
	nftSnap, nftErr := r.readNFT(ctx)
	iptSnap, iptErr := r.readIPTables(ctx)
	nftFound := nftErr == nil
	iptFound := iptErr == nil || errors.Is(iptErr, ErrUnsupported)
	switch {
	case nftFound && iptFound:
		return nil, ErrAmbiguous
	case iptFound:
		return iptSnap, iptErr
	case nftFound:
		return nftSnap, nil
	}
	if errors.Is(nftErr, ErrNoRules) && errors.Is(iptErr, ErrNoRules) {
		return nil, fmt.Errorf("neither nftables nor iptables (legacy or nft backend): %w", ErrNoRules)
	}
	return nil, fmt.Errorf("detecting kube-proxy mode from tables: %w", errors.Join(iptErr, nftErr))
}
