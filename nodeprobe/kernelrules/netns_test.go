package kernelrules

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Helpers for tests on the real kernel: a network namespace per test, the
// iptables/nftables tools installed when missing.

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces; CI runs as root")
	}
}

var installOnce sync.Once
var installErr error

// ensureTools runs the project's one installer for the tools these tests run (iptables-legacy*, iptables-nft*,
// nft, ip), once per test binary: scripts/install-deps.sh netfilter installs the Debian packages of the missing
// ones and does nothing when none is (root only, serialised with the other packages' tests that call it).
func ensureTools(t testing.TB) {
	t.Helper()
	requireRoot(t)
	installOnce.Do(func() { installErr = installNetfilter() })
	if installErr != nil {
		t.Fatalf("installing iptables/nftables: %v", installErr)
	}
}

// installNetfilter runs scripts/install-deps.sh netfilter (go test runs a package's tests in its directory).
func installNetfilter() error {
	script := filepath.Join("..", "..", "scripts", "install-deps.sh")
	if out, err := exec.Command(script, "netfilter").CombinedOutput(); err != nil {
		return &CommandError{Cmd: script + " netfilter", Err: err, Stderr: string(out)}
	}
	return nil
}

// newNetns creates a uniquely named network namespace removed at test end.
func newNetns(t testing.TB) string {
	t.Helper()
	ensureTools(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "ltrules-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	// lo up: some matches (addrtype LOCAL) need a local address.
	nsRun(t, name, nil, "ip", "link", "set", "lo", "up")
	return name
}

// nsRun runs a command inside ns with optional stdin, failing the test on error.
func nsRun(t testing.TB, ns string, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, err := nsExec(ns, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s in %s: %v", name, strings.Join(args, " "), ns, err)
	}
	return out
}

func nsExec(ns string, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(context.Background(), "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &CommandError{Cmd: name + " " + strings.Join(args, " "), Err: err, Stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}
