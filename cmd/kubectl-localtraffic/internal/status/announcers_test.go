package status

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

var lease = clitest.CiliumLease

// statusOf decodes `status -o json`: the one Service's blackholes, cannot-tells and unannounced VIPs.
func statusOf(t *testing.T, r result) (holes, unknown, unannounced []string) {
	t.Helper()
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 || len(st.Items[0].NodeStatuses) == 0 {
		t.Fatalf("status SERVICE -o json (exit %d): %v\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	s := st.Items[0]
	for _, n := range s.NodeStatuses {
		if len(n.CannotTell) > 0 {
			unknown = append(unknown, n.Node)
		}
		if n.Blackhole {
			holes = append(holes, n.Node)
		}
	}
	return holes, unknown, s.Unannounced
}

// status with the announcers' records: MetalLB's ServiceL2Status naming node-2, which has no replica, makes it
// a blackhole (exit 1), and node-3 out for the VIP; without the record the VIP's holder is unknown ("cannot tell"
// on node-2 and node-3) and status exits 0.
func TestStatusLiveAnnouncers(t *testing.T) {
	status := []string{"status", "-n", "kubelings", "checkout", "-o", "json"}
	r := invokeAnnounced(t, fakeAnnouncers(), status...)
	if holes, unknown, _ := statusOf(t, r); r.Code != 0 || len(holes) > 0 || !slices.Equal(unknown, []string{"node-2", "node-3"}) {
		t.Errorf("no record: exit %d, blackholes %v, cannot tell %v; want 0, none, node-2 and node-3", r.Code, holes, unknown)
	}
	r = invokeAnnounced(t, fakeAnnouncers(l2Status("node-2")), status...)
	if holes, unknown, _ := statusOf(t, r); r.Code != 1 || !slices.Equal(holes, []string{"node-2"}) || len(unknown) > 0 {
		t.Errorf("MetalLB names node-2: exit %d, blackholes %v, cannot tell %v; want 1, node-2, none", r.Code, holes, unknown)
	}
	if r.ErrOut != "" {
		t.Errorf("stderr %q", r.ErrOut)
	}

	// Cilium's leases in the namespace --cilium-namespace names: the holder stopped renewing, nobody announces.
	stale := fakeAnnouncers(lease("cilium", "node-1", time.Now().Add(-time.Minute)))
	r = invokeAnnounced(t, stale, status...)
	if _, _, un := statusOf(t, r); r.Code != 0 || len(un) > 0 {
		t.Errorf("a lease outside kube-system read without --cilium-namespace: exit %d, unannounced %v", r.Code, un)
	}
	r = invokeAnnounced(t, stale, append(status, "--cilium-namespace", "cilium")...)
	if _, _, un := statusOf(t, r); r.Code != 1 || !slices.Equal(un, []string{"192.0.2.10"}) {
		t.Errorf("expired lease: exit %d, unannounced %v; want 1, 192.0.2.10", r.Code, un)
	}
	if r := invokeAnnounced(t, stale, "status", "-n", "kubelings", "--cilium-namespace", "cilium"); r.Code != 1 ||
		!regexp.MustCompile(`(?m)^UNANNOUNCED|\sUNANNOUNCED\s`).MatchString(r.Out) ||
		!regexp.MustCompile(`(?m)^kubelings\s+checkout\s+LoadBalancer\s+Failing\s.*\s192\.0\.2\.10\s`).MatchString(r.Out) {
		t.Errorf("text output does not say the VIP is unannounced:\n%s", r.Out)
	}
}

// A forbidden read is a state: one line on stderr names the source, and the verdict is the one without it.
func TestStatusAnnouncersForbidden(t *testing.T) {
	dyn := fakeAnnouncers(l2Status("node-2"))
	dyn.PrependReactor("list", "servicel2statuses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(announce.GVRServiceL2Status.GroupResource(), "", nil)
	})
	r := invokeAnnounced(t, dyn, "status", "-n", "kubelings", "checkout", "-o", "json")
	if holes, unknown, _ := statusOf(t, r); r.Code != 0 || len(holes) > 0 || !slices.Equal(unknown, []string{"node-2", "node-3"}) {
		t.Errorf("exit %d, blackholes %v, cannot tell %v; want 0, none, node-2 and node-3: a record the plugin may not read decides nothing",
			r.Code, holes, unknown)
	}
	if want := "could not read the announcers' records (metallb_l2: forbidden)"; !strings.Contains(r.ErrOut, want) || strings.Count(r.ErrOut, "\n") != 1 {
		t.Errorf("stderr %q, want one line with %q", r.ErrOut, want)
	}
}

// MetalLB allocated the drill's VIP and runs no speaker (its Calico setup): status says the announcer is unknown
// and why, in every output: the Announcer-Unknown column, "unknown" (not drop?) in the -o wide grid for the
// nodes without a replica, announcerUnknown and its reason in -o json; it exits 0, the Service CannotTell, not
// unannounced. With a speaker's pod and no record, the VIP is unannounced as before (exit 1).
func TestStatusMetalLBAllocatedOnly(t *testing.T) {
	objs := func() []runtime.Object { return clitest.MetalLBAllocated(drillObjects(true)) }
	r := clitest.InvokeAnnounced(t, []cli.Verb{NewCmd}, objs(), fakeAnnouncers(), "status", "-n", "kubelings", "checkout", "-o", "json")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 {
		t.Fatalf("-o json (exit %d): %v\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	it := st.Items[0]
	if r.Code != 0 || it.Status != "CannotTell" || len(it.Unannounced) > 0 || !slices.Equal(it.AnnouncerUnknown, []string{"192.0.2.10"}) ||
		!strings.Contains(it.AnnouncerUnknownWhy, "no MetalLB speaker runs") {
		t.Errorf("exit %d, status %s, unannounced %v, announcer unknown %v (%q); want 0, CannotTell, none, 192.0.2.10 with its reason",
			r.Code, it.Status, it.Unannounced, it.AnnouncerUnknown, it.AnnouncerUnknownWhy)
	}
	for _, n := range it.NodeStatuses {
		if len(n.CannotTell) > 0 || (len(n.AnnouncerUnknown) > 0) != (n.Node != "node-1") {
			t.Errorf("%s: cannot tell %v, announcer unknown %v", n.Node, n.CannotTell, n.AnnouncerUnknown)
		}
	}
	r = clitest.InvokeAnnounced(t, []cli.Verb{NewCmd}, objs(), fakeAnnouncers(), "status", "-n", "kubelings", "-o", "wide")
	if r.Code != 0 || !regexp.MustCompile(`\sANNOUNCER-UNKNOWN\s`).MatchString(r.Out) ||
		!regexp.MustCompile(`(?m)^kubelings\s+checkout\s+LoadBalancer\s+CannotTell\s.*\s192\.0\.2\.10\s.*\sunknown\s+unknown\s*$`).MatchString(r.Out) ||
		strings.Contains(r.Out, "drop?") {
		t.Errorf("-o wide: exit %d\n%s", r.Code, r.Out)
	}
	if want := "the announcer of 1 load balancer IP(s) MetalLB allocated is unknown (ANNOUNCER-UNKNOWN): no MetalLB speaker runs"; !strings.HasPrefix(r.ErrOut, "kubectl-localtraffic: "+want) ||
		strings.Count(r.ErrOut, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying %q", r.ErrOut, want)
	}
	r = clitest.InvokeAnnounced(t, []cli.Verb{NewCmd}, objs(), fakeAnnouncers(clitest.SpeakerPod("node-1")), "status", "-n", "kubelings", "checkout", "-o", "json")
	if _, _, un := statusOf(t, r); r.Code != 1 || !slices.Equal(un, []string{"192.0.2.10"}) {
		t.Errorf("a speaker runs, no record: exit %d, unannounced %v; want 1, 192.0.2.10", r.Code, un)
	}
}
