// Package e2e runs the exporter against a real cluster on this machine (see package cluster): real etcd,
// kube-apiserver and kube-proxy, nodes as network namespaces, real packets from an outside client.
//
// Tests in this package share one cluster (starting it costs a minute of CPU): call sharedCluster(t). A test
// that changes a node (stops kube-proxy, deletes the Node …) must restore it before it returns, and every test
// uses Kubernetes namespaces and Services of its own. Tests run one after another (no t.Parallel); run-e2e.sh
// runs the suite as several processes of this binary side by side (shards), each with its own clusters.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// sharedState holds the one cluster of this test binary; TestMain closes it. It is the only package-level
// state: the cluster is too expensive to start per test, and so is the Prometheus beside it that the status
// --prometheus check reads (prom), whose tally (agree) TestMain logs at the end.
var sharedState struct {
	once sync.Once
	mu   sync.Mutex // guards c against the interrupt handler's tear-down
	c    *cluster.Cluster
	err  error

	prom  sharedProm
	agree agreeTally
}

// sharedNodes is the shared cluster's layout: three iptables nodes and one nftables node, dual-stack.
var sharedNodes = []cluster.NodeConfig{
	{Name: "node-1", ProxyMode: cluster.IPTables},
	{Name: "node-2", ProxyMode: cluster.IPTables},
	{Name: "node-3", ProxyMode: cluster.IPTables},
	{Name: "node-4", ProxyMode: cluster.NFTables},
}

func TestMain(m *testing.M) {
	// An interrupted run (Ctrl-C, CI cancelling) tears the cluster down too; a killed one leaves namespaces
	// that the next cluster.Up reaps (its processes die with it through Pdeathsig).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "e2e: interrupted, tearing the cluster down")
		closeShared()
		os.Exit(1)
	}()
	code := m.Run()
	sharedState.agree.report(os.Stderr, sharedState.prom.took)
	if err := closeShared(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cluster tear-down:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// closeShared tears the shared clusters down (the plain one and the one with controllers) if they were started.
func closeShared() error {
	sharedState.mu.Lock()
	defer sharedState.mu.Unlock()
	var err error
	sharedState.prom.stop()
	if sharedState.c != nil {
		err = sharedState.c.Close()
	}
	return errors.Join(err, closeControllerCluster())
}

// requireRoot skips the test when not root: network namespaces, iptables and nftables need it.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces; CI runs as root")
	}
}

// everySeries turns on the exporter's opt-in collectors and series (service_details, per-port rule series):
// the scenarios check them. Exporters started without it (StartExporterOn, the deployed DaemonSet) run the
// defaults, which the alert tests use.
func everySeries() []string {
	return []string{"--collector.service_details", "--collector.rules.per-port"}
}

// sharedCluster returns the test binary's cluster, starting it on first use (with one exporter per node).
func sharedCluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	requireRoot(t)
	sharedState.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		c, err := cluster.Up(ctx, cluster.Config{
			Nodes:          sharedNodes,
			StartExporters: true,
			ExporterArgs:   everySeries(),
			// Dual-stack costs a few addresses and routes; Services stay IPv4 unless a test asks for both.
			DualStack: true,
			Log:       os.Stderr,
		})
		sharedState.mu.Lock()
		sharedState.c, sharedState.err = c, err
		sharedState.mu.Unlock()
	})
	if sharedState.err != nil {
		fatalf(t, "cluster: %v", sharedState.err)
	}
	sharedState.agree.ran(scenarioOf(t))
	return sharedState.c
}

// eventually waits up to timeout for cond, failing the test with cond's last error.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := cluster.Eventually(context.Background(), timeout, 250*time.Millisecond, cond); err != nil {
		fatalf(t, "%s: %v", what, err)
	}
}

// testContext returns a context cancelled at the end of the test. It carries t: the assertion helpers, which
// take a context, count their status --prometheus checks for t's scenario (agreeThroughPrometheus).
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, t))
	t.Cleanup(cancel)
	return ctx
}

// failPrefix begins every failure message of the scenarios: go test prints an error exactly as it prints a
// log, and a scenario goes on logging its later phases after one fails, so run-e2e.sh's digest finds the
// failures by it. errorf, fatalf, errorln and fatalln are t.Errorf, t.Fatalf, t.Error and t.Fatal with it.
const failPrefix = "error: "

func errorf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Errorf(failPrefix+format, args...)
}

func fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf(failPrefix+format, args...)
}

func errorln(t testing.TB, args ...any) {
	t.Helper()
	t.Error(append([]any{strings.TrimSpace(failPrefix)}, args...)...)
}

func fatalln(t testing.TB, args ...any) {
	t.Helper()
	t.Fatal(append([]any{strings.TrimSpace(failPrefix)}, args...)...)
}
