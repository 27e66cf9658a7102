package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// ProcessSpec is a long-running child to start: what runs, in which network namespace, and where its output
// goes.
type ProcessSpec struct {
	// Name names the process in errors and its log, <LogDir>/<Name>.log (appended to, so a restart keeps the
	// earlier run's lines).
	Name   string
	LogDir string
	// NS is the network namespace it runs in ("" the harness's own).
	NS   string
	Bin  string
	Args []string
	// Env is the whole environment; nil inherits the harness's.
	Env []string
	// Stdout and Stderr, when set, receive that stream instead of the log file: for a test that reads the
	// stream as it comes (JSON log lines, a watcher's reports).
	Stdout, Stderr io.Writer
}

// Process is a long-running child (etcd, kube-apiserver, kube-proxy, an exporter, Prometheus …) in its own
// process group, so stopping it stops whatever it spawned (iptables-restore, nft), and killed with the harness
// (netns.Command's Pdeathsig).
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProcess starts s. The process is never tied to a request-scoped context: it runs until Stop, so it is
// started with context.Background.
func StartProcess(s ProcessSpec) (*Process, error) {
	logPath := filepath.Join(s.LogDir, s.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", s.Name, err)
	}
	fmt.Fprintf(logFile, "=== %s start: %s %v\n", time.Now().Format(time.RFC3339Nano), s.Bin, s.Args)
	cmd := netns.Command(context.Background(), s.NS, s.Bin, s.Args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = orLog(s.Stdout, logFile), orLog(s.Stderr, logFile)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Process{name: s.Name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// startProcess starts one of the cluster's processes, logging into its work directory.
func (c *Cluster) startProcess(name, ns, bin string, args ...string) (*Process, error) {
	return StartProcess(ProcessSpec{Name: name, LogDir: c.WorkDir, NS: ns, Bin: bin, Args: args})
}

func orLog(w io.Writer, log *os.File) io.Writer {
	if w != nil {
		return w
	}
	return log
}

// Name is the process's name (ProcessSpec.Name).
func (p *Process) Name() string { return p.name }

// Pid is the process's pid: the program's own, since `ip netns exec` and env(1) exec it in place.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns its wait error.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has ended, with its wait error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace (at once when grace is 0), and waits for
// the process to end. It reports whether the process ended within grace of the SIGTERM (or had already). A nil
// Process is stopped already.
func (p *Process) Stop(grace time.Duration) bool {
	if p == nil {
		return true
	}
	if done, _ := p.Exited(); done {
		return true
	}
	inGrace := false
	if grace > 0 {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
			inGrace = true
		case <-time.After(grace):
		}
	}
	// Kill the whole group even after a clean exit of the leader: children (iptables-restore, nft) must not
	// outlive it.
	_ = netns.KillGroup(p.cmd)
	<-p.done
	return inGrace
}

// Signal sends sig to the process group (SIGSTOP and SIGCONT freeze and thaw it).
func (p *Process) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	return nil
}

// Await polls ready every interval until it returns nil, the process exits, or timeout passes; the error
// then says which, with the tail of the process's log.
func (p *Process) Await(ctx context.Context, timeout, interval time.Duration, ready func() error) error {
	err := Eventually(ctx, timeout, interval, func() error {
		if done, err := p.Exited(); done {
			return stopWaiting(fmt.Errorf("%s exited: %v", p.name, err))
		}
		return ready()
	})
	if err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", p.name, err, p.LogTail(3000))
	}
	return nil
}

// LogTail returns the last n bytes of the process's log.
func (p *Process) LogTail(n int64) string {
	return fileTail(p.logPath, n)
}

func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
