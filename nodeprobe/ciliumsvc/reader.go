package ciliumsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// DefaultSocket is where the Cilium agent serves its REST API on the node (its --socket-path).
const DefaultSocket = "/var/run/cilium/cilium.sock"

// Mode is the read's Info.Mode: Cilium's kube-proxy replacement, read from its service table.
const Mode = "kube-proxy-replacement"

// DefaultTimeout bounds one read (both requests) when the caller's context allows longer: the agent answers
// from memory, so an agent that takes longer is stuck, and the node model must not wait on it.
const DefaultTimeout = 5 * time.Second

// maxAnswer bounds what one answer may hold: the service table of a large cluster (some 10,000 frontends
// with their backends) is a few MiB; more is garbage, not a table.
const maxAnswer = 64 << 20

// Reader reads Cilium's service table from the agent's API. It implements scrape.DataplaneReader; it keeps
// nothing between reads, so concurrent reads are safe.
type Reader struct {
	socket  string
	timeout time.Duration
	client  *http.Client
}

// NewReader returns a reader of the agent listening on socket (DefaultSocket when ""). timeout bounds each read
// (DefaultTimeout when not positive).
func NewReader(socket string, timeout time.Duration) *Reader {
	if socket == "" {
		socket = DefaultSocket
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    1,
		IdleConnTimeout: time.Minute,
	}
	return &Reader{socket: socket, timeout: timeout, client: &http.Client{Transport: tr}}
}

// Read asks the agent whether it replaces kube-proxy and for its service table, within the context's deadline
// and the reader's timeout. The Rules are never nil: with an error they carry only what the read says of
// itself (kind, mode, time), so the node is still known for a Cilium node whose agent did not answer. When
// Cilium does not replace kube-proxy here, the error is dataplane.ErrUnsupported.
func (r *Reader) Read(ctx context.Context) (dataplane.Rules, error) {
	start := time.Now()
	t := &table{info: dataplane.Info{Kind: dataplane.KindCilium, Mode: Mode, ReadAt: start, Watch: dataplane.WatchNone}}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := r.read(ctx, t)
	t.info.Duration = time.Since(start)
	t.info.Families = t.families
	return t, err
}

func (r *Reader) read(ctx context.Context, t *table) error {
	var status statusResponse
	if err := r.get(ctx, "/v1/healthz", &status); err != nil {
		return err
	}
	kpr := status.KubeProxyReplacement
	switch {
	case kpr == nil || kpr.Mode == "":
		return fmt.Errorf("the Cilium agent's status says nothing of its kube-proxy replacement")
	case kpr.Mode != kprTrue && kpr.Mode != kprStrict:
		return fmt.Errorf("%w: Cilium does not replace kube-proxy on this node (kube-proxy-replacement %s)",
			dataplane.ErrUnsupported, kpr.Mode)
	}
	var svcs []service
	if err := r.get(ctx, "/v1/service", &svcs); err != nil {
		return err
	}
	ports, families, err := buildTable(svcs)
	if err != nil {
		return fmt.Errorf("the Cilium agent's service list: %w", err)
	}
	t.ports, t.families = ports, families
	return nil
}

// get asks the agent for path and decodes its JSON answer into v.
func (r *Reader) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+path, nil)
	if err != nil {
		return fmt.Errorf("asking the Cilium agent for %s: %w", path, err)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return r.describe(ctx, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("the Cilium agent answered GET %s with %s: %q", path, resp.Status, msg)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer))
	if err := dec.Decode(v); err != nil {
		if ctx.Err() != nil {
			return r.describe(ctx, path, err)
		}
		return fmt.Errorf("decoding the Cilium agent's answer to GET %s: %w", path, err)
	}
	return nil
}

// describe says why the agent could not be asked, in the words an operator needs.
func (r *Reader) describe(ctx context.Context, path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("the Cilium agent's socket %s does not exist (agent not running here, or its directory not mounted): %w", r.socket, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("the Cilium agent refused the connection on %s (agent not listening): %w", r.socket, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("not allowed to connect to the Cilium agent's socket %s: %w", r.socket, err)
	case ctx.Err() != nil:
		return fmt.Errorf("the Cilium agent did not answer GET %s on %s in time: %w", path, r.socket, err)
	}
	return fmt.Errorf("asking the Cilium agent on %s for %s: %w", r.socket, path, err)
}

// statusResponse is the part of models.StatusResponse (GET /v1/healthz) the reader needs.
type statusResponse struct {
	KubeProxyReplacement *kubeProxyReplacement `json:"kube-proxy-replacement,omitempty"`
}

// kubeProxyReplacement is the part of models.KubeProxyReplacement the reader needs: Mode is "True" or "False"
// (releases before 1.14 also said Strict, Partial, Probe or Disabled; of those only Strict replaced all of
// kube-proxy).
type kubeProxyReplacement struct {
	Mode string `json:"mode,omitempty"`
}

const (
	kprTrue   = "True"
	kprStrict = "Strict"
)
