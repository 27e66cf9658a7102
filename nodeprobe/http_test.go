package nodeprobe_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// Shared test plumbing: raw TCP peers on loopback (for answers net/http would never send), a hang guard and a
// goroutine leak check, plus the hostile-peer table run against both probes.

// hangGuard bounds how long any probe call may take in these tests. It is not a timing assertion: probes get
// deadlines far below it, and only a probe that ignores its deadline comes near it.
const hangGuard = 10 * time.Second

// peer is a raw TCP server on 127.0.0.1. Each connection is handed to serve in its own goroutine. close stops
// accepting, closes every connection and waits for every goroutine, so that a leak check after close sees only
// what the probe left behind.
type peer struct {
	ln    net.Listener
	serve func(c net.Conn, done <-chan struct{})
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	once  sync.Once
}

func startPeer(t *testing.T, serve func(c net.Conn, done <-chan struct{})) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}
	p := &peer{ln: ln, serve: serve, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

func (p *peer) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			p.serve(c, p.done)
		}()
	}
}

func (p *peer) addr() string { return p.ln.Addr().String() }

func (p *peer) close() {
	p.once.Do(func() {
		close(p.done)
		p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// readRequest consumes the probe's request so that the answer is not racing an unread request (which would make
// the kernel reset the connection instead of delivering the answer).
func readRequest(c net.Conn) (*http.Request, error) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return nil, fmt.Errorf("reading the probe's request: %w", err)
	}
	return req, nil
}

// answerRaw returns a serve function that reads the request and writes raw bytes back, then closes.
func answerRaw(raw string) func(net.Conn, <-chan struct{}) {
	return func(c net.Conn, _ <-chan struct{}) {
		if _, err := readRequest(c); err != nil {
			return
		}
		_, _ = io.WriteString(c, raw)
	}
}

// withinGuard runs f and fails the test if it has not returned after hangGuard.
func withinGuard(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("%s still running after %s: the probe does not honour its deadline", what, hangGuard)
	}
}

// checkNoGoroutineLeak records the goroutine count and returns a function that waits (briefly, polling) for the
// count to come back down, failing with a stack dump if it does not. Tests using it must not run in parallel.
func checkNoGoroutineLeak(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d before, %d after the probe and its peer ended: leak\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// countingClient is the probes' own client with a dialer that counts the bytes read from the connection, so a
// test can tell how much of an oversized answer the probe pulled off the wire.
func countingClient() (*http.Client, *atomic.Int64) {
	var n atomic.Int64
	client := nodeprobe.NewHTTPClient()
	tr := client.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, n: &n}, nil
	}
	return client, &n
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// probeUnderTest runs one of the two probes against hostPort and reduces its answer to what every probe shares.
type probeUnderTest struct {
	name string
	run  func(ctx context.Context, client *http.Client, hostPort string) (nodeprobe.Result, int, error)
}

var probesUnderTest = []probeUnderTest{
	{"health-check-node-port", func(ctx context.Context, client *http.Client, hostPort string) (nodeprobe.Result, int, error) {
		host, port := splitHostPort(hostPort)
		h := nodeprobe.ProbeHealthCheckNodePort(ctx, client, host, port, "kubelings", "web")
		return h.Result, h.StatusCode, h.Err
	}},
	{"kube-proxy-healthz", func(ctx context.Context, client *http.Client, hostPort string) (nodeprobe.Result, int, error) {
		k := nodeprobe.ProbeKubeProxy(ctx, client, hostPort, "healthz")
		return k.Result, k.StatusCode, k.Err
	}},
	{"kube-proxy-livez", func(ctx context.Context, client *http.Client, hostPort string) (nodeprobe.Result, int, error) {
		k := nodeprobe.ProbeKubeProxy(ctx, client, hostPort, "livez")
		return k.Result, k.StatusCode, k.Err
	}},
}

func splitHostPort(hostPort string) (string, int32) {
	host, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		panic(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		panic(err)
	}
	return host, int32(port)
}

// refusedAddress returns a loopback host:port where nothing listens: a port that was just bound and released.
func refusedAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

const tenMB = 10 << 20

// hostileCase is one peer that is not a well-behaved kube-proxy.
type hostileCase struct {
	name string
	// serve is the peer; nil means no peer at all (refused connection).
	serve func(c net.Conn, done <-chan struct{})
	// deadline is the probe's context deadline: short where the peer never finishes (the result must come at the
	// deadline), long where the probe must decide on its own well before it.
	deadline   time.Duration
	want       nodeprobe.Result
	wantStatus int
	// maxRead, when set, bounds the bytes the probe may pull off the connection.
	maxRead int64
}

// stall blocks until the peer is closed or the probe hangs up.
func stall(c net.Conn, done <-chan struct{}) {
	hungUp := make(chan struct{})
	go func() {
		defer close(hungUp)
		_, _ = io.Copy(io.Discard, c)
	}()
	select {
	case <-done:
	case <-hungUp:
	}
}

func hostileCases() []hostileCase {
	const short, long = 300 * time.Millisecond, 5 * time.Second
	kubeProxyLike := `{"lastUpdated": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5","currentTime": "2023-05-01 10:00:00.123456789 +0000 UTC m=+3.5"}`
	return []hostileCase{
		{
			name:     "accepts and never answers",
			serve:    func(c net.Conn, done <-chan struct{}) { stall(c, done) },
			deadline: short, want: nodeprobe.ResultTimeout,
		},
		{
			name: "reads the request and never answers",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err == nil {
					stall(c, done)
				}
			},
			deadline: short, want: nodeprobe.ResultTimeout,
		},
		{
			name: "sends headers then stalls the body",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"lastUpdated\": ")
				stall(c, done)
			},
			deadline: short, want: nodeprobe.ResultTimeout,
		},
		{
			name: "trickles the body one byte at a time",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err != nil {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"); err != nil {
					return
				}
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			},
			deadline: short, want: nodeprobe.ResultTimeout,
		},
		{
			name: "10 MB body",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err != nil {
					return
				}
				if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tenMB); err != nil {
					return
				}
				chunk := []byte(strings.Repeat(" ", 32<<10))
				for sent := 0; sent < tenMB; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return // the probe hung up: it did not read it all
					}
				}
			},
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusOK,
			// The probe reads MaxBodyBytes+1 through a buffered reader; anything near 10 MB means an unbounded read.
			maxRead: 1 << 20,
		},
		{
			name: "endless chunked body",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err != nil {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
					return
				}
				chunk := fmt.Sprintf("%x\r\n%s\r\n", 16<<10, strings.Repeat("{", 16<<10))
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, err := io.WriteString(c, chunk); err != nil {
						return
					}
				}
			},
			// An unbounded read would run into the deadline and come back as a timeout, not invalid.
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusOK, maxRead: 1 << 20,
		},
		{
			name: "endless headers",
			serve: func(c net.Conn, done <-chan struct{}) {
				if _, err := readRequest(c); err != nil {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"); err != nil {
					return
				}
				line := "X-Filler: " + strings.Repeat("x", 1000) + "\r\n"
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			},
			// The probe gives up on headers far larger than kube-proxy's (a few hundred bytes) on its own.
			deadline: long, want: nodeprobe.ResultError, maxRead: 1 << 20,
		},
		{
			name:     "invalid JSON",
			serve:    answerRaw(httpAnswer(200, "application/json", `{"lastUpdated": "2023-05-01`)),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusOK,
		},
		{
			name:     "HTML instead of JSON",
			serve:    answerRaw(httpAnswer(200, "text/html", "<html><body>It works!</body></html>\n")),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusOK,
		},
		{
			name:     "JSON of something else",
			serve:    answerRaw(httpAnswer(200, "application/json", `{"status":"ok"}`)),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusOK,
		},
		{
			name:     "503 with an empty body",
			serve:    answerRaw(httpAnswer(503, "", "")),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusServiceUnavailable,
		},
		{
			name:     "500 with a kube-proxy-like body",
			serve:    answerRaw(httpAnswer(500, "application/json", kubeProxyLike)),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusInternalServerError,
		},
		{
			name:     "404",
			serve:    answerRaw(httpAnswer(404, "text/plain", "404 page not found\n")),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusNotFound,
		},
		{
			name:     "302 redirect (never followed)",
			serve:    answerRaw("HTTP/1.1 302 Found\r\nLocation: http://192.0.2.1:10256/healthz\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
			deadline: long, want: nodeprobe.ResultInvalid, wantStatus: http.StatusFound,
		},
		{
			name:     "closes the connection without a word",
			serve:    func(net.Conn, <-chan struct{}) {},
			deadline: long, want: nodeprobe.ResultError,
		},
		{
			name:     "answers something that is not HTTP",
			serve:    answerRaw("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
			deadline: long, want: nodeprobe.ResultError,
		},
		{
			name:     "body shorter than its Content-Length",
			serve:    answerRaw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" + kubeProxyLike),
			deadline: long, want: nodeprobe.ResultError,
		},
		{
			name:     "connection refused",
			deadline: long, want: nodeprobe.ResultRefused,
		},
	}
}

// httpAnswer renders a complete HTTP/1.1 answer that closes the connection.
func httpAnswer(status int, contentType, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	if contentType != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", contentType)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	return b.String()
}

// TestHostilePeers: every misbehaving peer becomes a Result with an error, the call returns (at the deadline at
// the latest), reads a bounded amount, and leaves no goroutine behind.
func TestHostilePeers(t *testing.T) {
	for _, probe := range probesUnderTest {
		for _, tc := range hostileCases() {
			t.Run(probe.name+"/"+tc.name, func(t *testing.T) {
				leak := checkNoGoroutineLeak(t)
				var addr string
				var p *peer
				if tc.serve == nil {
					addr = refusedAddress(t)
				} else {
					p = startPeer(t, tc.serve)
					addr = p.addr()
				}
				client, read := countingClient()

				var (
					result nodeprobe.Result
					status int
					err    error
				)
				withinGuard(t, "probe", func() {
					ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
					defer cancel()
					result, status, err = probe.run(ctx, client, addr)
				})
				if result != tc.want {
					t.Errorf("result = %q (err %v), want %q", result, err, tc.want)
				}
				if status != tc.wantStatus {
					t.Errorf("status code = %d, want %d", status, tc.wantStatus)
				}
				if err == nil {
					t.Errorf("no error for a %q result: the log line would have no reason", result)
				}
				if tc.maxRead > 0 && read.Load() > tc.maxRead {
					t.Errorf("probe read %d bytes off the connection, want at most %d: the body read is not bounded", read.Load(), tc.maxRead)
				}
				if p != nil {
					p.close()
				}
				client.CloseIdleConnections()
				leak()
			})
		}
	}
}

// TestTenMegabyteBodyIsNotReadToTheEnd checks from the peer's side that the probe hung up instead of draining the
// oversized answer: the peer's writes fail before all 10 MB are out. A socket buffer can swallow a few MB, so the
// peer keeps the connection's buffers small.
func TestTenMegabyteBodyIsNotReadToTheEnd(t *testing.T) {
	var sent atomic.Int64
	finished := make(chan struct{})
	p := startPeer(t, func(c net.Conn, _ <-chan struct{}) {
		defer close(finished)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(16 << 10)
		}
		if _, err := readRequest(c); err != nil {
			return
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tenMB); err != nil {
			return
		}
		chunk := []byte(strings.Repeat(" ", 4<<10))
		for sent.Load() < tenMB {
			// A write deadline keeps a peer whose client vanished without a RST from blocking forever.
			_ = c.SetWriteDeadline(time.Now().Add(hangGuard))
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	var h nodeprobe.HealthCheck
	withinGuard(t, "probe", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		host, port := splitHostPort(p.addr())
		h = nodeprobe.ProbeHealthCheckNodePort(ctx, nodeprobe.NewHTTPClient(), host, port, "kubelings", "web")
	})
	if h.Result != nodeprobe.ResultInvalid {
		t.Errorf("result = %q (err %v), want invalid", h.Result, h.Err)
	}
	select {
	case <-finished:
	case <-time.After(hangGuard):
		t.Fatal("peer still writing long after the probe returned: the probe left the connection open")
	}
	if got := sent.Load(); got >= tenMB {
		t.Errorf("peer wrote all %d bytes: the probe read the body to the end", got)
	}
	t.Logf("peer got %d of %d bytes out before the probe hung up", sent.Load(), tenMB)
}

// TestProbeConnectionIsClosed: the probe leaves no idle keep-alive connection towards the peer.
func TestProbeConnectionIsClosed(t *testing.T) {
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","healthy":true}`)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		states[c] = s
		mu.Unlock()
	}
	srv.Start()
	defer srv.Close()

	client := nodeprobe.NewHTTPClient()
	for range 3 {
		k := nodeprobe.ProbeKubeProxy(context.Background(), client, srv.Listener.Addr().String(), "livez")
		if k.Result != nodeprobe.ResultOK {
			t.Fatalf("result = %q (err %v), want ok", k.Result, k.Err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		open, total := 0, len(states)
		for _, s := range states {
			if s != http.StateClosed && s != http.StateHijacked {
				open++
			}
		}
		mu.Unlock()
		if total != 3 {
			t.Fatalf("3 probes used %d connections, want one each (no keep-alive)", total)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d probe connections still open on the server", open, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProbeExpiredContext: a probe whose scrape already ran out of time does not touch the network for long and
// reports a timeout.
func TestProbeExpiredContext(t *testing.T) {
	p := startPeer(t, func(c net.Conn, done <-chan struct{}) { stall(c, done) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, probe := range probesUnderTest {
		var result nodeprobe.Result
		var err error
		withinGuard(t, probe.name, func() { result, _, err = probe.run(ctx, nodeprobe.NewHTTPClient(), p.addr()) })
		if result != nodeprobe.ResultTimeout {
			t.Errorf("%s: result = %q (err %v), want timeout", probe.name, result, err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want it to wrap context.Canceled", probe.name, err)
		}
	}
}

// TestProbeIPv6Loopback: the health check node port probe brackets an IPv6 address.
func TestProbeIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on this machine (%v): the bracketing of IPv6 addresses cannot be exercised", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, healthCheckBody127("kubelings", "web", 1, true))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	_, port := splitHostPort(ln.Addr().String())
	h := nodeprobe.ProbeHealthCheckNodePort(context.Background(), nodeprobe.NewHTTPClient(), "::1", port, "kubelings", "web")
	if h.Result != nodeprobe.ResultOK || h.LocalEndpoints != 1 {
		t.Errorf("got result %q, local endpoints %d (err %v), want ok, 1", h.Result, h.LocalEndpoints, h.Err)
	}
}

func TestProbeTimeout(t *testing.T) {
	const limit = 5 * time.Second
	if got := nodeprobe.ProbeTimeout(context.Background(), limit); got != limit {
		t.Errorf("no deadline: got %s, want the limit %s", got, limit)
	}

	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if got := nodeprobe.ProbeTimeout(far, limit); got != limit {
		t.Errorf("deadline in an hour: got %s, want the limit %s", got, limit)
	}

	near, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got := nodeprobe.ProbeTimeout(near, limit); got <= 0 || got > 2*time.Second {
		t.Errorf("deadline in 2s: got %s, want more than 0 and at most 2s", got)
	}

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if got := nodeprobe.ProbeTimeout(past, limit); got != 0 {
		t.Errorf("deadline passed: got %s, want 0", got)
	}
}

func TestResultsListsEveryResultOnce(t *testing.T) {
	want := []nodeprobe.Result{nodeprobe.ResultOK, nodeprobe.ResultUnavailable, nodeprobe.ResultEmpty,
		nodeprobe.ResultInvalid, nodeprobe.ResultTimeout, nodeprobe.ResultRefused, nodeprobe.ResultError}
	if len(nodeprobe.Results) != len(want) {
		t.Fatalf("Results = %v, want %v", nodeprobe.Results, want)
	}
	// The label values are a contract (docs/metrics.md, alerts): spelled exactly so.
	for i, r := range []string{"ok", "unavailable", "empty", "invalid", "timeout", "refused", "error"} {
		if string(nodeprobe.Results[i]) != r || nodeprobe.Results[i] != want[i] {
			t.Errorf("Results[%d] = %q, want %q", i, nodeprobe.Results[i], r)
		}
	}
}

// TestManyHangingProbesShareOneClient: a scrape probes many health check node ports at once through one client;
// with every peer hanging, every probe still ends at its deadline and nothing is left behind.
func TestManyHangingProbesShareOneClient(t *testing.T) {
	leak := checkNoGoroutineLeak(t)
	p := startPeer(t, func(c net.Conn, done <-chan struct{}) { stall(c, done) })
	host, port := splitHostPort(p.addr())
	client := nodeprobe.NewHTTPClient()
	const n = 50
	results := make([]nodeprobe.HealthCheck, n)
	withinGuard(t, "50 concurrent probes", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = nodeprobe.ProbeHealthCheckNodePort(ctx, client, host, port, "kubelings", "web")
			}()
		}
		wg.Wait()
	})
	for i, r := range results {
		if r.Result != nodeprobe.ResultTimeout || r.Answered() || r.LocalEndpoints != -1 {
			t.Errorf("probe %d: result %q, status %d, local endpoints %d (err %v); want timeout, no answer, -1",
				i, r.Result, r.StatusCode, r.LocalEndpoints, r.Err)
		}
	}
	p.close()
	client.CloseIdleConnections()
	leak()
}
