// Command demo shows the blackhole drill on a real cluster on this machine: it starts etcd, kube-apiserver,
// one kube-proxy and one exporter per node (network namespaces), puts all replicas of a Local NodePort Service
// on one node, prints per node what a real client sees beside the exporter's verdict, spreads the replicas,
// prints the recovery, and keeps the cluster up until Ctrl-C. Run as root: `make demo` (or e2e/run-demo.sh).
//
// With -controllers (the default) the cluster also runs kube-controller-manager, kube-scheduler, a node agent
// per node and a tainted control-plane node, and the demo then runs the drill as operators do: kubectl apply of
// the pinned Deployment, drill.md's observe commands and its two kubectl patch commands word for word, kubectl
// rollout status, each printed with its output as a person at the terminal sees it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	controllers := flag.Bool("controllers", true, "also run the scheduler, controllers and node agents, and the drill with kubectl")
	flag.Parse()
	if err := run(*nodes, *nftNodes, *wait, *verbose, *controllers); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(nodeCount, nftNodes int, wait, verbose, controllers bool) error {
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
	what := "etcd, kube-apiserver"
	if controllers {
		cfg.Controllers = true
		cfg.Nodes = append(cfg.Nodes, cluster.NodeConfig{Name: "control-plane", ProxyMode: cluster.IPTables, ControlPlane: true})
		what = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a tainted control-plane node"
	}
	step("Starting the cluster: %s, %d nodes with kube-proxy and the exporter (first run builds the binaries, ~5-10 min)", what, nodeCount)
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

	if controllers {
		if err := live(ctx, c); err != nil {
			return err
		}
	}
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
	fmt.Printf("    kubectl: %s --kubeconfig %s get svc,endpointslices,pods -o wide -n %s\n", c.Binaries().Kubectl, c.AdminKubeconfig(), drill.Namespace)
	fmt.Printf("    a node's view: ip netns exec %s curl -s http://%s:%d/healthz\n", c.Nodes()[1].NS, c.Nodes()[1].IP, cluster.KubeProxyHealthzPort)
	fmt.Printf("    the client:    ip netns exec %s curl -m 3 http://%s:%d/\n", c.ClientNS, c.Nodes()[0].IP, drill.NodePort)
	fmt.Println("Press Ctrl-C to stop; nothing is left behind.")
	<-ctx.Done()
	return nil
}

// live runs the drill as operators do, on the real scheduler and controllers, printing every command and its
// output, and the exporter's verdict beside the curl loop's after each observation.
func live(ctx context.Context, c *cluster.Cluster) error {
	step("Clearing the hand-placed replicas; now the drill as operators run it, with kubectl and curl from outside")
	if err := drill.Cleanup(ctx, c); err != nil {
		return err
	}
	sh, err := drill.NewShell(c)
	if err != nil {
		return err
	}
	tr := drill.Transcript{W: os.Stdout}
	pluginDir, err := buildPlugin(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(pluginDir)
	pinned := c.Nodes()[0].Name
	step("Create the Service and a Deployment of %d replicas pinned to %s (kube-scheduler places them, node agents run them)", drill.Replicas, pinned)
	if err := drill.ApplyLive(ctx, sh, tr, pinned); err != nil {
		return err
	}
	step("Observe (drill.md, word for word)")
	// The third observe command, the curl loop, runs in showLive until the exporters have caught up.
	for _, cmd := range []string{drill.ObservePods, drill.ObservePolicy} {
		if _, err := sh.RunShown(ctx, tr, cmd); err != nil {
			return err
		}
	}
	showLive(ctx, c, sh, func(r drill.LiveRow) bool { return r.Node != pinned })
	if err := preventionTools(ctx, sh, tr, pluginDir); err != nil {
		return err
	}
	step("The fix (drill.md, word for word): drop the pin, spread with nodeTaintsPolicy Honor, no surge pod")
	for _, cmd := range drill.FixCommands() {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		_, err := sh.RunShown(cctx, tr, cmd)
		cancel()
		if err != nil {
			return err
		}
	}
	step("Observe again")
	if _, err := sh.RunShown(ctx, tr, drill.ObservePods); err != nil {
		return err
	}
	showLive(ctx, c, sh, func(drill.LiveRow) bool { return false })
	return preventionTools(ctx, sh, tr, pluginDir)
}

// buildPlugin builds kubectl-localtraffic of this repository into a new directory, for kubectl's plugin lookup.
func buildPlugin(ctx context.Context) (string, error) {
	mod, err := cluster.ModuleDir()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "lt-demo-plugin-")
	if err != nil {
		return "", fmt.Errorf("plugin directory: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-localtraffic"), "./cmd/kubectl-localtraffic")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("building kubectl-localtraffic: %w\n%s", err, out)
	}
	return dir, nil
}

// preventionTools shows what the kubectl plugin says of the same cluster, from the API alone: the grid of nodes
// that receive the Service's traffic and serve or drop it, and the audit of its placement. Both exit 1 on a
// finding, which the transcript shows rather than stopping the demo.
func preventionTools(ctx context.Context, sh *drill.Shell, tr drill.Transcript, pluginDir string) error {
	step("The same from the API alone, with the kubectl plugin (kubectl localtraffic status and audit)")
	for _, cmd := range []string{
		"kubectl localtraffic status -n " + drill.Namespace + " " + drill.Service,
		"kubectl localtraffic audit -n " + drill.Namespace,
	} {
		if _, err := sh.RunShown(ctx, tr, "PATH="+pluginDir+":$PATH "+cmd+` || echo "exit status $?"`); err != nil {
			return err
		}
	}
	return nil
}

// showLive waits (up to a minute) for the curl loop and the exporters to settle on the expected verdicts, then
// prints the loop's output and the table; a disagreement is printed, not hidden.
func showLive(ctx context.Context, c *cluster.Cluster, sh *drill.Shell, wantBlackhole func(drill.LiveRow) bool) {
	var rows []drill.LiveRow
	var loop string
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		rows, loop, err = drill.ObserveLive(ctx, c, sh)
		settled := err == nil
		for _, r := range rows {
			if !r.Agrees() || (r.Curl == "BLACKHOLE") != wantBlackhole(r) {
				settled = false
			}
		}
		if settled || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	drill.Transcript{W: os.Stdout}.Show(drill.ObserveTraffic, loop)
	fmt.Println()
	drill.PrintLive(os.Stdout, rows)
	fmt.Println()
	for _, r := range rows {
		if !r.Agrees() {
			fmt.Printf("    note: on %s the exporter and the curl loop disagree\n", r.Node)
		}
	}
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
