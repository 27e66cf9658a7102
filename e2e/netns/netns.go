// Package netns creates named Linux network namespaces with `ip netns`, runs commands in them, and opens
// sockets inside them from the calling process. Sockets keep the namespace they were created in, so the test
// process can talk to addresses inside the namespaces without adding anything to the host's own namespace.
package netns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runDir is where iproute2 keeps the bind mounts that name network namespaces.
const runDir = "/run/netns"

// Add creates the named network namespace with loopback up.
func Add(ctx context.Context, name string) error {
	if err := IP(ctx, "netns", "add", name); err != nil {
		return err
	}
	return IP(ctx, "-n", name, "link", "set", "lo", "up")
}

// Delete removes the named network namespace; a namespace that does not exist is not an error.
func Delete(ctx context.Context, name string) error {
	if _, err := os.Stat(filepath.Join(runDir, name)); os.IsNotExist(err) {
		return nil
	}
	return IP(ctx, "netns", "delete", name)
}

// List returns the names of all named network namespaces.
func List() ([]string, error) {
	entries, err := os.ReadDir(runDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", runDir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// IP runs the ip command with args and returns its output in the error when it fails.
func IP(ctx context.Context, args ...string) error {
	_, err := Output(ctx, "", "ip", args...)
	return err
}

// Output runs name with args inside namespace ns (the caller's namespace when ns is empty) and returns stdout.
func Output(ctx context.Context, ns, name string, args ...string) (string, error) {
	cmd := Command(ctx, ns, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s (netns %q): %w: %s", name, strings.Join(args, " "), ns,
			err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Command returns a command that runs name inside namespace ns (directly when ns is empty). The child gets
// its own process group, so Kill can stop everything it spawned, and SIGKILL when this process dies, so an
// interrupted test run leaves no process behind. `ip netns exec` execs the command in place, so the pid is the
// command's own.
func Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return KillGroup(cmd) }
	return cmd
}

// KillGroup sends SIGKILL to the process group of a command started by Command.
func KillGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err == syscall.ESRCH {
		return nil
	}
	return err
}

// Do runs fn on an OS thread switched into namespace ns and switches back. Sockets created by fn stay in ns.
// If the thread cannot be switched back it stays locked, so the Go runtime discards it rather than reusing a
// thread in the wrong namespace.
func Do(ns string, fn func() error) error {
	target, err := os.Open(filepath.Join(runDir, ns))
	if err != nil {
		return fmt.Errorf("open netns %q: %w", ns, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %q: %w", ns, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with this goroutine instead of serving others from ns.
		return fmt.Errorf("return from netns %q: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// OwnerPID extracts the pid from a namespace or directory name of the form <prefix><pid>-<rest>.
func OwnerPID(prefix, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil {
		return 0, false
	}
	return pid, true
}

// Alive reports whether a process with pid exists.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
