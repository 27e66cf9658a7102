package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// TestUpCloseLeavesNothingBehind: a one-node dual-stack cluster comes up with a pod and an extra exporter, and
// Close leaves no namespace, child process or file; Up first reaps the namespace of a run that died.
func TestUpCloseLeavesNothingBehind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces; CI runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// A namespace named for a process that has exited stands for a crashed run.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-stale", Prefix, dead.Process.Pid)
	if err := netns.Add(ctx, stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(context.Background(), stale) })

	c, err := Up(ctx, Config{Nodes: DefaultNodes(1), DualStack: true})
	if err != nil {
		t.Fatal(err)
	}
	// A dual-stack pod and an extra exporter are torn down by Close too; the exporter answers the client
	// over IPv6 on the bridge.
	n := c.Nodes()[0]
	if _, err := c.StartPod(ctx, PodConfig{Namespace: "ns", Name: "p", Node: n.Name}); err != nil {
		t.Fatal(err)
	}
	if err := n.StartExporterOn(ctx, ExporterPort+1, "--rules.mode=none"); err != nil {
		t.Fatal(err)
	}
	url := "http://" + HostPort(n.IP6, ExporterPort+1) + "/metrics"
	if r := HTTPGet(ctx, netns.Dialer{NS: c.ClientNS, Timeout: ConnectTimeout}, url); r.Verdict != OK || r.Status != 200 {
		t.Errorf("GET %s from the client: %s", url, r)
	}
	if names, _ := netns.List(); contains(names, stale) {
		t.Errorf("Up did not reap the stale namespace %s", stale)
	}
	own := ownNamespaces(t)
	if len(own) < 4 { // bridge, control plane, client, node
		t.Errorf("namespaces while up: %v", own)
	}
	if n := len(children(t)); n < 3 { // etcd, kube-apiserver, kube-proxy
		t.Errorf("%d child processes while up, want at least 3", n)
	}
	work := c.WorkDir
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if own := ownNamespaces(t); len(own) > 0 {
		t.Errorf("namespaces left: %v", own)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left: %v", kids)
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) && os.Getenv("LT_E2E_KEEP_LOGS") == "" {
		t.Errorf("work dir %s left (%v)", work, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ownNamespaces(t *testing.T) []string {
	names, err := netns.List()
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, n := range names {
		if pid, ok := netns.OwnerPID(Prefix, n); ok && pid == os.Getpid() {
			own = append(own, n)
		}
	}
	return own
}

// children lists the command lines of this process's live children.
func children(t *testing.T) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, …
		rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == os.Getpid() {
			cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(s), "cmdline"))
			out = append(out, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}
