package rules

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
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

// ExecRunner runs commands on this host with os/exec.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = errors.Join(ctxErr, err)
		}
		return stdout.Bytes(), &CommandError{Cmd: name + " " + strings.Join(args, " "), Err: err, Stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// ReadFile implements FileReader: commands run in this process's namespace, so
// its own /proc/net is theirs; no `cat` needed (distroless images).
func (ExecRunner) ReadFile(_ context.Context, path string) ([]byte, error) {
	return os.ReadFile(path)
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
