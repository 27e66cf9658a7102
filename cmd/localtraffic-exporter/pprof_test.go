package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunPprofOptIn: run() serves Go's profiles under /debug/pprof/ with --web.enable-pprof and not without it
// (the landing page answers 404 there), next to /metrics on the same listener.
func TestRunPprofOptIn(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		api := newFakeAPIServer(t, "node-a")
		kubeconfig := writeKubeconfig(t, api.URL)
		listen, kubeProxy := freeAddress(t), freeAddress(t)
		args := []string{
			"--node-name", "node-a", "--kubeconfig", kubeconfig, "--web.listen-address", listen,
			"--kube-proxy.healthz-address", kubeProxy, "--health-check.address", "127.0.0.1",
			"--rules.mode", "none", "--no-arrivals.enabled", "--state.file", filepath.Join(t.TempDir(), "state.json"),
		}
		if enabled {
			args = append(args, "--web.enable-pprof")
		}
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, io.Discard, &stderr) }()
		get := func(path string) (int, string, error) {
			resp, err := http.Get("http://" + listen + path)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b), err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if status, _, err := get("/healthz"); err == nil && status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("--web.enable-pprof=%v: not serving after 30s\nstderr:\n%s", enabled, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		index, body, err := get("/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		// The process's own command line (this test binary's: run() is called in it).
		cmdline, args0, err := get("/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		if enabled {
			if index != http.StatusOK || !strings.Contains(body, "goroutine") {
				t.Errorf("--web.enable-pprof: /debug/pprof/ answered %d:\n%.300s", index, body)
			}
			if cmdline != http.StatusOK || !strings.Contains(args0, "localtraffic-exporter") {
				t.Errorf("--web.enable-pprof: /debug/pprof/cmdline answered %d %q", cmdline, args0)
			}
		} else if index != http.StatusNotFound || cmdline != http.StatusNotFound {
			t.Errorf("without --web.enable-pprof: /debug/pprof/ answered %d, /debug/pprof/cmdline %d; want 404", index, cmdline)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return within 30s of its context being cancelled")
		}
	}
}
