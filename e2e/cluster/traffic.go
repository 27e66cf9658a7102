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
// only new connections) and classifies the outcome. addr is an IP literal and port, IPv4 ("10.250.0.12:30090")
// or IPv6 ("[fd00:250::12]:30090", see HostPort).
func (c *Cluster) Request(ctx context.Context, addr string) Result {
	return HTTPGet(ctx, netns.Dialer{NS: c.ClientNS, Timeout: ConnectTimeout}, "http://"+addr+"/")
}

// RequestVia sends GET http://addr/ from the outside client with addr's IP routed through node, the way a
// router or load balancer would deliver traffic for a LoadBalancer IP to that node. The route stays until the
// next RouteVia or RequestVia for that IP, or Unroute.
func (c *Cluster) RequestVia(ctx context.Context, node, addr string) Result {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return Result{Verdict: Failed, Err: err}
	}
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	if err := c.routeVia(ctx, node, host); err != nil {
		return Result{Verdict: Failed, Err: err}
	}
	return c.Request(ctx, addr)
}

// RouteVia routes ip (a LoadBalancer IP or externalIP, IPv4 or IPv6) from the outside client through node,
// as a static route, BGP or an L2 announcer would: the client's traffic to ip then reaches that node alone.
// It replaces any earlier route for ip.
func (c *Cluster) RouteVia(ctx context.Context, node, ip string) error {
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	return c.routeVia(ctx, node, ip)
}

func (c *Cluster) routeVia(ctx context.Context, node, ip string) error {
	n := c.Node(node)
	if n == nil {
		return fmt.Errorf("route %s: no node %q", ip, node)
	}
	fam, prefix, err := hostRoute(ip)
	if err != nil {
		return err
	}
	gw := n.IP
	if IsIPv6(ip) {
		if gw = n.IP6; gw == "" {
			return fmt.Errorf("route %s via %s: the node has no IPv6 address (Config.DualStack)", ip, node)
		}
	}
	if err := netns.IP(ctx, "-n", c.ClientNS, fam, "route", "replace", prefix, "via", gw); err != nil {
		return fmt.Errorf("route %s via %s: %w", ip, node, err)
	}
	return nil
}

// Unroute removes the client's route for ip (RouteVia, RequestVia); without one the client has none to remove
// and that is not an error.
func (c *Cluster) Unroute(ctx context.Context, ip string) error {
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	fam, prefix, err := hostRoute(ip)
	if err != nil {
		return err
	}
	out, err := netns.Output(ctx, c.ClientNS, "ip", fam, "route", "show", prefix)
	if err != nil {
		return fmt.Errorf("unroute %s: %w", ip, err)
	}
	if strings.TrimSpace(out) == "" {
		return nil
	}
	if err := netns.IP(ctx, "-n", c.ClientNS, fam, "route", "del", prefix); err != nil {
		return fmt.Errorf("unroute %s: %w", ip, err)
	}
	return nil
}

// hostRoute returns ip(8)'s family flag and the host prefix of ip: "-4", "192.0.2.10/32" or "-6",
// "2001:db8::10/128".
func hostRoute(ip string) (family, prefix string, err error) {
	parsed := net.ParseIP(ip)
	switch {
	case parsed == nil:
		return "", "", fmt.Errorf("route: %q is not an IP address", ip)
	case parsed.To4() != nil:
		return "-4", parsed.String() + "/32", nil
	default:
		return "-6", parsed.String() + "/128", nil
	}
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
