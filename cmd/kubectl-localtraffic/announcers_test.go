package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

func fakeAnnouncers(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		announce.GVRServiceL2Status: "ServiceL2StatusList", announce.GVRServiceBGPStatus: "ServiceBGPStatusList", announce.GVRLease: "LeaseList",
	}, objs...)
}

// invokeAnnounced runs the plugin against the pinned drill made a LoadBalancer Service (VIP 192.0.2.10, health
// check node port) with the announcers' records in dyn.
func invokeAnnounced(t *testing.T, dyn dynamic.Interface, args ...string) result {
	t.Helper()
	return invokeAnnouncedOn(t, drillObjects(true), dyn, args...)
}

func invokeAnnouncedOn(t *testing.T, objs []runtime.Object, dyn dynamic.Interface, args ...string) result {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Spec.Type, s.Spec.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		}
	}
	var out, errOut bytes.Buffer
	cs := fake.NewClientset(objs...)
	a := &app{in: strings.NewReader(""), out: &out, errOut: &errOut, getenv: func(string) string { return "" },
		client:  func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil },
		dynamic: func(*genericclioptions.ConfigFlags) (dynamic.Interface, error) { return dyn, nil }}
	code := a.run(context.Background(), args)
	return result{code, out.String(), errOut.String()}
}

func l2Status(node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"node": node, "serviceName": "checkout", "serviceNamespace": "kubelings"}}}
	u.SetAPIVersion("metallb.io/v1beta1")
	u.SetKind("ServiceL2Status")
	u.SetNamespace("metallb-system")
	u.SetName("l2-checkout")
	return u
}

func lease(ns, holder string, renew time.Time) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"holderIdentity": holder,
		"renewTime": renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "leaseDurationSeconds": int64(15)}}}
	u.SetAPIVersion("coordination.k8s.io/v1")
	u.SetKind("Lease")
	u.SetNamespace(ns)
	u.SetName(announce.CiliumLeaseName("kubelings", "checkout"))
	return u
}

// statusOf decodes `status -o json`: the one Service's blackholes, cannot-tells and unannounced VIPs.
func statusOf(t *testing.T, r result) (holes, unknown, unannounced []string) {
	t.Helper()
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 || len(st.Items[0].NodeStatuses) == 0 {
		t.Fatalf("status SERVICE -o json (exit %d): %v\n%s%s", r.code, err, r.out, r.errOut)
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
	if holes, unknown, _ := statusOf(t, r); r.code != 0 || len(holes) > 0 || !slices.Equal(unknown, []string{"node-2", "node-3"}) {
		t.Errorf("no record: exit %d, blackholes %v, cannot tell %v; want 0, none, node-2 and node-3", r.code, holes, unknown)
	}
	r = invokeAnnounced(t, fakeAnnouncers(l2Status("node-2")), status...)
	if holes, unknown, _ := statusOf(t, r); r.code != 1 || !slices.Equal(holes, []string{"node-2"}) || len(unknown) > 0 {
		t.Errorf("MetalLB names node-2: exit %d, blackholes %v, cannot tell %v; want 1, node-2, none", r.code, holes, unknown)
	}
	if r.errOut != "" {
		t.Errorf("stderr %q", r.errOut)
	}

	// Cilium's leases in the namespace --cilium-namespace names: the holder stopped renewing, nobody announces.
	stale := fakeAnnouncers(lease("cilium", "node-1", time.Now().Add(-time.Minute)))
	r = invokeAnnounced(t, stale, status...)
	if _, _, un := statusOf(t, r); r.code != 0 || len(un) > 0 {
		t.Errorf("a lease outside kube-system read without --cilium-namespace: exit %d, unannounced %v", r.code, un)
	}
	r = invokeAnnounced(t, stale, append(status, "--cilium-namespace", "cilium")...)
	if _, _, un := statusOf(t, r); r.code != 1 || !slices.Equal(un, []string{"192.0.2.10"}) {
		t.Errorf("expired lease: exit %d, unannounced %v; want 1, 192.0.2.10", r.code, un)
	}
	if r := invokeAnnounced(t, stale, "status", "-n", "kubelings", "--cilium-namespace", "cilium"); r.code != 1 ||
		!regexp.MustCompile(`(?m)^UNANNOUNCED|\sUNANNOUNCED\s`).MatchString(r.out) ||
		!regexp.MustCompile(`(?m)^kubelings\s+checkout\s+LoadBalancer\s+Failing\s.*\s192\.0\.2\.10\s`).MatchString(r.out) {
		t.Errorf("text output does not say the VIP is unannounced:\n%s", r.out)
	}
}

// A forbidden read is a state: one line on stderr names the source, and the verdict is the one without it.
func TestStatusAnnouncersForbidden(t *testing.T) {
	dyn := fakeAnnouncers(l2Status("node-2"))
	dyn.PrependReactor("list", "servicel2statuses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(announce.GVRServiceL2Status.GroupResource(), "", nil)
	})
	r := invokeAnnounced(t, dyn, "status", "-n", "kubelings", "checkout", "-o", "json")
	if holes, unknown, _ := statusOf(t, r); r.code != 0 || len(holes) > 0 || !slices.Equal(unknown, []string{"node-2", "node-3"}) {
		t.Errorf("exit %d, blackholes %v, cannot tell %v; want 0, none, node-2 and node-3: a record the plugin may not read decides nothing",
			r.code, holes, unknown)
	}
	if want := "could not read the announcers' records (metallb_l2: forbidden)"; !strings.Contains(r.errOut, want) || strings.Count(r.errOut, "\n") != 1 {
		t.Errorf("stderr %q, want one line with %q", r.errOut, want)
	}
}

// drain-check reads the announcers too: with the replicas spread over three nodes, draining node-2, which MetalLB
// names for the VIP, leaves the announced node without a replica (exit 1, naming it) until MetalLB moves the
// address; without the record node-2 is merely drained by its health check (exit 0).
func TestDrainCheckAnnouncers(t *testing.T) {
	drain := []string{"drain-check", "node-2", "-n", "kubelings", "-o", "json"}
	r := invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(), drain...)
	if r.code != 0 {
		t.Errorf("no record: exit %d, want 0\n%s%s", r.code, r.out, r.errOut)
	}
	r = invokeAnnouncedOn(t, drillObjects(false), fakeAnnouncers(l2Status("node-2")), drain...)
	if r.code != 1 || !strings.Contains(r.out, "node-2 would drop") || !strings.Contains(r.out, "load balancer IP 192.0.2.10:80/TCP") {
		t.Errorf("MetalLB names node-2: exit %d, want 1 with node-2 dropping the VIP\n%s%s", r.code, r.out, r.errOut)
	}
}
