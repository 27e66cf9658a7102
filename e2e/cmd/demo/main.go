// Command demo shows the blackhole drill on a real cluster on this machine: it starts etcd, kube-apiserver,
// one kube-proxy and one exporter per node (network namespaces), puts all replicas of a Local NodePort Service
// on one node, prints per node what a real client sees beside the exporter's verdict, spreads the replicas,
// prints the recovery, and keeps the cluster up until Ctrl-C. Run as root: `make demo` (or e2e/run-demo.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
)

func main() {
	nodes := flag.Int("nodes", 3, "number of worker nodes")
	nftNodes := flag.Int("nftables-nodes", 0, "how many of the last nodes run kube-proxy in nftables mode")
	wait := flag.Bool("wait", true, "keep the cluster up until Ctrl-C after the drill")
	verbose := flag.Bool("v", false, "log the harness's steps")
	flag.Parse()
	if err := run(*nodes, *nftNodes, *wait, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(nodeCount, nftNodes int, wait, verbose bool) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root for network namespaces (run: sudo make demo)")
	}
	if nodeCount < 2 {
		return fmt.Errorf("-nodes must be at least 2 (one node with the replicas, one to blackhole)")
	}
	// Ctrl-C cancels ctx; tear-down runs on a fresh context so it always completes.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := cluster.Config{Nodes: cluster.DefaultNodes(nodeCount), StartExporters: true}
	for i := nodeCount - nftNodes; i < nodeCount; i++ {
		if i >= 0 {
			cfg.Nodes[i].ProxyMode = cluster.NFTables
		}
	}
	if verbose {
		cfg.Log = os.Stderr
	}
	step("Starting the cluster: etcd, kube-apiserver, %d nodes with kube-proxy and the exporter (first run builds the binaries, ~5-10 min)", nodeCount)
	start := time.Now()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		step("Tearing down (processes, network namespaces, files)")
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: tear-down:", err)
		}
	}()
	fmt.Printf("    up in %s\n", time.Since(start).Round(time.Second))

	step("The drill: Service %s/%s, type NodePort %d, externalTrafficPolicy: Local, %d replicas all on %s",
		drill.Namespace, drill.Service, drill.NodePort, drill.Replicas, c.Nodes()[0].Name)
	if err := drill.Apply(ctx, c); err != nil {
		return err
	}
	show(ctx, c, func(r drill.Row) bool { return r.Node != c.Nodes()[0].Name })

	step("The fix: one replica per node (topologySpreadConstraints would do this)")
	if err := drill.Fix(ctx, c); err != nil {
		return err
	}
	show(ctx, c, func(drill.Row) bool { return false })

	if !wait {
		return nil
	}
	step("The cluster stays up. Try it from this shell:")
	for _, n := range c.Nodes() {
		addr, err := c.Forward(n.NS, fmt.Sprintf("%s:%d", n.IP, cluster.ExporterPort))
		if err != nil {
			return err
		}
		fmt.Printf("    %-8s curl -s http://%s/metrics | grep localtraffic_blackhole\n", n.Name, addr)
	}
	fmt.Printf("    kubectl: %s --kubeconfig %s get svc,endpointslices -n %s\n", c.Binaries().Kubectl, c.AdminKubeconfig(), drill.Namespace)
	fmt.Printf("    a node's view: ip netns exec %s curl -s http://%s:%d/healthz\n", c.Nodes()[1].NS, c.Nodes()[1].IP, cluster.KubeProxyHealthzPort)
	fmt.Printf("    the client:    ip netns exec %s curl -m 3 http://%s:%d/\n", c.ClientNS, c.Nodes()[0].IP, drill.NodePort)
	fmt.Println("Press Ctrl-C to stop; nothing is left behind.")
	<-ctx.Done()
	return nil
}

// show waits (up to a minute) until the client's and the exporter's view settle on the expected verdicts, then
// prints the table. It prints whatever it has when they do not, so a disagreement is visible, not hidden.
func show(ctx context.Context, c *cluster.Cluster, wantBlackhole func(drill.Row) bool) {
	var rows []drill.Row
	deadline := time.Now().Add(time.Minute)
	for {
		rows = drill.Observe(ctx, c)
		settled := true
		for _, r := range rows {
			if !r.Agrees() || r.ClientSeesBlackhole() != wantBlackhole(r) {
				settled = false
			}
		}
		if settled || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println()
	drill.Print(os.Stdout, rows)
	fmt.Println()
	for _, r := range rows {
		if !r.Agrees() {
			fmt.Printf("    note: on %s the exporter and the client disagree\n", r.Node)
		}
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}
