package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// process is a long-running child (etcd, kube-apiserver, kube-proxy, an exporter) in its own process group,
// logging to a file in the work directory.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startProcess starts bin in namespace ns. The process outlives ctx's cancellation only until stop is called;
// it is never tied to a request-scoped context, so it is started with context.Background.
func startProcess(logDir, name, ns, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "=== %s start: %s %v\n", time.Now().Format(time.RFC3339Nano), bin, args)
	cmd := netns.Command(context.Background(), ns, bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, with its wait error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the process to end.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// Kill the whole group even after a clean exit of the leader: children (iptables-restore, nft) must not
	// outlive it.
	_ = netns.KillGroup(p.cmd)
	<-p.done
}

// logTail returns the last n bytes of the process's log.
func (p *process) logTail(n int64) string {
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
