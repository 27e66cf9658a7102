package kernelrules

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
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
	n := &node{opts: opts, shared: &sharedRead[*Snapshot]{ttl: opts.CacheTTL, now: opts.Now, keep: keep}}
	return newSelector(n)
}

// node is what the readers of one node's rules share, whichever mode is read:
// the options, the single-flight cache in front of every read (sharedRead,
// which knows nothing of rules), the tables kept from the read last (of one
// mode and backend: a read of another empties them, useTables), and the
// watcher of changes (watch.go), which follows the mode read last. One read is
// in flight at a time, whichever reader makes it.
type node struct {
	opts   Options
	shared *sharedRead[*Snapshot]

	// Touched only by the read in flight: shared runs one at a time and its
	// mutex orders one leader's writes before the next's reads.
	tables tableCache

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
	// objects notifications named (nftables mode; nat with the nft backend),
	// relistDumps the netlink dumps (nftables mode) or chain listings
	// (iptables-nft -S) they made: for tests and benchmarks.
	relists     atomic.Uint64
	relistDumps atomic.Uint64
}

// reader reads kube-proxy's rules of one mode: iptables with one backend
// (legacy or nft), or nftables. It detects nothing: the selector (select.go)
// decides which reader reads the node, from what the node shows. One way
// through: read (per table and family, a table re-read only when its change
// signal moved) → parse → snapshot.
type reader struct {
	*node
	mode    Mode    // ModeIPTables or ModeNFTables
	backend Backend // ModeIPTables: BackendLegacy or BackendNFT; "" otherwise
}

// read reads the reader's mode once. It is called only by the selector's read
// in flight.
func (r *reader) read(ctx context.Context) (*Snapshot, error) {
	if r.mode == ModeNFTables {
		return r.readNFT(ctx)
	}
	return r.readIPTables(ctx)
}

// scopeNow is the scope of the mode and backend read last.
func (r *node) scopeNow() watchScope {
	if s := r.scope.Load(); s != nil {
		return *s
	}
	return watchScope{}
}

// binary returns how to run a tool: its bare name when PATH finds it, else its
// full path in /usr/sbin or /sbin (PATH often lacks them outside login shells).
// Not found is ErrNoRules: no rules of that kind can be read here.
func (r *node) binary(name string) (string, error) {
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
