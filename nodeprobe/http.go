// Package nodeprobe talks to the local node: kube-proxy's health server, the health check node ports it serves
// for LoadBalancer Services, and the node's own addresses. Every probe is bounded by its context: a hanging or
// hostile peer becomes a result, never a stuck scrape.
package nodeprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// MaxBodyBytes bounds what a probe reads of a body. kube-proxy's answers are a few hundred bytes; anything much
// larger is not kube-proxy and is not read to the end.
const MaxBodyBytes = 64 << 10

// Result classifies a probe's outcome. The set is closed: it becomes a label value.
type Result string

const (
	ResultOK          Result = "ok"          // HTTP 200 with a well-formed body
	ResultUnavailable Result = "unavailable" // HTTP 503 with a well-formed body
	ResultEmpty       Result = "empty"       // HTTP 200 with an empty body: kube-proxy is removing the Service
	ResultInvalid     Result = "invalid"     // an answer that is not kube-proxy's: other status, bad or oversized body
	ResultTimeout     Result = "timeout"     // no complete answer before the deadline
	ResultRefused     Result = "refused"     // connection refused: nothing listens
	ResultError       Result = "error"       // any other transport failure
	// ResultNoAddress: no local address of the family that kube-proxy serves could be chosen; nothing was
	// probed (health check node ports only).
	ResultNoAddress Result = "no_address"
)

// Results lists every Result of kube-proxy's health server probes, in label order.
var Results = []Result{ResultOK, ResultUnavailable, ResultEmpty, ResultInvalid, ResultTimeout, ResultRefused, ResultError}

// HealthCheckResults lists every Result of a health check node port probe, in label order.
var HealthCheckResults = append(append([]Result{}, Results...), ResultNoAddress)

// NewHTTPClient returns the client probes use. Keep-alives are off: a probe is one request to a local peer, and
// a connection left idle towards a misbehaving server is a leak. Redirects are not followed: kube-proxy never
// sends one.
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             nil, // never route node-local probes through a proxy from the environment
			DialContext:       (&net.Dialer{}).DialContext,
			DisableKeepAlives: true,
			// kube-proxy's headers are a few hundred bytes; Go's default would accept 10 MB from a hostile peer.
			MaxResponseHeaderBytes: MaxBodyBytes,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// response is a bounded HTTP answer.
type response struct {
	status   int
	header   http.Header
	body     []byte
	tooLarge bool
}

// get performs one GET bounded by ctx and reads at most MaxBodyBytes of the body.
func get(ctx context.Context, client *http.Client, url string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return response{}, fmt.Errorf("building request for %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	return readBounded(resp)
}

// readBounded reads resp's body up to MaxBodyBytes (the fuzz targets feed it raw answers through
// http.ReadResponse, so it is the exact code path a real peer's bytes take).
func readBounded(resp *http.Response) (response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return response{}, fmt.Errorf("reading body: %w", err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: body}
	if len(body) > MaxBodyBytes {
		r.body, r.tooLarge = body[:MaxBodyBytes], true
	}
	return r, nil
}

// probeResult is the answer of one of kube-proxy's HTTP servers as a probe reports it (HealthCheck,
// KubeProxyHealth).
type probeResult[T any] interface {
	*T
	// finish records how long the probe took and names what was asked (the server and its URL) in its error.
	finish(took time.Duration, what string)
}

// probe asks url once, as server ("health check", "kube-proxy"), within ctx: parse reads an answer, failed
// builds the result of a request that got none (its Result from the transport error). Both probes of
// kube-proxy's servers go through here, so they time, classify and name their failures alike.
func probe[T any, P probeResult[T]](ctx context.Context, client *http.Client, server, url string,
	failed func(Result, error) T, parse func(response) T) T {
	start := time.Now()
	var out T
	if resp, err := get(ctx, client, url); err != nil {
		out = failed(classifyTransportError(ctx, err), err)
	} else {
		out = parse(resp)
	}
	P(&out).finish(time.Since(start), server+" "+url)
	return out
}

// classifyTransportError maps a failed request to a Result.
func classifyTransportError(ctx context.Context, err error) Result {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
		return ResultTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ResultRefused
	}
	return ResultError
}

// Deadline arithmetic shared by every probe.

// ProbeTimeout is how long one probe may take: the configured cap, or less when the scrape's deadline is nearer.
func ProbeTimeout(ctx context.Context, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < limit {
			return max(left, 0)
		}
	}
	return limit
}
