package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// pluginNodeStatus is the part of one node's `status -o json` entry the fidelity tests read.
type pluginNodeStatus struct {
	Node       string   `json:"node"`
	Receives   bool     `json:"receives"`
	Serves     bool     `json:"serves"`
	Blackhole  bool     `json:"blackhole"`
	CannotTell []string `json:"cannotTell"`
}

// pluginStatus runs `status -o json` for ns/name and returns the exit status and each node's entry.
func (p plugin) pluginStatus(t *testing.T, ctx context.Context, ns, name string) (int, map[string]pluginNodeStatus, error) {
	t.Helper()
	r := p.run(t, ctx, "", "status", "-n", ns, name, "-o", "json")
	var st struct {
		Items []struct {
			NodeStatuses []pluginNodeStatus `json:"nodeStatuses"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 {
		return r.code, nil, fmt.Errorf("status -o json (exit %d): %v %s%s", r.code, err, r.out, r.errOut)
	}
	out := map[string]pluginNodeStatus{}
	for _, n := range st.Items[0].NodeStatuses {
		out[n.Node] = n
	}
	return r.code, out, nil
}

// TestFidelityExternalIPPluginAgrees: a Local ClusterIP Service with an externalIP and its
// only endpoint on node-1, the address routed to node-2. Real traffic: node-2 drops it; it would be served
// routed to node-1. The exporters page node-2 only (its drop counter, or on nftables the assigned address, is
// the evidence: node-2's exporter runs without the arrivals meter, which would otherwise decide by arrivals past
// the grace window). `kubectl localtraffic status` sees the API alone: it must not call every node without a local
// endpoint a blackhole (what it did before the shared decision), but say for exactly the nodes that would drop
// the address that it cannot tell from the API, exit 0, and agree with every exporter where it can tell.
func TestFidelityExternalIPPluginAgrees(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const extIP = "192.0.2.71"
	svc := serviceSpec(t, c, "e2e-fidelity-extip", "reports", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })
	restartExporter(t, c, c.Node("node-2"), "--no-arrivals.enabled")
	p := newPlugin(t, ctx, c)
	dest := fmt.Sprintf("externalIP %s:80/TCP", extIP)

	// Control: routed to node-1, the address is served by its local pod.
	eventually(t, converge, "externalIP served via node-1", func() error {
		if err := c.RouteVia(ctx, "node-1", extIP); err != nil {
			return err
		}
		return wantServedLocally(c.Request(ctx, extIP+":80"), "node-1")
	})

	// Routed to node-2: real traffic times out there, and only node-2's exporter pages.
	exporter := map[string]bool{}
	eventually(t, converge, "externalIP routed via node-2: dropped there, paged there only", func() error {
		if err := c.RouteVia(ctx, "node-2", extIP); err != nil {
			return err
		}
		if err := wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-2"); err != nil {
			return err
		}
		var errs []error
		for _, n := range c.Nodes() {
			m, err := c.Metrics(ctx, n.Name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			v, ok, err := m.Value("localtraffic_blackhole", svcLabels(svc, n.Name))
			if err != nil || !ok {
				errs = append(errs, fmt.Errorf("%s: localtraffic_blackhole missing (%v)", n.Name, err))
				continue
			}
			exporter[n.Name] = v == 1
			if want := n.Name == "node-2"; exporter[n.Name] != want {
				errs = append(errs, fmt.Errorf("%s: exporter blackhole %v, want %v", n.Name, exporter[n.Name], want))
			}
		}
		return errors.Join(errs...)
	})

	// The plugin from the API: no blackhole, exit 0; "cannot tell" on exactly the nodes without a local endpoint
	// (node-2, where the exporter pages, and node-3, node-4, where it does not), naming the address; node-1
	// serves. Where it can tell, it says what the exporter says.
	eventually(t, converge, "the plugin agrees or says it cannot tell", func() error {
		code, nodes, err := p.pluginStatus(t, ctx, svc.Namespace, svc.Name)
		if err != nil {
			return err
		}
		var errs []error
		if code != 0 {
			errs = append(errs, fmt.Errorf("status exit %d, want 0 (no blackhole known from the API)", code))
		}
		for _, n := range c.Nodes() {
			ps, ok := nodes[n.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: not in the plugin's status", n.Name))
				continue
			}
			cannotTell := len(ps.CannotTell) > 0
			switch {
			case n.Name == "node-1":
				if cannotTell || !ps.Serves || ps.Blackhole {
					errs = append(errs, fmt.Errorf("node-1 holds the endpoint: plugin says %+v", ps))
				}
			case !slices.Equal(ps.CannotTell, []string{dest}) || ps.Blackhole:
				errs = append(errs, fmt.Errorf("%s: plugin says %+v, want cannot tell %q and no blackhole", n.Name, ps, dest))
			}
			if !cannotTell && ps.Blackhole != exporter[n.Name] {
				errs = append(errs, fmt.Errorf("%s: plugin blackhole %v, exporter %v", n.Name, ps.Blackhole, exporter[n.Name]))
			}
		}
		return errors.Join(errs...)
	})
	t.Logf("exporters: blackhole %v; plugin: cannot tell on the nodes without a local endpoint", exporter)
}
