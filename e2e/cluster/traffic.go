package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// Verdict is what a client experienced.
type Verdict string

// Verdicts of a request.
const (
	// OK: the connection was accepted and an HTTP response came back (any status).
	OK Verdict = "ok"
	// Blackhole: the connection attempt timed out — packets were silently dropped.
	Blackhole Verdict = "blackhole"
	// Refused: the connection was actively refused (RST or ICMP unreachable).
	Refused Verdict = "refused"
	// Failed: anything else (reset after connect, malformed response …); Err says what.
	Failed Verdict = "error"
)

// Result is the outcome of one request.
type Result struct {
	Verdict Verdict
	Status  int    // HTTP status code when Verdict is OK
	Body    string // response body (first 64 KiB) when Verdict is OK
	Err     error  // the error behind a non-OK verdict
}

func (r Result) String() string {
	switch r.Verdict {
	case OK:
		return fmt.Sprintf("ok (%d)", r.Status)
	case Failed:
		return fmt.Sprintf("error (%v)", r.Err)
	default:
		return string(r.Verdict)
	}
}

// ConnectTimeout is how long a connection attempt may take before it counts as a blackhole. Inside these
// namespaces an answering peer replies in well under a millisecond, so 2s only ever expires on dropped SYNs.
const ConnectTimeout = 2 * time.Second

// Request sends GET http://addr/ from the outside client namespace on a fresh connection (kube-proxy drops
// only new connections) and classifies the outcome.
func (c *Cluster) Request(ctx context.Context, addr string) Result {
	return HTTPGet(ctx, netns.Dialer{NS: c.ClientNS, Timeout: ConnectTimeout}, "http://"+addr+"/")
}

// RequestVia sends GET http://addr/ from the outside client with addr's IP routed through node, the way a
// router or load balancer would deliver traffic for a LoadBalancer IP to that node.
func (c *Cluster) RequestVia(ctx context.Context, node, addr string) Result {
	n := c.Node(node)
	if n == nil {
		return Result{Verdict: Failed, Err: fmt.Errorf("no node %q", node)}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return Result{Verdict: Failed, Err: err}
	}
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	if err := netns.IP(ctx, "-n", c.ClientNS, "route", "replace", host+"/32", "via", n.IP); err != nil {
		return Result{Verdict: Failed, Err: err}
	}
	return c.Request(ctx, addr)
}

// HTTPGet GETs url through dialer on a fresh connection and classifies the outcome.
func HTTPGet(ctx context.Context, d netns.Dialer, url string) Result {
	client := &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		Timeout:   ConnectTimeout + 5*time.Second,
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Result{Verdict: Failed, Err: err}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{Verdict: classify(err), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Result{Verdict: Failed, Status: resp.StatusCode, Err: fmt.Errorf("read body: %w", err)}
	}
	return Result{Verdict: OK, Status: resp.StatusCode, Body: string(body)}
}

func classify(err error) Verdict {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
			return Refused
		}
		if op.Timeout() || strings.Contains(err.Error(), "i/o timeout") {
			return Blackhole
		}
	}
	return Failed
}
