package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestKlogGoesThroughTheJSONHandler: client-go logs its watch failures through klog; main routes klog into the
// exporter's slog handler (the built binary runs here: klog's logger is process-wide, so no in-process test sets it), so with --log.format=json every stderr line is a JSON object — klog's included.
// The API server here answers the start-up Node lookup, then by turns cuts the connection of a watch or list
// (client-go logs that at V levels only) or answers 500 (an API server hiccup: reflectors log "Failed to watch" at
// error level). Debug level, so klog's V-level lines are written too.
func TestKlogGoesThroughTheJSONHandler(t *testing.T) {
	api := newFakeAPIServer(t, "node-a")
	var cut atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/nodes/") && r.URL.Query().Get("watch") == "" {
			api.serve(w, r) // checkNode's GET: the exporter starts
			return
		}
		if cut.Add(1)%2 == 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: leader changed","reason":"InternalError","code":500}`)
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("the test server cannot hijack connections")
			return
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close() // no status line: the client sees the connection die (EOF)
		}
	}))
	t.Cleanup(flaky.Close)

	var stderr syncBuffer
	cmd := exec.Command(buildBinary(t),
		"--node-name", "node-a", "--kubeconfig", writeKubeconfig(t, flaky.URL), "--web.listen-address", freeAddress(t),
		"--kube-proxy.healthz-address", freeAddress(t), "--rules.mode", "none", "--log.format", "json", "--log.level", "debug", "--state.file=")
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait for client-go's own complaint about the cut connections: a reflector line, not one of ours.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "Failed to watch") {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("client-go logged no error in 30s after %d cut or failed API requests; stderr:\n%s", cut.Load(), stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the exporter did not exit cleanly on SIGTERM: %v", err)
	}

	klogLines := 0
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line %d is not JSON (%v): %s", n, err, line)
			continue
		}
		for _, key := range []string{"time", "level", "msg"} {
			if _, ok := rec[key]; !ok {
				t.Errorf("stderr line %d has no %q: %s", n, key, line)
			}
		}
		if rec["msg"] == "Failed to watch" {
			klogLines++
		}
	}
	if klogLines == 0 {
		t.Errorf("no client-go line among the JSON lines; stderr:\n%s", stderr.String())
	}
	t.Logf("%d stderr lines, %d of them client-go's, all JSON; %d API requests cut or failed", strings.Count(stderr.String(), "\n"), klogLines, cut.Load())
}
