package kernelrules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Runner runs a command and returns its standard output. It is the seam for tests
// (fake outputs) and for reading another network namespace (NetnsRunner).
// On failure it should return a *CommandError so the reader can tell an absent
// table from a broken one by the command's standard error.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// FileReader is optionally implemented by a Runner that can read a file as seen
// from the network namespace its commands run in (/proc/net/* is per namespace).
// Without it the reader runs `cat`. A missing file must give an error matching
// fs.ErrNotExist.
type FileReader interface {
	ReadFile(ctx context.Context, path string) ([]byte, error)
}

// CommandError is a failed command with its standard error.
type CommandError struct {
	Cmd    string
	Err    error
	Stderr string
}

func (e *CommandError) Error() string {
	msg := e.Cmd + ": " + e.Err.Error()
	if s := strings.TrimSpace(e.Stderr); s != "" {
		if len(s) > 300 {
			s = s[:300] + "..."
		}
		msg += ": " + s
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// Output bounds for ExecRunner: a full iptables-save of a very large cluster is
// tens of MiB; anything past the cap is a broken or hostile tool, not a ruleset.
const (
	DefaultMaxOutput = 64 << 20 // stdout
	DefaultMaxStderr = 1 << 20
	// DefaultWaitDelay bounds the wait for a killed command's output pipes (a
	// child that inherited them can hold them open after the command is killed):
	// a command ends at most this long after its context. Short, because the
	// context is the scrape's deadline; the save tools fork no children, so
	// nothing legitimate is cut.
	DefaultWaitDelay = 500 * time.Millisecond
)

// ErrOutputTooLarge is returned (wrapped in a *CommandError) when a command writes
// more than the runner's cap; the command is killed.
var ErrOutputTooLarge = errors.New("command output exceeds the cap")

// ExecRunner runs commands on this host with os/exec. Every command ends with its
// context; its stdout and stderr are capped (past the cap it is killed and Run
// fails), and after it is killed Run waits at most WaitDelay for its output.
// The zero value uses the defaults above.
type ExecRunner struct {
	MaxOutput int64         // stdout cap in bytes; 0: DefaultMaxOutput
	MaxStderr int64         // stderr cap in bytes; 0: DefaultMaxStderr
	WaitDelay time.Duration // 0: DefaultWaitDelay
}

// limits returns the caps and the wait bound, defaults filled in.
func (e ExecRunner) limits() (maxOut, maxErr int64, wait time.Duration) {
	maxOut, maxErr, wait = e.MaxOutput, e.MaxStderr, e.WaitDelay
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}
	if maxErr <= 0 {
		maxErr = DefaultMaxStderr
	}
	if wait <= 0 {
		wait = DefaultWaitDelay
	}
	return maxOut, maxErr, wait
}

// overCap is the error of a command whose stdout (stdoutOver) or else stderr
// went past its cap.
func overCap(stdoutOver bool, maxOut, maxErr int64) error {
	which, limit := "stdout", maxOut
	if !stdoutOver {
		which, limit = "stderr", maxErr
	}
	return fmt.Errorf("%s over %d bytes: %w", which, limit, ErrOutputTooLarge)
}

// Run implements Runner.
func (e ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	maxOut, maxErr, wait := e.limits()
	// Overflow cancels the command's own context: CommandContext kills it.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	cmd.WaitDelay = wait
	stdout := &cappedBuffer{max: maxOut, overflow: cancel}
	stderr := &cappedBuffer{max: maxErr, overflow: cancel}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	switch {
	case stdout.over || stderr.over:
		err = overCap(stdout.over, maxOut, maxErr)
	case err == nil:
		return stdout.buf.Bytes(), nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		err = errors.Join(ctxErr, err)
	}
	return stdout.buf.Bytes(), &CommandError{Cmd: name + " " + strings.Join(args, " "), Err: err, Stderr: stderr.buf.String()}
}

// cappedBuffer keeps at most max bytes; a write past that fails and calls
// overflow once (os/exec then stops copying and closes the pipe).
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int64
	over     bool
	overflow func()
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.over {
		return 0, ErrOutputTooLarge
	}
	if room := c.max - int64(c.buf.Len()); int64(len(p)) > room {
		c.buf.Write(p[:max(room, 0)])
		c.over = true
		c.overflow()
		return 0, ErrOutputTooLarge
	}
	return c.buf.Write(p)
}

// ReadFile implements FileReader: commands run in this process's namespace, so
// its own /proc/net is theirs; no `cat` needed (distroless images). The read is
// capped like stdout (a /proc file never blocks).
func (e ExecRunner) ReadFile(_ context.Context, path string) ([]byte, error) {
	maxOut := e.MaxOutput
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxOut+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxOut {
		return nil, fmt.Errorf("%s over %d bytes: %w", path, maxOut, ErrOutputTooLarge)
	}
	return data, nil
}

// NetnsRunner runs every command inside the named network namespace through
// `ip netns exec` (tests, or an exporter reading a namespace it does not live in).
type NetnsRunner struct {
	Namespace string
	Runner    Runner // nil: ExecRunner
}

// Run implements Runner.
func (n NetnsRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	r := n.Runner
	if r == nil {
		r = ExecRunner{}
	}
	return r.Run(ctx, "ip", append([]string{"netns", "exec", n.Namespace, name}, args...)...)
}

// Streamer is optionally implemented by a Runner that can hand a command's
// standard output to fn while the command writes it, so that the reader parses
// a save of tens of MiB in bounded memory instead of holding it whole. fn reads
// until EOF or returns an error, which ends the command. A failed command is a
// *CommandError (it wins over fn's error: a parse error of truncated output says
// less than the command's own failure); fn's own error is returned as it is.
type Streamer interface {
	Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error
}

// Stream implements Streamer with the same caps, context and wait bound as Run.
func (e ExecRunner) Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error {
	maxOut, maxErr, wait := e.limits()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	cmd.WaitDelay = wait
	stderr := &cappedBuffer{max: maxErr, overflow: cancel}
	cmd.Stderr = stderr
	cmdName := name + " " + strings.Join(args, " ")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return &CommandError{Cmd: cmdName, Err: err}
	}
	if err := cmd.Start(); err != nil {
		return &CommandError{Cmd: cmdName, Err: err}
	}
	out := &cappedReader{r: pipe, left: maxOut}
	ferr := fn(out)
	if ferr == nil {
		// fn stopped at EOF; whatever is left (nothing, for a parser) is read
		// so that Wait does not race the pipe.
		_, ferr = io.Copy(io.Discard, out)
	}
	if ferr != nil {
		cancel() // the command may be blocked writing to a pipe nobody reads
	}
	err = cmd.Wait()
	switch {
	case out.over || stderr.over:
		err = overCap(out.over, maxOut, maxErr)
	case err == nil:
		return ferr
	case ferr != nil && ctx.Err() == nil && killedBySignal(err):
		// Killed because fn gave up (a command that failed on its own exits
		// with a status instead): fn's error is the story.
		return ferr
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		err = errors.Join(ctxErr, err)
	}
	return &CommandError{Cmd: cmdName, Err: err, Stderr: stderr.buf.String()}
}

// cappedReader reads at most left bytes; past that it fails with
// ErrOutputTooLarge and says so in over.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.over {
		return 0, ErrOutputTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return n + int(c.left), ErrOutputTooLarge
	}
	return n, err
}

// Stream implements Streamer inside the namespace: through the inner Runner's
// Stream when it has one, else its Run (the whole output, then fn).
func (n NetnsRunner) Stream(ctx context.Context, fn func(io.Reader) error, name string, args ...string) error {
	r := n.Runner
	if r == nil {
		r = ExecRunner{}
	}
	full := append([]string{"netns", "exec", n.Namespace, name}, args...)
	if s, ok := r.(Streamer); ok {
		return s.Stream(ctx, fn, "ip", full...)
	}
	out, err := r.Run(ctx, "ip", full...)
	if err != nil {
		return err
	}
	return fn(bytes.NewReader(out))
}

// killedBySignal: the command ended by a signal (our kill), not an exit status.
func killedBySignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
