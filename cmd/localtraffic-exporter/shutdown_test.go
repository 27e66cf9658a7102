package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
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

// TestBinarySIGTERMDuringScrape: the built binary gets SIGTERM while a scrape waits on a kube-proxy health server
// that never answers (and would keep it for a minute). The scrape still gets its answer — kube-proxy's probe as
// a timeout state — the process exits 0, and it does so before the kubelet would SIGKILL it: this test plays the
// kubelet and kills it at terminationGracePeriodSeconds.
func TestBinarySIGTERMDuringScrape(t *testing.T) {
	bin := buildBinary(t)
	api := newFakeAPIServer(t, "node-a")
	hang := newHostilePeer(t, hostileHang)
	listen := freeAddress(t)
	const grace = 3 * time.Second
	cmd := exec.Command(bin, "--node-name=node-a", "--kubeconfig="+writeKubeconfig(t, api.URL),
		"--web.listen-address="+listen, "--kube-proxy.healthz-address="+hang.ln.Addr().String(),
		"--health-check.address=127.0.0.1", "--rules.mode=none", "--log.format=json", "--state.file=",
		// Without the shutdown path, the scrape below would wait 2 × 30 s.
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

	type answer struct {
		status int
		body   string
		err    error
	}
	scraped := make(chan answer, 1)
	go func() {
		resp, err := http.Get(base + "/metrics") // no scrape timeout header: the exporter allows 2 × --probe.timeout
		if err != nil {
			scraped <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		scraped <- answer{resp.StatusCode, string(b), err}
	}()
	// The scrape is in flight once kube-proxy's (hanging) health server has its connection.
	for deadline := time.Now().Add(30 * time.Second); hang.conns.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the scrape never reached kube-proxy's health server\n%s", stderr.String())
		}
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
	took := time.Since(signalled)
	if exitErr != nil {
		var ee *exec.ExitError
		if errors.As(exitErr, &ee) {
			t.Errorf("exit code %d after SIGTERM, want 0\n%s", ee.ExitCode(), stderr.String())
		} else {
			t.Errorf("wait: %v", exitErr)
		}
	}
	t.Logf("exited %.2fs after SIGTERM (grace period %s)", took.Seconds(), grace)

	a := <-scraped
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("in-flight scrape: status %d, %v\n%s", a.status, a.err, stderr.String())
	}
	for _, want := range []string{
		`localtraffic_kube_proxy_result{endpoint="healthz",node="node-a",result="timeout"} 1`,
		`localtraffic_scrape_collector_success{collector="kube_proxy",node="node-a"} 1`,
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("in-flight scrape lacks %s", want)
		}
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"shutting down"`) {
		t.Errorf("no shutdown log line:\n%s", logs)
	}
	if strings.Contains(logs, "closing their connections") {
		t.Errorf("the scrape had to be cut off instead of answering:\n%s", logs)
	}
	// The listener is gone: a new scrape is refused, not queued.
	if resp, err := http.Get(base + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("still serving after exit: %s", resp.Status)
	}
}
