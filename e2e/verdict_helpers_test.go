package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The verdict scenarios (verdict_*_test.go): real traffic from the outside client decides what is true, and
// each exporter's verdict must match it.

// IP families as the exporter's ip_family label spells them.
const (
	ipv4 = string(corev1.IPv4Protocol)
	ipv6 = string(corev1.IPv6Protocol)
)

// serviceSpec creates cluster.NewService's Service (one TCP port 80 → backendPort, selector app=<name>, Local
// policy) after mutate has adjusted it, and deletes it and all its EndpointSlices at the end.
func serviceSpec(t testing.TB, c *cluster.Cluster, ns, name string, typ corev1.ServiceType, mutate func(*corev1.Service)) *corev1.Service {
	t.Helper()
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	var opts []cluster.ServiceOption
	if mutate != nil {
		opts = append(opts, mutate)
	}
	svc := cluster.NewService(ns, name, typ, opts...)
	created, err := c.Admin().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "create service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.DeleteEndpoints(ctx, ns, name); err != nil {
			errorf(t, "%v", err)
		}
		if err := c.Admin().CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			errorf(t, "delete service %s/%s: %v", ns, name, err)
		}
	})
	return created
}

// requireDualStack fails the test when the shared cluster has no IPv6 (it always has: main_test.go).
func requireDualStack(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	if !c.DualStack() {
		fatalln(t, "the shared cluster is not dual-stack (cluster.Config.DualStack)")
	}
}

// nodePortAddrOf is the Service's first NodePort on n's address of family f.
func nodePortAddrOf(n *cluster.Node, svc *corev1.Service, f corev1.IPFamily) string {
	return cluster.HostPort(n.IPOf(f), svc.Spec.Ports[0].NodePort)
}

// familyPortLabels selects one family's per-port rule series of the Service's http port.
func familyPortLabels(svc *corev1.Service, node, family string) cluster.Labels {
	l := portLabels(svc, node)
	l["ip_family"] = family
	return l
}

// nodeLabels selects a node's per-node series.
func nodeLabels(node string) cluster.Labels { return cluster.Labels{"node": node} }

// trafficVerdict is what the client's request says about a node: a blackhole, served (by a pod on that node,
// for the Local policy), or something else.
func trafficVerdict(r cluster.Result, node string) (blackhole bool, err error) {
	switch r.Verdict {
	case cluster.Blackhole:
		return true, nil
	case cluster.OK:
		return false, wantServedLocally(r, node)
	default:
		return false, fmt.Errorf("via %s: %s, want served or blackholed", node, r)
	}
}

// boolGauge is 1 for true.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ruleDump returns kube-proxy's rules on n as text: both families' iptables-save, or the nftables ruleset.
func ruleDump(ctx context.Context, n *cluster.Node) (string, error) {
	var cmds [][]string
	if n.ProxyMode == cluster.NFTables {
		cmds = [][]string{{"nft", "list", "ruleset"}}
	} else {
		cmds = [][]string{{"iptables-save"}, {"ip6tables-save"}}
	}
	var b strings.Builder
	for _, cmd := range cmds {
		out, err := n.Exec(ctx, cmd[0], cmd[1:]...)
		if err != nil {
			return "", fmt.Errorf("%s on %s: %w", cmd[0], n.Name, err)
		}
		b.WriteString(out)
	}
	return b.String(), nil
}

// restartExporter restarts n's usual exporter with extra flags and restores the default one at the end.
func restartExporter(t testing.TB, c *cluster.Cluster, n *cluster.Node, args ...string) {
	t.Helper()
	start := func(args ...string) error {
		n.StopExporter()
		if err := n.StartExporter(context.Background(), args...); err != nil {
			return err
		}
		return n.WaitExporter(context.Background(), time.Minute)
	}
	// Registered first: a restart that fails must still leave the node its usual exporter for later tests.
	t.Cleanup(func() {
		if err := start(); err != nil {
			errorf(t, "restore the exporter on %s: %v", n.Name, err)
		}
	})
	if err := start(args...); err != nil {
		fatalln(t, err)
	}
}

// nftablesNode returns the shared cluster's nftables node.
func nftablesNode(t testing.TB, c *cluster.Cluster) *cluster.Node {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.ProxyMode == cluster.NFTables {
			return n
		}
	}
	fatalln(t, "shared cluster has no nftables node")
	return nil
}
