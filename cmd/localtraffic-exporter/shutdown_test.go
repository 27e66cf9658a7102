package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemonSetGracePeriod reads terminationGracePeriodSeconds from the DaemonSet the project ships.
func daemonSetGracePeriod(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("../../deploy/base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*terminationGracePeriodSeconds:\s*(\d+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/base/daemonset.yaml sets no terminationGracePeriodSeconds")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return time.Duration(n) * time.Second
}

// The default grace period leaves the process time to exit before the kubelet's SIGKILL.
func TestShutdownGraceBelowTerminationGracePeriod(t *testing.T) {
	opts, err := parseOptions([]string{"--node-name=n"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if limit := daemonSetGracePeriod(t); opts.shutdownGrace >= limit {
		t.Errorf("--web.shutdown-grace-period defaults to %s, not below the DaemonSet's terminationGracePeriodSeconds %s",
			opts.shutdownGrace, limit)
	}
}

// TestBinarySIGTERMWhileAPeerHangs: the built binary gets SIGTERM while the node model's probe of kube-proxy's
// health server hangs (and would for 30 s). A scrape meanwhile answers at once — the model's latest State, the
// probe not answered yet — and the process exits 0, before the kubelet would SIGKILL it (this test plays the
// kubelet and kills it at terminationGracePeriodSeconds), writing its state file on the way out.
func TestBinarySIGTERMWhileAPeerHangs(t *testing.T) {
	bin := buildBinary(t)
	api := newFakeAPIServer(t, "node-a")
	hang := newHostilePeer(t, hostileHang)
	listen := freeAddress(t)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	const grace = 3 * time.Second
	cmd := exec.Command(bin, "--node-name=node-a", "--kubeconfig="+writeKubeconfig(t, api.URL),
		"--web.listen-address="+listen, "--kube-proxy.healthz-address="+hang.ln.Addr().String(),
		"--health-check.address=127.0.0.1", "--rules.mode=none", "--log.format=json", "--state.file="+stateFile,
		"--probe.timeout=30s", "--web.shutdown-grace-period="+grace.String())
	var stderr syncBuffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + listen
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s: %v\n%s", err, stderr.String())
		}
	}
	// The model's probe is in flight once kube-proxy's (hanging) health server has its connection.
	for deadline := time.Now().Add(30 * time.Second); hang.conns.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the model never probed kube-proxy's health server\n%s", stderr.String())
		}
	}
	asked := time.Now()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape while the probe hangs: %d %v", resp.StatusCode, err)
	}
	if took := time.Since(asked); took > 5*time.Second {
		t.Errorf("the scrape took %s: it waited for the probe", took)
	}
	if strings.Contains(string(body), "localtraffic_kube_proxy_up{") {
		t.Errorf("kube-proxy's health server has not answered, yet the scrape shows an answer:\n%s", body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	kubelet := time.NewTimer(daemonSetGracePeriod(t))
	defer kubelet.Stop()
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-kubelet.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("still running at terminationGracePeriodSeconds: the kubelet would SIGKILL it\n%s", stderr.String())
	}
	if exitErr != nil {
		var ee *exec.ExitError
		if errors.As(exitErr, &ee) {
			t.Errorf("exit code %d after SIGTERM, want 0\n%s", ee.ExitCode(), stderr.String())
		} else {
			t.Errorf("wait: %v", exitErr)
		}
	}
	t.Logf("exited %.2fs after SIGTERM (grace period %s)", time.Since(signalled).Seconds(), grace)
	if _, err := os.Stat(stateFile); err != nil {
		t.Errorf("no state file written on the way out: %v\n%s", err, stderr.String())
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"shutting down"`) {
		t.Errorf("no shutdown log line:\n%s", logs)
	}
	// The listener is gone: a new scrape is refused, not queued.
	if resp, err := http.Get(base + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("still serving after exit: %s", resp.Status)
	}
}
