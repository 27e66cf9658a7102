package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The selector picks the reader of the node's rules: which of kube-proxy's
// modes runs here — iptables with the legacy backend, iptables with the nft
// backend, or nftables — each read by its own reader (a reader value of that
// mode and backend; they share the node's machinery, reader.go). Options.Mode
// names the mode or leaves it to detection (ModeAuto): kube-proxy's /proxyMode
// first, else the tables present. The iptables backend is always detected, as
// the kube-proxy image's iptables-wrapper picks it. A detected mode and
// backend are kept for Options.DetectTTL and forgotten after a failed read, so
// a kube-proxy restarted in another mode is followed within that bound (or at
// its first failed read). IPVS mode has no reader: the selector says so
// (ErrUnsupported).
type selector struct {
	*node
	// Touched only by the read in flight (node.shared runs one at a time).
	det        detection
	loggedIPVS bool
	// The readers of each mode and backend.
	nft    *reader
	legacy *reader // iptables, legacy backend
	iptNFT *reader // iptables, nft backend
}

func newSelector(n *node) *selector {
	return &selector{node: n,
		nft:    &reader{node: n, mode: ModeNFTables},
		legacy: &reader{node: n, mode: ModeIPTables, backend: BackendLegacy},
		iptNFT: &reader{node: n, mode: ModeIPTables, backend: BackendNFT},
	}
}

// iptables is the reader of iptables mode with backend.
func (r *selector) iptables(backend Backend) *reader {
	if backend == BackendLegacy {
		return r.legacy
	}
	return r.iptNFT
}

// detection is what rarely changes: the mode and, in iptables mode, the backend.
type detection struct {
	mode      Mode // "" when not detected yet (ModeAuto only)
	at        time.Time
	backend   Backend // iptables mode; "" when not detected yet
	backendAt time.Time
}

// Read implements Reader: one read in flight at a time, shared by all callers;
// the reader of the mode the node runs in reads.
func (r *selector) Read(ctx context.Context) (*Snapshot, error) {
	return r.shared.Do(ctx, r.read)
}

// read does one pass through the pipeline. A failure forgets the detection and
// every table kept, so the next read starts from nothing.
func (r *selector) read(ctx context.Context) (*Snapshot, error) {
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

func (r *selector) detectAndRead(ctx context.Context) (*Snapshot, error) {
	mode, snap, err := r.detectMode(ctx)
	if err != nil || snap != nil {
		return snap, err
	}
	switch mode {
	case ModeIPTables:
		return r.readIPTables(ctx)
	case ModeNFTables:
		return r.nft.read(ctx)
	}
	return r.ipvs(), fmt.Errorf("kube-proxy mode ipvs: %w", ErrUnsupported)
}

// detectMode says which mode to read. Detecting by the tables present reads
// them: that first snapshot is returned too, so they are not read twice.
func (r *selector) detectMode(ctx context.Context) (Mode, *Snapshot, error) {
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
func (r *selector) ipvs() *Snapshot {
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

// askProxyMode asks kube-proxy's /proxyMode; "" when it cannot say.
func (r *selector) askProxyMode(ctx context.Context) Mode {
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
func (r *selector) detectByTables(ctx context.Context) (*Snapshot, error) {
	nftSnap, nftErr := r.nft.read(ctx)
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

// toolVersion runs the backend's `iptables-<backend> --version` through the
// Runner, with the read's context (so the single-flight leader never runs a
// command without one), and returns its version ("1.8.9"); "" when unknown.
// Informational only: a failure is logged by the caller as an empty version.
func (r *selector) toolVersion(ctx context.Context, backend Backend) string {
	bin, err := r.binary("iptables-" + string(backend))
	if err != nil {
		return ""
	}
	out, err := r.opts.Runner.Run(ctx, bin, "--version")
	if err != nil {
		return ""
	}
	return parseIPTablesVersion(out)
}

// iptablesBackend returns the backend kube-proxy uses, detected at most once
// per DetectTTL.
func (r *selector) iptablesBackend(ctx context.Context) (Backend, error) {
	if r.det.backend != "" && r.opts.Now().Sub(r.det.backendAt) < r.opts.DetectTTL {
		return r.det.backend, nil
	}
	backend, err := r.detectBackend(ctx)
	if err != nil {
		return "", err
	}
	version := r.toolVersion(ctx, backend)
	r.opts.Logger.Debug("iptables backend detected", "backend", backend, "version", version)
	r.det.backend, r.det.backendAt = backend, r.opts.Now()
	return backend, nil
}

// readIPTables reads iptables mode with the reader of the backend kube-proxy
// uses.
func (r *selector) readIPTables(ctx context.Context) (*Snapshot, error) {
	backend, err := r.iptablesBackend(ctx)
	if err != nil {
		return nil, err
	}
	return r.iptables(backend).read(ctx)
}

// detectBackend picks legacy or nft as the kube-proxy image's iptables-wrapper
// does: kubelet's KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY chains in mangle
// (nft checked first), else the backend holding more KUBE- rules (nft on a tie).
func (r *selector) detectBackend(ctx context.Context) (Backend, error) {
	start := time.Now()
	defer func() { r.opts.Logger.Debug("iptables backend detection", "took", time.Since(start)) }()
	var errs []error
	for _, backend := range []Backend{BackendNFT, BackendLegacy} {
		for _, f := range ipFamilies {
			res, err := r.saveTables(ctx, f, backend, []string{"mangle"})
			if err != nil {
				if errors.Is(err, ErrNoRules) { // binary missing
					continue
				}
				errs = append(errs, err)
				continue
			}
			if res != nil && res.hintChains {
				return backend, nil
			}
		}
	}
	count := map[Backend]int{}
	for _, backend := range []Backend{BackendNFT, BackendLegacy} {
		for _, f := range ipFamilies {
			res, err := r.saveTables(ctx, f, backend, []string{"nat", "filter"})
			if err != nil {
				if !errors.Is(err, ErrNoRules) {
					errs = append(errs, err)
				}
				continue
			}
			if res != nil {
				count[backend] += res.kubeRules
			}
		}
	}
	if count[BackendLegacy] == 0 && count[BackendNFT] == 0 {
		if len(errs) > 0 {
			return "", fmt.Errorf("detecting the iptables backend: %w", errors.Join(errs...))
		}
		return "", fmt.Errorf("no KUBE- rules in either iptables backend: %w", ErrNoRules)
	}
	if count[BackendLegacy] > count[BackendNFT] {
		return BackendLegacy, nil
	}
	return BackendNFT, nil
}
