package draincheck

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// drain-check on the drill: the pinned Deployment's node cannot be drained without an outage (exit 1, naming
// the Service, its pods placed nowhere else); spread over three nodes with a PodDisruptionBudget that allows one
// disruption, draining node-1 leaves node-2 and node-3 serving and node-1 drained by the health check (exit 0),
// with the load balancer's window from the annotations. A PDB that allows none holds the pods: nothing is lost,
// the drain waits.
func TestDrainCheck(t *testing.T) {
	r := invoke(t, "", nil, false, behindLoadBalancer(drillObjects(true)), "drain-check", "node-1", "-n", "kubelings")
	if r.Code != cli.ExitFindings || !strings.Contains(r.Out, "kubelings/checkout") || !strings.Contains(r.Out, "LOSES") ||
		!strings.Contains(r.Out, "no endpoint left anywhere") || !strings.Contains(r.Out, "nodeSelector kubernetes.io/hostname=node-1") {
		t.Errorf("pinned: exit %d, want 1 naming kubelings/checkout, the outage and the nodeSelector:\n%s%s", r.Code, r.Out, r.ErrOut)
	}

	pdb := pdbAllowing
	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(false)), pdb(1)), "drain-check", "node-1", "-n", "kubelings", "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil || r.Code != cli.ExitClean || len(rep.Services) != 1 {
		t.Fatalf("spread: exit %d, %v\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	s := rep.Services[0]
	if s.Loses || s.InRotation != "yes" || s.ServingAfter != 2 || len(s.Evicted) != 1 || s.LoadBalancerCheck == nil || s.LoadBalancerCheck.Seconds != 30 ||
		strings.Join(s.Elsewhere, ",") != "node-2,node-3" {
		t.Errorf("spread: %+v, want no loss, in rotation, 2 serving after, 1 evicted, elsewhere node-2,node-3, a 30 s window", s)
	}

	// ok is not "nothing lost": the text names the load balancer's window, in which it still sends to node-1.
	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(false)), pdb(1)), "drain-check", "node-1", "-n", "kubelings")
	if r.Code != cli.ExitClean || !strings.Contains(r.Out, "draining node-1 leaves every Local Service served; its load balancers keep sending new connections to node-1 for up to 30s") {
		t.Errorf("spread, text: exit %d, want 0 and the load balancer's window named:\n%s", r.Code, r.Out)
	}

	r = invoke(t, "", nil, false, append(behindLoadBalancer(drillObjects(true)), pdb(0)), "drain-check", "node-1", "-n", "kubelings")
	if r.Code != cli.ExitClean || !strings.Contains(r.Out, "the drain waits for checkout-7c9f-0 (PodDisruptionBudget checkout allows no disruption)") {
		t.Errorf("a PDB allowing nothing: exit %d, want 0 and the wait named:\n%s", r.Code, r.Out)
	}

	// A NodePort Service: the drained node keeps receiving NodePort clients, and drops them once its pod is gone.
	r = invoke(t, "", nil, false, drillObjects(false), "drain-check", "node-1", "-n", "kubelings")
	if r.Code != cli.ExitFindings || !strings.Contains(r.Out, "node-1 would drop NodePort 30090/TCP") {
		t.Errorf("NodePort: exit %d, want 1 and node-1 dropping NodePort clients:\n%s", r.Code, r.Out)
	}
	if r := invoke(t, "", nil, false, drillObjects(false), "drain-check", "node-9", "-n", "kubelings"); r.Code != cli.ExitError || !strings.Contains(r.ErrOut, `no node "node-9"`) {
		t.Errorf("unknown node: exit %d, stderr %q", r.Code, r.ErrOut)
	}
}
