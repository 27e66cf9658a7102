package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPIServer is the smallest Kubernetes API server run() talks to: it knows one Node, has no Services or
// EndpointSlices, and holds watches open without events. Enough for run()'s start-up check and informers.
type fakeAPIServer struct {
	*httptest.Server
	node string
	// mu guards paths: every request's method and path, in order.
	mu    sync.Mutex
	paths []string
}

// asked is every request the server had, as "METHOD path".
func (f *fakeAPIServer) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.paths)
}

func newFakeAPIServer(t *testing.T, node string) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{node: node}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) nodeJSON() string {
	return fmt.Sprintf(`{"kind":"Node","apiVersion":"v1","metadata":{"name":%q,"uid":"8d8a3e52-0000-4000-8000-000000000001","resourceVersion":"1"},`+
		`"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":%q}]}}`, f.node, f.node)
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		f.serveWatch(w, r)
		return
	}
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/api/v1/nodes/"):
		name := strings.TrimPrefix(p, "/api/v1/nodes/")
		if name != f.node {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes %q not found","reason":"NotFound","details":{"name":%q,"kind":"nodes"},"code":404}`, name, name)
			return
		}
		fmt.Fprint(w, f.nodeJSON())
	case p == "/api/v1/nodes":
		fmt.Fprintf(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[%s]}`, f.nodeJSON())
	case p == "/api/v1/services":
		fmt.Fprint(w, `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	case p == "/apis/discovery.k8s.io/v1/endpointslices":
		fmt.Fprint(w, `{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`)
	}
}

// serveWatch holds a watch open. A streaming list (sendInitialEvents) first gets the bookmark that ends the
// initial events, as a real API server sends after the (here empty or one-Node) initial state.
func (f *fakeAPIServer) serveWatch(w http.ResponseWriter, r *http.Request) {
	kind, apiVersion := "", "v1"
	switch r.URL.Path {
	case "/api/v1/nodes":
		kind = "Node"
	case "/api/v1/services":
		kind = "Service"
	case "/apis/discovery.k8s.io/v1/endpointslices":
		kind, apiVersion = "EndpointSlice", "discovery.k8s.io/v1"
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		if kind == "Node" {
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", f.nodeJSON())
		}
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, apiVersion)
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	<-r.Context().Done()
}

// writeKubeconfig writes a kubeconfig pointing at server and returns its path.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
current-context: fake
users:
- name: fake
  user:
    token: not-a-secret
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runWithGuard calls run and fails the test if it does not return within a generous bound.
func runWithGuard(t *testing.T, ctx context.Context, args []string) (stderr string, err error) {
	t.Helper()
	stdout, stderr, err := runCaptured(t, ctx, args)
	if stdout != "" {
		t.Errorf("run(%q) wrote to stdout (only --help and --version may):\n%s", args, stdout)
	}
	return stderr, err
}

// runCaptured calls run like runWithGuard and returns what it wrote to stdout and to stderr.
func runCaptured(t *testing.T, ctx context.Context, args []string) (stdout, stderr string, err error) {
	t.Helper()
	// run may leave a goroutine that logs after it returned (see TestRunBadWebConfig): locked buffers.
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out, &errOut) }()
	select {
	case err := <-done:
		return out.String(), errOut.String(), err
	case <-time.After(60 * time.Second):
		t.Fatalf("run(%q) still running after 60s", args)
		return "", "", nil
	}
}

func checkOneLine(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("run succeeded, want an error mentioning %q", mentions)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines (main prints it as one line on stderr):\n%s", msg)
	}
	for _, m := range mentions {
		if !strings.Contains(msg, m) {
			t.Errorf("error %q does not mention %q", msg, m)
		}
	}
}

func TestRunBadFlag(t *testing.T) {
	stderr, err := runWithGuard(t, context.Background(), []string{"--node-name", "n", "--probe.timeout", "never"})
	checkOneLine(t, err, "probe.timeout")
	if stderr != "" {
		t.Errorf("run wrote to stderr before failing (main adds the one error line):\n%s", stderr)
	}
}

// TestRunHelpAndVersion: --help and --version print on stdout, as node_exporter does, and exit 0.
func TestRunHelpAndVersion(t *testing.T) {
	stdout, stderr, err := runCaptured(t, context.Background(), []string{"--help"})
	if err != nil {
		t.Errorf("--help: %v, want nil (exit 0)", err)
	}
	if !strings.Contains(stdout, "--node-name") || !strings.HasPrefix(stdout, "usage: localtraffic-exporter") || stderr != "" {
		t.Errorf("--help printed no usage on stdout:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	stdout, stderr, err = runCaptured(t, context.Background(), []string{"--version"})
	if err != nil {
		t.Errorf("--version: %v, want nil", err)
	}
	if !strings.HasPrefix(stdout, "localtraffic-exporter, version ") || !strings.Contains(stdout, "go version:") || stderr != "" {
		t.Errorf("--version printed stdout %q, stderr %q; want prometheus/common/version's Print", stdout, stderr)
	}
}

func TestRunUnreadableKubeconfig(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("\x00\x01 this: is: not: a kubeconfig ]]]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyYAML := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyYAML, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	noServer := filepath.Join(dir, "noserver")
	if err := os.WriteFile(noServer, []byte("apiVersion: v1\nkind: Config\nclusters: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.WriteFile(unreadable, []byte(readFileOrEmpty(writeKubeconfig(t, "https://127.0.0.1:1"))), 0o000); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path string }{
		{"garbage", garbage},
		{"empty", emptyYAML},
		{"no cluster", noServer},
		{"a directory", dir}, // unreadable as a file, for root too
		{"missing", filepath.Join(dir, "missing")},
	}
	if os.Geteuid() != 0 {
		// Root reads a mode-000 file, so this case only exists for other users; "a directory" covers root.
		tests = append(tests, struct{ name, path string }{"mode 000", unreadable})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runWithGuard(t, context.Background(), []string{"--node-name", "n", "--kubeconfig", tc.path})
			checkOneLine(t, err, "kubeconfig")
		})
	}
}

func readFileOrEmpty(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func TestRunUnknownNode(t *testing.T) {
	api := newFakeAPIServer(t, "node-a")
	kubeconfig := writeKubeconfig(t, api.URL)
	_, err := runWithGuard(t, context.Background(), []string{"--node-name", "node-b", "--kubeconfig", kubeconfig})
	checkOneLine(t, err, `"node-b"`, "does not exist")
}

func TestRunAPIServerUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	kubeconfig := writeKubeconfig(t, "http://"+addr)
	_, err = runWithGuard(t, context.Background(), []string{"--node-name", "node-a", "--kubeconfig", kubeconfig})
	checkOneLine(t, err, `"node-a"`)
	if strings.Contains(err.Error(), "does not exist") {
		t.Errorf("an unreachable API server is reported as an unknown node: %v", err)
	}
}

// freeAddress returns a loopback address nothing listens on right now.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRunServesAndStops: against a fake API server run() serves /healthz, /readyz and /metrics on the listen
// address, and returns nil once its context is cancelled.
func TestRunServesAndStops(t *testing.T) {
	api := newFakeAPIServer(t, "node-a")
	kubeconfig := writeKubeconfig(t, api.URL)
	listen, kubeProxy := freeAddress(t), freeAddress(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"--node-name", "node-a", "--kubeconfig", kubeconfig, "--web.listen-address", listen,
			"--kube-proxy.healthz-address", kubeProxy, "--health-check.address", "127.0.0.1",
			"--rules.mode", "none", "--log.format", "json", "--state.file", filepath.Join(t.TempDir(), "state.json"),
		}, io.Discard, &stderr)
	}()

	base := "http://" + listen
	get := func(path string) (int, string, error) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// Wait for the server and the informers (a real API server would take as long).
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _, err := get("/readyz")
		if err == nil && status == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s (last: status %d, err %v)\nstderr:\n%s", status, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status, body, err := get("/healthz"); err != nil || status != http.StatusOK {
		t.Errorf("/healthz: %d %q %v", status, body, err)
	}
	// Without --events.write the Event writer is not even built: no write at all, no Lease of its own read (the
	// announcers list Cilium's in kube-system), no Event.
	for _, p := range api.asked() {
		if !strings.HasPrefix(p, "GET ") || strings.Contains(p, "events.k8s.io") || strings.Contains(p, "/leases/") {
			t.Errorf("the Event writer is off, yet the exporter asked the API %s", p)
		}
	}
	// The ended episodes are served for the Event writer: none yet, under this process's instance id.
	if status, body, err := get("/episodes?after=0"); err != nil || status != http.StatusOK ||
		!strings.Contains(body, `"node":"node-a"`) || !strings.Contains(body, `"episodes":[]`) || strings.Contains(body, `"instance":""`) {
		t.Errorf("/episodes: %d %q %v", status, body, err)
	}
	// kube-proxy's health server is probed by the node model, on its own schedule: a scrape shows its answer
	// once the model has it (at once after the informers synced), without asking for it.
	wants := []string{
		`localtraffic_build_info{`,
		`localtraffic_kube_proxy_up{endpoint="healthz",node="node-a"} 0`,
		`localtraffic_kube_proxy_result{endpoint="healthz",node="node-a",result="refused"} 1`,
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, body, err := get("/metrics")
		if err != nil || status != http.StatusOK {
			t.Fatalf("/metrics: %d %v", status, err)
		}
		var missing []string
		for _, want := range wants {
			if !strings.Contains(body, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s", strings.Join(missing, ", "))
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its context being cancelled")
	}
	if _, _, err := get("/healthz"); err == nil {
		t.Error("still serving after run returned")
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildBinary builds the exporter into a temporary directory, as a user would get it.
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		// Not on PATH (go test run by its full path): the go whose GOROOT built this test.
		goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "localtraffic-exporter")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinaryFailsWithOneLine: the built binary, given a bad flag, an unreadable kubeconfig or an unknown node
// name, exits non-zero with exactly one line on stderr and nothing on stdout.
func TestBinaryFailsWithOneLine(t *testing.T) {
	bin := buildBinary(t)
	api := newFakeAPIServer(t, "node-a")
	kubeconfig := writeKubeconfig(t, api.URL)
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("]]] not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		mentions string
	}{
		{"bad flag", []string{"--node-name", "n", "--probe.timeout", "never"}, "probe.timeout"},
		{"unknown flag", []string{"--nodename", "n"}, "nodename"},
		{"garbage kubeconfig", []string{"--node-name", "n", "--kubeconfig", garbage}, "kubeconfig"},
		{"kubeconfig is a directory", []string{"--node-name", "n", "--kubeconfig", t.TempDir()}, "kubeconfig"},
		{"unknown node", []string{"--node-name", "node-b", "--kubeconfig", kubeconfig}, "does not exist"},
		{"bad flag value after a good one", []string{"--node-name", "n", "--probe.concurrency", "many"}, "--probe.concurrency"},
		{"single-dash long flag", []string{"-node-name", "n"}, "bad command line"},
		{"value for --version", []string{"--version=yes"}, "--version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = append(os.Environ(), "NODE_NAME=")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("exit: %v, want a non-zero exit code\nstderr:\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || lines[0] == "" || !strings.HasSuffix(stderr.String(), "\n") {
				t.Errorf("stderr is not exactly one line:\n%q", stderr.String())
			}
			if !strings.HasPrefix(lines[0], "localtraffic-exporter: ") || !strings.Contains(lines[0], tc.mentions) {
				t.Errorf("stderr %q does not say localtraffic-exporter: …%s…", lines[0], tc.mentions)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout not empty: %q", stdout.String())
			}
		})
	}
	// As in node_exporter: --web.systemd-socket without socket activation (no LISTEN_FDS) cannot serve; the
	// exporter has started (it logged), so the failure is its last line and the exit code.
	t.Run("systemd socket without activation", func(t *testing.T) {
		cmd := exec.Command(bin, "--node-name", "node-a", "--kubeconfig", kubeconfig, "--web.systemd-socket", "--rules.mode", "none")
		cmd.Env = append(os.Environ(), "LISTEN_FDS=", "LISTEN_PID=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("exit: %v, want a non-zero exit code\nstderr:\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if last := lines[len(lines)-1]; last != "localtraffic-exporter: serving metrics: no socket activation file descriptors found" {
			t.Errorf("last stderr line %q, want the systemd activation error", last)
		}
	})
	// --help, -h and --version print on stdout and exit 0, as the Prometheus exporters' kingpin command lines do.
	for _, tc := range []struct{ arg, prefix string }{
		{"--help", "usage: localtraffic-exporter [<flags>]"},
		{"-h", "usage: localtraffic-exporter [<flags>]"},
		{"--version", "localtraffic-exporter, version "},
	} {
		t.Run(tc.arg+" exits 0", func(t *testing.T) {
			cmd := exec.Command(bin, tc.arg)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Errorf("%s: %v\n%s", tc.arg, err, stderr.String())
			}
			if !strings.HasPrefix(stdout.String(), tc.prefix) || stderr.Len() != 0 {
				t.Errorf("%s: stdout %q, stderr %q; want stdout starting %q and no stderr", tc.arg, stdout.String(), stderr.String(), tc.prefix)
			}
		})
	}
}

func TestRunBadWebConfig(t *testing.T) {
	api := newFakeAPIServer(t, "node-a")
	kubeconfig := writeKubeconfig(t, api.URL)
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	// A certificate file that does not exist: exporter-toolkit's validation must refuse it before serving.
	if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: /nonexistent/cert.pem\n  key_file: /nonexistent/key.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := runWithGuard(t, ctx, []string{"--node-name", "node-a", "--kubeconfig", kubeconfig,
		"--web.listen-address", freeAddress(t), "--web.config.file", webConfig, "--rules.mode", "none"})
	checkOneLine(t, err, "--web.config.file")
}
