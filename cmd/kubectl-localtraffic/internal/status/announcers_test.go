package status

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
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

// status reads Cilium's L2 announcement policies and leases as the exporter judges them, with objects as
// Cilium's agents write them (client-go's leader election): a Service a policy selects whose lease was released
// is unannounced once no holder took it for a lease duration of re-reads (exit 1); a failover within it is not
// (node-2 takes the lease 4 s after node-1 released it); a holder whose clock runs ten minutes behind, renewing
// every 2 s, holds a live lease (node-1, where the replica runs: served, exit 0); and with the policies
// forbidden the released lease says nothing (exit 0) and stderr names the policies in its one line.
func TestStatusCiliumPoliciesAndLeases(t *testing.T) {
	status := []string{"status", "-n", "kubelings", "checkout", "-o", "json"}
	t0 := time.Now()
	name := announce.CiliumLeaseName("kubelings", "checkout")
	ns := announce.DefaultCiliumNamespace
	policy := clitest.CiliumPolicy("l2", map[string]any{"matchLabels": map[string]any{"kubernetes.io/os": "linux"}})
	write := func(dyn dynamic.Interface, obj *unstructured.Unstructured) {
		if _, err := dyn.Resource(announce.GVRLease).Namespace(ns).Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(dyn dynamic.Interface, step func(dyn dynamic.Interface, since time.Duration)) (result, *clitest.StepClock) {
		clock := &clitest.StepClock{T: t0}
		if step != nil {
			clock.Step = func(now time.Time) { step(dyn, now.Sub(t0)) }
		}
		return clitest.InvokeAnnouncedOn(t, []cli.Verb{NewCmd}, drillObjects(true), dyn, clock, status...), clock
	}

	releasedLease := clitest.CiliumLeaseAs(t, ns, clitest.CiliumReleased(t0.Add(-time.Second)))
	r, clock := run(fakeAnnouncers(policy, releasedLease), func(dyn dynamic.Interface, since time.Duration) {
		if since == 2*time.Second { // the agents' GC deletes the released lease
			if err := dyn.Resource(announce.GVRLease).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})
	if _, _, un := statusOf(t, r); r.Code != 1 || !slices.Equal(un, []string{"192.0.2.10"}) || clock.Slept != announce.DefaultCiliumLeaseDuration {
		t.Errorf("released, nobody takes it: exit %d, unannounced %v after %s; want 1, 192.0.2.10 after a lease duration",
			r.Code, un, clock.Slept)
	}

	r, clock = run(fakeAnnouncers(policy, releasedLease.DeepCopy()), func(dyn dynamic.Interface, since time.Duration) {
		if since == 4*time.Second {
			write(dyn, clitest.CiliumLeaseAs(t, ns, clitest.CiliumHeld("node-2", t0.Add(since), t0.Add(since))))
		}
	})
	if holes, _, un := statusOf(t, r); r.Code != 1 || len(un) > 0 || !slices.Equal(holes, []string{"node-2"}) || clock.Slept != 4*time.Second {
		t.Errorf("failover to node-2 after 4 s: exit %d, unannounced %v, blackholes %v after %s; want 1, none, node-2 (no replica there) after 4 s",
			r.Code, un, holes, clock.Slept)
	}

	skew := -10 * time.Minute
	acquired := t0.Add(-time.Hour + skew)
	r, clock = run(fakeAnnouncers(policy, clitest.CiliumLeaseAs(t, ns, clitest.CiliumHeld("node-1", acquired, t0.Add(skew)))),
		func(dyn dynamic.Interface, since time.Duration) {
			if since%(2*time.Second) == 0 {
				write(dyn, clitest.CiliumLeaseAs(t, ns, clitest.CiliumHeld("node-1", acquired, t0.Add(since+skew))))
			}
		})
	if holes, unknown, un := statusOf(t, r); r.Code != 0 || len(un) > 0 || len(holes) > 0 || len(unknown) > 0 || clock.Slept != 2*time.Second {
		t.Errorf("holder 10 min behind, renewing: exit %d, unannounced %v, blackholes %v, cannot tell %v after %s; want 0, none, none, none after 2 s",
			r.Code, un, holes, unknown, clock.Slept)
	}

	forbidden := fakeAnnouncers(policy, releasedLease.DeepCopy())
	forbidden.PrependReactor("list", "ciliuml2announcementpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(announce.GVRCiliumL2Policy.GroupResource(), "", nil)
	})
	r, clock = run(forbidden, nil)
	if _, _, un := statusOf(t, r); r.Code != 0 || len(un) > 0 || clock.Slept != 0 {
		t.Errorf("policies forbidden: exit %d, unannounced %v after %s; want 0, none, no wait", r.Code, un, clock.Slept)
	}
	if want := "could not read the announcers' records (cilium_l2_policy (CiliumL2AnnouncementPolicies): forbidden)"; !strings.Contains(r.ErrOut, want) ||
		strings.Count(r.ErrOut, "\n") != 1 {
		t.Errorf("stderr %q, want one line with %q", r.ErrOut, want)
	}
}
