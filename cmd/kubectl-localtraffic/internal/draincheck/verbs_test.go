package draincheck

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// drain-check reads the announcers too: with the replicas spread over three nodes, draining node-2, which MetalLB
// names for the VIP, leaves the announced node without a replica (exit 1, naming it) until MetalLB moves the
// address; without the record node-2 is merely drained by its health check (exit 0).
func TestDrainCheckAnnouncers(t *testing.T) {
	drain := []string{"drain-check", "node-2", "-n", "kubelings", "-o", "json"}
	r := invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(), drain...)
	if r.Code != 0 {
		t.Errorf("no record: exit %d, want 0\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(l2Status("node-2")), drain...)
	if r.Code != 1 || !strings.Contains(r.Out, "node-2 would drop") || !strings.Contains(r.Out, "load balancer IP 192.0.2.10:80/TCP") {
		t.Errorf("MetalLB names node-2: exit %d, want 1 with node-2 dropping the VIP\n%s%s", r.Code, r.Out, r.ErrOut)
	}
}

// drain-check --prometheus: a drain the API finds harmless fails while the exporters report the Service
// blackholed now, and says so under the Service and in JSON.
func TestDrainCheckPrometheus(t *testing.T) {
	objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
	f := &clitest.FakeProm{Status: http.StatusOK, Body: clitest.VectorAnswer(append(clitest.ReportedBy("1", "node-1", "node-2", "node-3"),
		clitest.ReasonSeries("node-3", "health_check_ignored"))...)}
	url := clitest.StartProm(t, f)
	r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url)
	if r.Code != cli.ExitFindings || !strings.Contains(r.Out, "now, before any drain, its exporters report health_check_ignored on node-3") ||
		!strings.Contains(r.Out, "the exporters report 1 of these Local Service(s) blackholed now") {
		t.Errorf("exit %d, want 1 and node-3's blackhole named:\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url, "-o", "json")
	var rep placement.DrainReport
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil || rep.ObservedBlackholes != 1 || len(rep.Services) != 1 ||
		strings.Join(rep.Services[0].Observed["health_check_ignored"], ",") != "node-3" || rep.Loses {
		t.Errorf("json %v: %+v", err, rep)
	}
	// The exporters report nothing: the API's verdict stands (exit 0); a node unheard of makes it 3.
	f.Body = clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2", "node-3")...)
	if r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.Code != cli.ExitClean {
		t.Errorf("clean: exit %d\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	f.Body = clitest.VectorAnswer(clitest.ReportedBy("1", "node-1", "node-2")...)
	if r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "--prometheus", url); r.Code != cli.ExitAPI || !strings.Contains(r.ErrOut, "node-3") {
		t.Errorf("node-3 unheard of: exit %d, stderr %q", r.Code, r.ErrOut)
	}
}

// Completion through cobra's __complete: NODE completes the nodes.
func TestDrainCheckCompletion(t *testing.T) {
	args, want := []string{"__complete", "drain-check", "node-"}, "node-1\nnode-2\nnode-3\n:4\n"
	if r := invoke(t, "", nil, false, drillObjects(true), args...); r.Out != want {
		t.Errorf("%v: %q, want %q", args, r.Out, want)
	}
}
