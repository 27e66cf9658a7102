package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scripts print markers the shell computes (up$((1+1)) prints up2), so the log's start line, which shows
// the script, cannot match them.

// TestProcessStopWithinGrace: a child that exits on SIGTERM stops within its grace; its output and the start
// line are in its log.
func TestProcessStopWithinGrace(t *testing.T) {
	p, err := StartProcess(ProcessSpec{Name: "graceful", LogDir: t.TempDir(), Bin: "sh",
		Args: []string{"-c", `trap 'echo bye$((1+1)); exit 0' TERM; echo up$((1+1)); while :; do sleep 0.05; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Await(context.Background(), 10*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(p.LogTail(1000), "up2") {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); done {
		t.Fatal("exited before Stop")
	}
	if !p.Stop(10 * time.Second) {
		t.Error("Stop: a child that exits on SIGTERM did not end within its grace")
	}
	log := p.LogTail(1000)
	if !strings.HasPrefix(log, "=== ") || !strings.Contains(log, "start: sh") || !strings.Contains(log, "bye2") {
		t.Errorf("log:\n%s", log)
	}
	if done, _ := p.Exited(); !done {
		t.Error("not exited after Stop")
	}
}

// TestProcessStopKillsAfterGrace: a child that ignores SIGTERM is killed after the grace, and Stop says so;
// Stop(0) kills at once.
func TestProcessStopKillsAfterGrace(t *testing.T) {
	for _, grace := range []time.Duration{200 * time.Millisecond, 0} {
		p, err := StartProcess(ProcessSpec{Name: "stubborn", LogDir: t.TempDir(), Bin: "sh",
			Args: []string{"-c", `trap '' TERM; echo up$((1+1)); while :; do sleep 0.05; done`}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Await(context.Background(), 10*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(p.LogTail(1000), "up2") {
				return errNotYet
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if p.Stop(grace) {
			t.Errorf("Stop(%s) of a child that ignores SIGTERM reported an end within the grace", grace)
		}
		if done, err := p.Exited(); !done || err == nil {
			t.Errorf("Stop(%s): exited %v with %v, want killed", grace, done, err)
		}
	}
}

// TestProcessAwaitSeesExit: Await gives up as soon as the process has exited, with its log tail; the caller's
// writers get the streams instead of the log.
func TestProcessAwaitSeesExit(t *testing.T) {
	var out lockedWriter
	p, err := StartProcess(ProcessSpec{Name: "quitter", LogDir: t.TempDir(), Bin: "sh",
		Args: []string{"-c", "echo out$((1+1)); echo err$((1+1)) >&2; exit 3"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.Await(context.Background(), time.Minute, 20*time.Millisecond, func() error { return errNotYet })
	if err == nil || !strings.Contains(err.Error(), "quitter exited: exit status 3") {
		t.Fatalf("Await: %v", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("Await waited %s for a process that had exited", time.Since(start))
	}
	if got := out.String(); !strings.Contains(got, "out2") || !strings.Contains(got, "err2") {
		t.Errorf("caller's writers got %q", got)
	}
	if log := p.LogTail(1000); strings.Contains(log, "out2") || strings.Contains(log, "err2") {
		t.Errorf("the log has the streams the caller took:\n%s", log)
	}
	if err := p.Wait(); err == nil {
		t.Error("Wait: nil, want exit status 3")
	}
	if !p.Stop(time.Second) {
		t.Error("Stop of an ended process: want true")
	}
	var none *Process
	if !none.Stop(time.Second) {
		t.Error("Stop of a nil process: want true")
	}
}

var errNotYet = errorString("not yet")

type errorString string

func (e errorString) Error() string { return string(e) }

type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
