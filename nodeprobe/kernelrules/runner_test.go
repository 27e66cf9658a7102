package kernelrules

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeTool writes an executable shell script into a temporary directory.
func fakeTool(t *testing.T, name, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// runBounded runs the command in a goroutine and fails the test if it has not
// returned within the test's own generous limit (no timing assertion beyond that).
func runBounded(t *testing.T, ctx context.Context, r Runner, name string, args ...string) ([]byte, error) {
	t.Helper()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.Run(ctx, name, args...)
		done <- result{out, err}
	}()
	select {
	case res := <-done:
		return res.out, res.err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return", name)
		return nil, nil
	}
}

func TestExecRunnerHangAfterOutput(t *testing.T) {
	// Prints part of a save, then hangs; the sleep child keeps stdout open after
	// the shell is killed, which only WaitDelay ends.
	tool := fakeTool(t, "iptables-nft-save", `echo "*filter"; sleep 3600`)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	out, err := runBounded(t, ctx, ExecRunner{WaitDelay: 200 * time.Millisecond}, tool, "-c", "-t", "filter")
	if err == nil {
		t.Fatalf("hung command returned no error; output %q", out)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: want a *CommandError wrapping the deadline", err)
	}
}

func TestExecRunnerOutputCapped(t *testing.T) {
	const limit = 1 << 20
	for name, script := range map[string]string{
		"stdout flood":               `exec yes -- "-A KUBE-SERVICES -j ACCEPT"`,
		"stdout flood ignores EPIPE": `trap '' PIPE; while :; do echo "-A KUBE-SERVICES -j ACCEPT" 2>/dev/null; done`,
		"stderr flood":               `exec yes "error" >&2`,
	} {
		t.Run(name, func(t *testing.T) {
			tool := fakeTool(t, "nft", script)
			// No deadline at all: the cap alone must end it.
			out, err := runBounded(t, context.Background(), ExecRunner{MaxOutput: limit, MaxStderr: limit, WaitDelay: 200 * time.Millisecond}, tool, "-j", "list", "ruleset")
			if !errors.Is(err, ErrOutputTooLarge) {
				t.Fatalf("error %v, want ErrOutputTooLarge", err)
			}
			if len(out) > limit {
				t.Errorf("kept %d bytes of stdout, cap %d", len(out), limit)
			}
			var ce *CommandError
			if !errors.As(err, &ce) || len(ce.Stderr) > limit {
				t.Errorf("error %T %v: want a *CommandError with stderr within the cap", err, err)
			}
		})
	}
}

func TestExecRunnerUnderCap(t *testing.T) {
	tool := fakeTool(t, "iptables-nft", `echo "iptables v1.8.9 (nf_tables)"`)
	out, err := runBounded(t, context.Background(), ExecRunner{MaxOutput: 64}, tool, "--version")
	if err != nil || strings.TrimSpace(string(out)) != "iptables v1.8.9 (nf_tables)" {
		t.Fatalf("out %q err %v", out, err)
	}
	if v := parseIPTablesVersion(out); v != "1.8.9" {
		t.Errorf("version %q", v)
	}
	// Exactly at the cap is fine, one byte over is not.
	tool = fakeTool(t, "exact", `printf 0123456789`)
	if _, err := (ExecRunner{MaxOutput: 10}).Run(context.Background(), tool); err != nil {
		t.Errorf("10 bytes under a 10-byte cap: %v", err)
	}
	if _, err := (ExecRunner{MaxOutput: 9}).Run(context.Background(), tool); !errors.Is(err, ErrOutputTooLarge) {
		t.Errorf("10 bytes under a 9-byte cap: %v", err)
	}
}

func TestParseIPTablesVersion(t *testing.T) {
	for in, want := range map[string]string{
		"iptables v1.8.9 (nf_tables)\n":       "1.8.9",
		"iptables-legacy v1.8.7 (legacy)\n":   "1.8.7",
		"ip6tables v1.8.10 (nf_tables)":       "1.8.10",
		"iptables vX.Y\n":                     "",
		"":                                    "",
		"Usage: iptables -[ACD] chain rule\n": "",
	} {
		if got := parseIPTablesVersion([]byte(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// The version query runs through the Runner with the read's context (no
// command without a context in the single-flight leader).
func TestVersionThroughRunner(t *testing.T) {
	f := iptablesNode(t, BackendNFT)
	f.out["iptables-nft --version"] = "iptables v1.8.9 (nf_tables)\n"
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	if _, err := r.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("iptables-nft --version") != 1 {
		t.Errorf("version ran %d times through the Runner, want 1 (ran %v)", f.count("iptables-nft --version"), f.ran(""))
	}
}

// A Runner that hangs makes the whole read end with the caller's deadline.
func TestReadEndsWithContext(t *testing.T) {
	f := iptablesNode(t, BackendNFT)
	f.block = make(chan struct{}) // never closed: every command hangs until ctx ends
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := r.Read(ctx); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the deadline", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("read did not end with its context")
	}
}
