package placement

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// The announcers' records as a fake apiserver serves them to announce.List, the plugin's reader.

func announcerClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		announce.GVRServiceL2Status: "ServiceL2StatusList", announce.GVRServiceBGPStatus: "ServiceBGPStatusList", announce.GVRLease: "LeaseList",
		announce.GVRPod: "PodList", announce.GVRCiliumL2Policy: "CiliumL2AnnouncementPolicyList",
	}, objs...)
}

func record(gvr schema.GroupVersionResource, kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// speakerPod is a MetalLB speaker's pod on node, labelled as MetalLB's manifests label it.
func speakerPod(node string) *unstructured.Unstructured {
	u := record(announce.GVRPod, "Pod", "metallb-system", "speaker-"+node, map[string]any{"spec": map[string]any{"nodeName": node}})
	u.SetLabels(map[string]string{"app": "metallb", "component": "speaker"})
	return u
}

// metallbL2Status is MetalLB's ServiceL2Status naming node for the test namespace's Service svc.
func metallbL2Status(svc, node string) *unstructured.Unstructured {
	u := record(announce.GVRServiceL2Status, "ServiceL2Status", "metallb-system", "l2-"+svc,
		map[string]any{"status": map[string]any{"node": node, "serviceName": svc, "serviceNamespace": ns}})
	u.SetLabels(map[string]string{announce.LabelMetalLBNode: node, announce.LabelMetalLBServiceName: svc, announce.LabelMetalLBServiceNamespace: ns})
	return u
}

// ciliumLease is Cilium's L2 announcement Lease for svc, last renewed at renew for seconds.
func ciliumLease(svc, holder string, renew time.Time, seconds int64) *unstructured.Unstructured {
	return record(announce.GVRLease, "Lease", announce.DefaultCiliumNamespace, announce.CiliumLeaseName(ns, svc),
		map[string]any{"spec": map[string]any{"holderIdentity": holder,
			"renewTime": renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "leaseDurationSeconds": seconds}})
}

// announcedCluster: a LoadBalancer Service with the VIP 192.0.2.10 and its only replica on node-1 of 3 workers,
// with the announcers' records read from client.
func announcedCluster(client *dynamicfake.FakeDynamicClient) *Cluster {
	svc := nodePortService("checkout", loadBalancer, func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	})
	c := live(workers(3), svc, deployment("checkout", 1), "node-1")
	c.Announcers = announce.List(context.Background(), client, announce.DefaultCiliumNamespace, time.Now())
	return c
}

// kubectl localtraffic status decides a load balancer IP MetalLB (layer 2) or Cilium's L2 announcements hold:
// the holder without a replica is a blackhole there (the announcer reads no health check), and the other nodes
// without one are out for the VIP (drained), not "cannot tell": layer 2 delivers the address to the holder
// alone. Before the plugin read these records, node-2 was "cannot tell" and status exited 0.
func TestStatusAnnouncerRecords(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		rec  runtime.Object
	}{
		{"metallb-l2", metallbL2Status("checkout", "node-2")},
		{"cilium-l2", ciliumLease("checkout", "node-2", now, 15)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Status(announcedCluster(announcerClient(c.rec)))[0]
			if got := s.Blackholes(); !slices.Equal(got, []string{"node-2"}) {
				t.Errorf("blackholes %v, want node-2 (the holder without a replica); %q", got, s.Summary)
			}
			if !s.Failing() {
				t.Error("status does not fail")
			}
			for _, n := range s.Nodes {
				if len(n.CannotTell) > 0 {
					t.Errorf("%s cannot tell %v: the holder is known", n.Node, n.CannotTell)
				}
			}
			if n3 := s.Nodes[2]; n3.Blackhole || n3.InRotation || n3.Serves {
				t.Errorf("node-3 %+v: want out of rotation for the VIP held by node-2", n3)
			}
		})
	}
}

// metallbBGPStatus is MetalLB's ServiceBGPStatus of node for the test namespace's Service svc, advertised to peers.
func metallbBGPStatus(svc, node string, peers ...any) *unstructured.Unstructured {
	u := record(announce.GVRServiceBGPStatus, "ServiceBGPStatus", "metallb-system", "bgp-"+svc+"-"+node,
		map[string]any{"status": map[string]any{"node": node, "serviceName": svc, "serviceNamespace": ns, "peers": peers}})
	u.SetLabels(map[string]string{announce.LabelMetalLBNode: node, announce.LabelMetalLBServiceName: svc, announce.LabelMetalLBServiceNamespace: ns})
	return u
}

// MetalLB in BGP mode advertises a Local Service from the nodes with a ready local endpoint only, and writes a
// ServiceBGPStatus for each (deleting it where the node advertises to no peer). Reading every node's, status
// calls the nodes without one out for the VIP (drained), not "cannot tell" (before: drop? on node-2 and node-3,
// as if an announcer might hold the address there).
func TestStatusMetalLBBGPNodesNotAdvertising(t *testing.T) {
	s := sameAsStatus(t, announcedCluster(announcerClient(metallbBGPStatus("checkout", "node-1", "peer-a"))))[0]
	if s.CannotTell > 0 || s.Dropping > 0 || s.Failing() || s.Drained != 2 {
		t.Errorf("cannot tell %d, dropping %d, drained %d, failing %v; want 0, 0, 2, not failing", s.CannotTell, s.Dropping, s.Drained, s.Failing())
	}
	st := Status(announcedCluster(announcerClient(metallbBGPStatus("checkout", "node-1", "peer-a"))))[0]
	if n1 := st.Nodes[0]; !n1.Serves || !n1.InRotation {
		t.Errorf("node-1 advertises and serves: %+v", n1)
	}
	// A status naming no peer advertises nothing: no announcer's word, the API's cannot-tell as before.
	s = sameAsStatus(t, announcedCluster(announcerClient(metallbBGPStatus("checkout", "node-1"))))[0]
	if s.CannotTell != 2 {
		t.Errorf("a BGP status without peers: cannot tell %d, want 2", s.CannotTell)
	}
}

// The holder has the replica: it serves, the others are out for the VIP, and nothing fails.
func TestStatusAnnouncerHolderServes(t *testing.T) {
	s := Status(announcedCluster(announcerClient(metallbL2Status("checkout", "node-1"))))[0]
	if s.Failing() || len(s.Blackholes()) > 0 {
		t.Errorf("fails: %q", s.Summary)
	}
	if !s.Nodes[0].Serves || s.Serving != 1 {
		t.Errorf("node-1 %+v, serving %d", s.Nodes[0], s.Serving)
	}
	for _, n := range s.Nodes[1:] {
		if len(n.CannotTell) > 0 || n.InRotation {
			t.Errorf("%s %+v: want out of rotation", n.Node, n)
		}
	}
}

// Cilium's holder stopped renewing the lease while the replica serves: nobody answers ARP for the VIP. status
// names the address and fails, as the exporter's localtraffic_service_unannounced does.
func TestStatusUnannounced(t *testing.T) {
	s := Status(announcedCluster(announcerClient(ciliumLease("checkout", "node-1", time.Now().Add(-time.Minute), 15))))[0]
	if !slices.Equal(s.Unannounced, []string{"192.0.2.10"}) {
		t.Errorf("unannounced %v, want 192.0.2.10", s.Unannounced)
	}
	if !s.Failing() {
		t.Error("status does not fail")
	}
	if !strings.Contains(s.Summary, "unannounced: no node announces 192.0.2.10") {
		t.Errorf("summary %q", s.Summary)
	}
	s.Ignored = true
	if s.Failing() {
		t.Error("an ignored Service fails")
	}
}

// A record the plugin may not read changes nothing: the VIP stays "cannot tell" on the nodes without a
// replica, as without announcers, and no node is called a blackhole the exporter could contradict.
func TestStatusAnnouncerForbidden(t *testing.T) {
	client := announcerClient(metallbL2Status("checkout", "node-2"))
	client.PrependReactor("list", "servicel2statuses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(announce.GVRServiceL2Status.GroupResource(), "", nil)
	})
	c := announcedCluster(client)
	if st := c.Announcers.States[announce.SourceMetalLBL2]; st != announce.SourceForbidden {
		t.Fatalf("metallb_l2 %s, want forbidden", st)
	}
	s := Status(c)[0]
	if s.Failing() {
		t.Errorf("fails: %q", s.Summary)
	}
	for _, n := range s.Nodes[1:] {
		if n.Blackhole || !slices.Equal(n.CannotTell, []string{"load balancer IP 192.0.2.10:80/TCP"}) {
			t.Errorf("%s %+v: want cannot tell the VIP", n.Node, n)
		}
	}
}

// audit warns when a layer 2 announcer's record names a node without a ready endpoint of the Local Service
// (Cilium's L2 announcer without its local-backend gate, or MetalLB mid-failover), naming the node, and not when
// the holder has one.
func TestAuditAnnouncedWithoutLocal(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name   string
		rec    runtime.Object
		source string
	}{
		{"cilium-l2", ciliumLease("checkout", "node-2", now, 15), "cilium_l2"},
		{"metallb-l2", metallbL2Status("checkout", "node-2"), "metallb_l2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := find(t, Audit(announcedCluster(announcerClient(c.rec))), AnnouncedWithoutLocal)
			if f.Severity != Warning || !slices.Equal(f.Nodes, []string{"node-2"}) || !strings.HasPrefix(f.Message, c.source+" announces") {
				t.Errorf("finding %+v", f)
			}
			if f.Why == "" || f.Fix == "" {
				t.Error("no why or fix")
			}
		})
	}
	for name, rec := range map[string]runtime.Object{
		"holder with a replica": ciliumLease("checkout", "node-1", now, 15),
		"expired lease":         ciliumLease("checkout", "node-2", now.Add(-time.Minute), 15),
	} {
		if r := Audit(announcedCluster(announcerClient(rec))); hasFinding(r, AnnouncedWithoutLocal) {
			t.Errorf("%s: %v", name, ids(r))
		}
	}
}

// MetalLB with Local announces from the nodes with a ready local endpoint only: one replica is one node between
// the Service and an outage. Found from MetalLB's records (live) as from its annotations; not for a Service
// MetalLB does not announce (another announcer's, or MetalLB's address where no speaker runs), nor for replicas
// spread over two nodes or more.
func TestAuditMetalLBFewNodes(t *testing.T) {
	if !hasFinding(Audit(announcedCluster(announcerClient(metallbL2Status("checkout", "node-1")))), MetalLBFewNodes) {
		t.Error("one replica announced by MetalLB: no LT113")
	}
	if hasFinding(Audit(announcedCluster(announcerClient(ciliumLease("checkout", "node-1", time.Now(), 15)))), MetalLBFewNodes) {
		t.Error("LT113 for a Service Cilium announces")
	}
	svc := nodePortService("checkout", loadBalancer, annotated("metallb.io/address-pool", "production"))
	c := live(workers(3), svc, deployment("checkout", 2, spread(true)), "node-1", "node-1")
	if f := find(t, Audit(c), MetalLBFewNodes); !strings.Contains(f.Message, "ready endpoints on one node now") {
		t.Errorf("two replicas on one node: %q", f.Message)
	}
	c = live(workers(3), svc, deployment("checkout", 2, spread(true)), "node-1", "node-2")
	if r := Audit(c); hasFinding(r, MetalLBFewNodes) {
		t.Errorf("two replicas on two nodes: %v", ids(r))
	}
	// MetalLB allocated the address and no speaker runs (its Calico setup): MetalLB announces nothing.
	c = announcedCluster(announcerClient())
	c.Services[0].Annotations = map[string]string{"metallb.io/ip-allocated-from-pool": "default"}
	if r := Audit(c); hasFinding(r, MetalLBFewNodes) {
		t.Errorf("LT113 where no MetalLB speaker runs: %v", ids(r))
	}
	c = announcedCluster(announcerClient(speakerPod("node-1")))
	c.Services[0].Annotations = map[string]string{"metallb.io/ip-allocated-from-pool": "default"}
	if !hasFinding(Audit(c), MetalLBFewNodes) {
		t.Error("one replica, MetalLB's speakers run: no LT113")
	}
}

func hasFinding(r Report, id RuleID) bool {
	return slices.ContainsFunc(r.Findings(), func(f Finding) bool { return f.ID == id })
}

// Status's one row per Service (Summarize, a verdict per class of node) decides the announcers' records as the
// per-node Status does: the holder singled out of its class, the others out for the VIP, an expired lease
// unannounced and failing.
func TestSummaryWithAnnouncerRecords(t *testing.T) {
	now := time.Now()
	for name, rec := range map[string]runtime.Object{
		"metallb holder without replica": metallbL2Status("checkout", "node-2"),
		"metallb holder with replica":    metallbL2Status("checkout", "node-1"),
		"cilium holder without replica":  ciliumLease("checkout", "node-2", now, 15),
		"cilium lease expired":           ciliumLease("checkout", "node-1", now.Add(-time.Minute), 15),
	} {
		t.Run(name, func(t *testing.T) {
			s := sameAsStatus(t, announcedCluster(announcerClient(rec)))[0]
			wantFailing := name != "metallb holder with replica"
			if s.Failing() != wantFailing || (s.Status() == "Failing") != wantFailing {
				t.Errorf("failing %v (status %s), want %v", s.Failing(), s.Status(), wantFailing)
			}
		})
	}
}

// MetalLB allocated the VIP, its speakers run, and neither of its record kinds names a node for it (its speaker
// elected nobody, or no BGP session is up) while the replica serves: status reports it unannounced and fails. A
// record of the holder clears it.
func TestStatusMetalLBUnrecorded(t *testing.T) {
	allocated := func(c *Cluster) *Cluster {
		c.Services[0].Annotations = map[string]string{"metallb.io/ip-allocated-from-pool": "default"}
		return c
	}
	s := sameAsStatus(t, allocated(announcedCluster(announcerClient(speakerPod("node-1")))))[0]
	if !slices.Equal(s.Unannounced, []string{"192.0.2.10"}) || !s.Failing() {
		t.Errorf("no MetalLB record: unannounced %v, failing %v; want 192.0.2.10, failing", s.Unannounced, s.Failing())
	}
	s = sameAsStatus(t, allocated(announcedCluster(announcerClient(metallbL2Status("checkout", "node-1")))))[0]
	if len(s.Unannounced) > 0 || s.Failing() {
		t.Errorf("node-1 announces: unannounced %v, failing %v", s.Unannounced, s.Failing())
	}
}

// MetalLB used for address allocation only (its documented Calico setup): the controller allocated the VIP, no
// speaker runs, so no ServiceL2Status or ServiceBGPStatus exists, and Calico advertises the address from the
// nodes it picks, which the API does not show. Status calls the VIP neither unannounced (before: unannounced,
// Failing) nor the nodes without a replica "cannot tell" (before: drop?): the announcer is unknown, the summary
// says what was seen, and the Service is CannotTell, not Failing. Pods the plugin may not list say as much,
// with their own reason; a speaker's pod brings back the unrecorded verdict (TestStatusMetalLBUnrecorded).
func TestStatusMetalLBAllocatedOnly(t *testing.T) {
	allocated := func(c *Cluster) *Cluster {
		c.Services[0].Annotations = map[string]string{"metallb.io/ip-allocated-from-pool": "default"}
		return c
	}
	forbidPods := func(c *dynamicfake.FakeDynamicClient) *dynamicfake.FakeDynamicClient {
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(announce.GVRPod.GroupResource(), "", errors.New("RBAC"))
		})
		return c
	}
	for name, c := range map[string]struct {
		client *dynamicfake.FakeDynamicClient
		why    string
	}{
		"no speaker":      {announcerClient(), "no MetalLB speaker runs"},
		"pods not listed": {forbidPods(announcerClient()), "the pods could not be listed"},
	} {
		t.Run(name, func(t *testing.T) {
			cl := allocated(announcedCluster(c.client))
			s := sameAsStatus(t, cl)[0]
			if len(s.Unannounced) > 0 || s.Failing() || s.Status() != "CannotTell" {
				t.Errorf("unannounced %v, failing %v, status %s; want none, not failing, CannotTell", s.Unannounced, s.Failing(), s.Status())
			}
			if !slices.Equal(s.AnnouncerUnknown, []string{"192.0.2.10"}) || !strings.Contains(s.AnnouncerUnknownWhy, c.why) {
				t.Errorf("announcer unknown %v (%q), want 192.0.2.10 with %q", s.AnnouncerUnknown, s.AnnouncerUnknownWhy, c.why)
			}
			st := Status(cl)[0]
			for _, n := range st.Nodes {
				wantUnknown := n.Node != "node-1"
				if len(n.CannotTell) > 0 || n.Blackhole || (len(n.AnnouncerUnknown) > 0) != wantUnknown || n.Serves == wantUnknown {
					t.Errorf("%s: cannot tell %v, blackhole %v, announcer unknown %v, serves %v", n.Node, n.CannotTell, n.Blackhole,
						n.AnnouncerUnknown, n.Serves)
				}
			}
			for _, want := range []string{"announcer of 192.0.2.10 unknown, not MetalLB-announced as far as the API shows: ", c.why,
				"not called unannounced",
				"node-2, node-3 would drop it if it were sent there"} {
				if !strings.Contains(st.Summary, want) {
					t.Errorf("summary %q does not say %q", st.Summary, want)
				}
			}
			if strings.Contains(st.Summary, "cannot tell from the API") {
				t.Errorf("summary calls the nodes cannot-tell: %q", st.Summary)
			}
		})
	}
}
