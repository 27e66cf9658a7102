package rules

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
	if opts.LookPath == nil {
		opts.LookPath = exec.LookPath
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &reader{opts: opts}
}

type reader struct {
	opts Options

	mu       sync.Mutex
	inflight *readCall
	last     *readCall // last finished read, reused within CacheTTL
	lastAt   time.Time

	// detection state, guarded by mu, written only by the read in flight
	detected   Mode
	backend    string
	detectedAt time.Time
	loggedIPVS bool
}

type readCall struct {
	done chan struct{}
	snap *Snapshot
	err  error
}

// Read implements Reader: one read in flight at a time, shared by all callers.
func (r *reader) Read(ctx context.Context) (*Snapshot, error) {
	for {
		r.mu.Lock()
		if r.last != nil && r.opts.CacheTTL > 0 && r.opts.Now().Sub(r.lastAt) < r.opts.CacheTTL {
			c := r.last
			r.mu.Unlock()
			return c.snap, c.err
		}
		c := r.inflight
		leader := c == nil
		if leader {
			c = &readCall{done: make(chan struct{})}
			r.inflight = c
		}
		r.mu.Unlock()

		if leader {
			r.lead(ctx, c)
			return c.snap, c.err
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the rule read in flight: %w", ctx.Err())
		}
		// The leader's context ended its read: ours may still be alive, try again.
		if c.err != nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) && ctx.Err() == nil {
			continue
		}
		return c.snap, c.err
	}
}

// lead runs the shared read and publishes it; the deferred part also runs if
// the read panics, so waiters are never stuck.
func (r *reader) lead(ctx context.Context, c *readCall) {
	c.err = errors.New("rule read did not complete")
	defer func() {
		r.mu.Lock()
		r.inflight = nil
		// Cache what says something about the node: a snapshot (also the
		// IPVS one), not a failure, which the next scrape should retry.
		if c.snap != nil {
			r.last, r.lastAt = c, r.opts.Now()
		}
		r.mu.Unlock()
		close(c.done)
	}()
	c.snap, c.err = r.read(ctx)
}

// read does one full read. Only the leader calls it, so detection state needs
// the lock only to be visible to the next leader.
func (r *reader) read(ctx context.Context) (*Snapshot, error) {
	start := r.opts.Now()
	snap, err := r.readMode(ctx)
	if err != nil {
		r.mu.Lock()
		r.detected, r.backend = "", "" // detect again next time
		r.mu.Unlock()
	}
	if snap != nil {
		snap.ReadAt = start
		snap.Duration = r.opts.Now().Sub(start)
	}
	return snap, err
}

func (r *reader) readMode(ctx context.Context) (*Snapshot, error) {
	mode := r.opts.Mode
	switch mode {
	case ModeIPTables:
		return r.readIPTables(ctx)
	case ModeNFTables:
		return r.readNFT(ctx)
	case ModeAuto:
	default:
		return nil, fmt.Errorf("rule reader mode %q: want auto, iptables or nftables", mode)
	}

	r.mu.Lock()
	if r.detected != "" && r.opts.Now().Sub(r.detectedAt) >= r.opts.DetectTTL {
		r.detected, r.backend = "", ""
	}
	mode = r.detected
	r.mu.Unlock()

	if mode == "" {
		mode = r.askProxyMode(ctx)
	}
	switch mode {
	case ModeIPTables:
		snap, err := r.readIPTables(ctx)
		return r.remember(ModeIPTables, snap, err)
	case ModeNFTables:
		snap, err := r.readNFT(ctx)
		return r.remember(ModeNFTables, snap, err)
	case ModeIPVS:
		r.mu.Lock()
		first := !r.loggedIPVS
		r.loggedIPVS = true
		r.detected, r.detectedAt = ModeIPVS, r.opts.Now()
		r.mu.Unlock()
		if first {
			r.opts.Logger.Warn("kube-proxy runs in IPVS mode: its rules are not read; blackhole detection falls back to the API view")
		}
		return &Snapshot{Mode: ModeIPVS}, fmt.Errorf("kube-proxy mode ipvs: %w", ErrUnsupported)
	}
	return r.detectByTables(ctx)
}

func (r *reader) remember(mode Mode, snap *Snapshot, err error) (*Snapshot, error) {
	if err == nil || errors.Is(err, ErrUnsupported) {
		r.mu.Lock()
		if r.detected != mode {
			r.detected, r.detectedAt = mode, r.opts.Now()
		}
		r.mu.Unlock()
	}
	return snap, err
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
		return r.remember(iptSnap.Mode, iptSnap, iptErr)
	case nftFound:
		return r.remember(ModeNFTables, nftSnap, nil)
	}
	if errors.Is(nftErr, ErrNoRules) && errors.Is(iptErr, ErrNoRules) {
		return nil, fmt.Errorf("neither nftables nor iptables (legacy or nft backend): %w", ErrNoRules)
	}
	return nil, fmt.Errorf("detecting kube-proxy mode from tables: %w", errors.Join(iptErr, nftErr))
}
