package kernelrules

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestExecRunnerStream(t *testing.T) {
	ctx := context.Background()
	t.Run("output", func(t *testing.T) {
		var got []byte
		err := ExecRunner{}.Stream(ctx, func(r io.Reader) error {
			var err error
			got, err = io.ReadAll(r)
			return err
		}, "sh", "-c", "printf 'a\\nb\\n'")
		if err != nil || string(got) != "a\nb\n" {
			t.Errorf("got %q, %v", got, err)
		}
	})
	t.Run("cap", func(t *testing.T) {
		err := ExecRunner{MaxOutput: 10}.Stream(ctx, func(r io.Reader) error {
			_, err := io.Copy(io.Discard, r)
			return err
		}, "head", "-c", "100000", "/dev/zero")
		var ce *CommandError
		if !errors.As(err, &ce) || !errors.Is(err, ErrOutputTooLarge) {
			t.Errorf("over the cap: %v, want a CommandError with ErrOutputTooLarge", err)
		}
	})
	t.Run("command fails", func(t *testing.T) {
		// Truncated output that does not parse, and a failed command: the
		// command's failure (with its stderr) is the error.
		res := newIPTablesResult()
		err := ExecRunner{}.Stream(ctx, func(r io.Reader) error { return parseIPTablesSaveFrom(r, res) },
			"sh", "-c", "echo '*nat'; echo 'no table nat' >&2; exit 3")
		var ce *CommandError
		if !errors.As(err, &ce) || !strings.Contains(ce.Stderr, "no table nat") {
			t.Errorf("failed command: %v, want its CommandError", err)
		}
	})
	t.Run("fn gives up", func(t *testing.T) {
		// An endless writer; fn stops after a few bytes: Stream ends the command and returns fn's error. If it
		// did not, it would wait for `yes` forever: the minute is a hang guard, not a timing assertion.
		stop := errors.New("garbage")
		done := make(chan error, 1)
		go func() {
			done <- ExecRunner{}.Stream(ctx, func(r io.Reader) error {
				if _, err := io.ReadFull(r, make([]byte, 1024)); err != nil {
					return err
				}
				return stop
			}, "yes")
		}()
		select {
		case err := <-done:
			if !errors.Is(err, stop) {
				t.Errorf("fn's error: got %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Stream still waits for the endless command a minute after fn gave up")
		}
	})
	t.Run("context", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		err := ExecRunner{}.Stream(cctx, func(r io.Reader) error {
			_, err := io.Copy(io.Discard, r)
			return err
		}, "sleep", "10")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline: got %v", err)
		}
	})
}

// TestParseStreamLines: the streamed parse reads lines longer than its buffer,
// refuses absurd ones, and parses the 10,000-Service save read a few bytes at
// a time exactly as the whole of it.
func TestParseStreamLines(t *testing.T) {
	long := "*filter\n# " + strings.Repeat("x", 200<<10) + "\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
	if err := parseIPTablesSave([]byte(long), newIPTablesResult()); err != nil {
		t.Errorf("a 200 KiB comment line: %v", err)
	}
	huge := "*filter\n# " + strings.Repeat("x", maxSaveLine+10) + "\nCOMMIT\n"
	if err := parseIPTablesSave([]byte(huge), newIPTablesResult()); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a line over %d bytes: %v, want an error", maxSaveLine, err)
	}
	if err := parseIPTablesSave([]byte("*nat\nCOMMIT"), newIPTablesResult()); err != nil {
		t.Errorf("no newline at the end: %v", err)
	}
	data := []byte(bigIPTables())
	whole := newIPTablesResult()
	if err := parseIPTablesSave(data, whole); err != nil {
		t.Fatal(err)
	}
	trickled := newIPTablesResult()
	if err := parseIPTablesSaveFrom(&trickle{r: bytes.NewReader(data)}, trickled); err != nil {
		t.Fatal(err)
	}
	a, b := &Snapshot{}, &Snapshot{}
	a.addFamily(FamilyIPv4, whole.ports)
	b.addFamily(FamilyIPv4, trickled.ports)
	if d := snapshotDiff(a, b); d != "" || whole.rules != trickled.rules || whole.extRules != trickled.extRules {
		t.Errorf("trickled parse differs (%d vs %d rules):\n%s", whole.rules, trickled.rules, d)
	}
}

// trickle returns at most 7 bytes per Read.
type trickle struct{ r io.Reader }

func (t *trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), 7)]) }
