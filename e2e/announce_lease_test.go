package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// ciliumHolder is a Cilium agent holding a Service's L2 announcement lease (holdCiliumLease).
type ciliumHolder struct {
	stop func() // the agent stops renewing (it died, or lost the API server)
}

// Cilium's defaults (l2announcements.leaseDuration, leaseRetryPeriod).
const (
	ciliumLeaseDuration = 15 * time.Second
	ciliumRetryPeriod   = 2 * time.Second
)

// holdCiliumLease writes and renews the lease as a Cilium agent on node does (pkg/l2announcer): it runs
// client-go's leader election (leaderelection.RunOrDie over a resourcelock.LeaseLock named
// cilium-l2announce-<namespace>-<service> in its own namespace, the node's name its identity), which creates
// the lease with acquireTime and renewTime both its clock's now, then writes renewTime from its clock every
// retry period, keeping acquireTime and leaseTransitions. skew is how far the holder's clock is off.
func holdCiliumLease(t *testing.T, c *cluster.Cluster, svc *corev1.Service, node string, skew time.Duration) *ciliumHolder {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	leases := c.Admin().CoordinationV1().Leases(ciliumNamespace)
	name := "cilium-l2announce-" + svc.Namespace + "-" + svc.Name
	acquired := metav1.MicroTime{Time: time.Now().Add(skew)}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr(node), LeaseDurationSeconds: ptr(int32(ciliumLeaseDuration / time.Second)),
		AcquireTime: &acquired, RenewTime: &acquired, LeaseTransitions: ptr(int32(0))}}
	created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		cancel()
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cur := created
		tick := time.NewTicker(ciliumRetryPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cur.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(skew)}
			next, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
			if err != nil {
				if ctx.Err() == nil {
					errorf(t, "renewing %s: %v", name, err)
				}
				return
			}
			cur = next
		}
	}()
	h := &ciliumHolder{stop: func() { cancel(); wg.Wait() }}
	t.Cleanup(h.stop)
	return h
}

// pluginUnannounced runs the plugin's status -o json for the Local Services of namespace ns (and the one named,
// when name is not "") and returns its exit status, each Service's unannounced load balancer IPs by name, and
// how long the run took (the plugin watches a Cilium lease in doubt for up to its duration).
func pluginUnannounced(t *testing.T, ctx context.Context, p plugin, ns, name string) (int, map[string][]string, time.Duration) {
	t.Helper()
	args := []string{"status", "-n", ns, "-o", "json"}
	if name != "" {
		args = append(args, name)
	}
	start := time.Now()
	r := p.run(t, ctx, "", args...)
	took := time.Since(start)
	var st struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Unannounced []string `json:"unannounced"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) == 0 {
		// Errorf, not Fatalf: the plugin runs beside the exporters' checks, in a goroutine of its own.
		errorf(t, "status -o json (exit %d): %v %s%s", r.code, err, r.out, r.errOut)
		return -1, nil, took
	}
	un := map[string][]string{}
	for _, it := range st.Items {
		un[it.Metadata.Name] = it.Unannounced
	}
	return r.code, un, took
}

// TestAnnouncerLeaseClockSkew: a Cilium lease is expired when it stopped changing for its duration by the
// reader's own clock (client-go's leader election rule), not when the holder's renewTime looks old. Two
// LoadBalancer Services, each served by a replica on node-1, are announced by node-1 through leases renewed
// every 2 s with Cilium's 15 s duration, by a holder whose clock runs ten minutes behind and by one ten minutes
// ahead. For longer than a lease duration neither is unannounced on any node (judged by renewTime, the one
// behind was unannounced at once, a page with nothing lost). Then both holders stop: each Service is
// unannounced within a lease duration of its last renewal (judged by renewTime, the one ahead stayed
// announced for ten minutes while nobody answered for its address). kubectl localtraffic status, reading the
// leases once and watching those whose renewTime looks expired or lies in the future, gives the exporters'
// answer at both moments.
func TestAnnouncerLeaseClockSkew(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	nodes := []string{"node-1", "node-2"}
	type skewed struct {
		name, lbIP string
		skew       time.Duration
		svc        *corev1.Service
		holder     *ciliumHolder
	}
	cases := []*skewed{
		{name: "behind", lbIP: "192.0.2.151", skew: -10 * time.Minute},
		{name: "ahead", lbIP: "192.0.2.152", skew: 10 * time.Minute},
	}
	for _, s := range cases {
		s.svc = serviceSpec(t, c, "e2e-lease-skew", s.name, corev1.ServiceTypeLoadBalancer, nil)
		setEndpoints(t, c, s.svc, ready(startPods(t, c, s.svc, "node-1")...))
		if err := c.SetLoadBalancerIngress(ctx, s.svc.Namespace, s.svc.Name, corev1.LoadBalancerIngress{IP: s.lbIP}); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.Unroute(context.Background(), s.lbIP) })
		if err := c.RouteVia(ctx, "node-1", s.lbIP); err != nil {
			fatalln(t, err)
		}
		s.holder = holdCiliumLease(t, c, s.svc, "node-1", s.skew)
	}
	// unannounced checks every Service on every node: the Service decided (its rotation exported) and
	// localtraffic_service_unannounced present (want) or absent, as the exporter exports it.
	unannounced := func(want bool) error {
		var errs []error
		for _, s := range cases {
			for _, node := range nodes {
				if err := expectMetrics(ctx, c, node, sourceOK(node, "cilium_l2"), unannouncedIs(s.svc, node, want)); err != nil {
					errs = append(errs, fmt.Errorf("%s (holder's clock %s): %w", s.name, s.skew, err))
				}
			}
		}
		return errors.Join(errs...)
	}
	eventually(t, converge, "both Services served and decided, announced", func() error {
		for _, s := range cases {
			if err := wantServedLocally(c.Request(ctx, s.lbIP+":80"), "node-1"); err != nil {
				return err
			}
		}
		return unannounced(false)
	})
	// The plugin, run while the exporters watch: each skewed lease is watched until it changes, and announced.
	p := newPlugin(t, ctx, c)
	type run struct {
		code int
		un   map[string][]string
		took time.Duration
	}
	plugin := func() <-chan run {
		done := make(chan run, 1)
		go func() {
			r := run{code: -1}
			defer func() { done <- r }() // also when p.run fails the test
			r.code, r.un, r.took = pluginUnannounced(t, ctx, p, "e2e-lease-skew", "")
		}()
		return done
	}
	live := plugin()
	// Renewed on time for longer than a lease duration: announced throughout, whatever the holders' clocks.
	for end := time.Now().Add(ciliumLeaseDuration + 5*time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if err := unannounced(false); err != nil {
			fatalf(t, "a lease renewed every %s: %v", ciliumRetryPeriod, err)
		}
	}
	if r := <-live; r.code != 0 || len(r.un) != len(cases) || r.un["behind"] != nil || r.un["ahead"] != nil {
		errorf(t, "plugin status, both leases renewed: exit %d, unannounced %v; want 0 and none, as the exporters", r.code, r.un)
	}
	// Both holders stop renewing: each lease expires a duration after the exporters last saw it change. The
	// plugin, started at once, watches both leases for their duration and finds them unchanged.
	for _, s := range cases {
		s.holder.stop()
	}
	stopped := time.Now()
	expired := plugin()
	eventually(t, ciliumLeaseDuration+announcedWithin, "both Services unannounced a lease duration after the last renewal", func() error {
		return unannounced(true)
	})
	if took := time.Since(stopped); took < ciliumLeaseDuration-ciliumRetryPeriod-time.Second {
		errorf(t, "unannounced %s after the last renewal, before the lease's %s could pass", took, ciliumLeaseDuration)
	}
	r := <-expired
	for _, s := range cases {
		if got := r.un[s.name]; len(got) != 1 || got[0] != s.lbIP {
			errorf(t, "plugin status, %s's holder (clock %s) stopped: unannounced %v; want [%s], as the exporters", s.name, s.skew, got, s.lbIP)
		}
	}
	if r.code != 1 || r.took < ciliumLeaseDuration-ciliumRetryPeriod {
		errorf(t, "plugin status after the holders stopped: exit %d after %s; want 1, after watching the leases for their %s",
			r.code, r.took.Round(time.Millisecond), ciliumLeaseDuration)
	}
}

var gvrCiliumL2Policy = schema.GroupVersionResource{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliuml2announcementpolicies"}

// installCiliumPolicyCRD installs the CiliumL2AnnouncementPolicy CRD (e2e/crds) on the cluster.
func installCiliumPolicyCRD(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	dir, err := cluster.CiliumPolicyCRDsDir()
	if err != nil {
		fatalln(t, err)
	}
	if err := c.InstallCRDs(testContext(t), dir); err != nil {
		fatalln(t, err)
	}
}

// createCiliumPolicy creates the CiliumL2AnnouncementPolicy name, selecting svc by the labels Cilium adds
// (io.kubernetes.service.namespace and .name) on the nodes' eth0, with the spec fields in spec besides; the test's
// end deletes it. It returns the policies' client and the policy as created.
func createCiliumPolicy(t *testing.T, c *cluster.Cluster, name string, svc *corev1.Service, spec map[string]any) (dynamic.ResourceInterface, *unstructured.Unstructured) {
	t.Helper()
	policies := dynamicClient(t, c).Resource(gvrCiliumL2Policy)
	full := map[string]any{
		"serviceSelector": map[string]any{"matchLabels": map[string]any{
			"io.kubernetes.service.namespace": svc.Namespace, "io.kubernetes.service.name": svc.Name}},
		"interfaces": []any{"^eth0$"},
	}
	maps.Copy(full, spec)
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2alpha1", "kind": "CiliumL2AnnouncementPolicy",
		"metadata": map[string]any{"name": name}, "spec": full}}
	if _, err := policies.Create(testContext(t), policy, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = policies.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return policies, policy
}

// TestAnnouncerCiliumLeaseReleased: a LoadBalancer Service served by a replica on node-1 that a
// CiliumL2AnnouncementPolicy selects (by the io.kubernetes.service.namespace and .name labels Cilium adds),
// announced by node-1's lease. Then the policy's nodeSelector moves to node-2, which has no local backend:
// node-1 stops electing and releases the lease as client-go's leader election does (ReleaseOnCancel: no holder,
// leaseDurationSeconds 1, renewTime now), Cilium 1.20.2 and later on node-2 do not elect, and the agents' GC
// deletes the lease; nobody answers ARP, and the
// client's request is lost. For most of a lease duration after the release the Service is not unannounced (a
// failover would renew within it); then it is, on every node. Before the policies were read, never.
// kubectl localtraffic status agrees: announced before the release, and, run at the release, it re-reads the
// lease for a lease duration before it calls the Service unannounced, as the exporters do.
func TestAnnouncerCiliumLeaseReleased(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	installCiliumPolicyCRD(t, c)
	nodes := []string{"node-1", "node-2"}
	const lbIP = "192.0.2.153"
	svc := serviceSpec(t, c, "e2e-lease-released", "web", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, "node-1", lbIP); err != nil {
		fatalln(t, err)
	}
	policies, policy := createCiliumPolicy(t, c, "e2e-lease-released", svc, map[string]any{
		"nodeSelector":    map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": "node-1"}},
		"loadBalancerIPs": true,
	})
	holder := holdCiliumLease(t, c, svc, "node-1", 0)

	unannounced := func(want bool) error { return unannouncedOn(ctx, c, svc, nodes, want) }
	eventually(t, converge, "the Service served through node-1's lease, announced", func() error {
		if err := wantServedLocally(c.Request(ctx, lbIP+":80"), "node-1"); err != nil {
			return err
		}
		return unannounced(false)
	})
	p := newPlugin(t, ctx, c)
	if code, un, _ := pluginUnannounced(t, ctx, p, svc.Namespace, svc.Name); code != 0 || un[svc.Name] != nil {
		errorf(t, "plugin status, node-1 holds the lease: exit %d, unannounced %v; want 0 and none, as the exporters", code, un)
	}

	// The policy moves to node-2, which runs no replica: node-1 stops electing (the policy no longer selects it)
	// and releases the lease as client-go does; node-2, without a local backend, does not elect. Nobody answers
	// ARP for the address.
	selectCiliumNode(t, ctx, policies, policy, "node-2")
	holder.stop()
	leases := c.Admin().CoordinationV1().Leases(ciliumNamespace)
	name := releaseCiliumLease(t, ctx, c, svc)
	released := time.Now()
	type run struct {
		code int
		un   map[string][]string
		took time.Duration
	}
	atRelease := make(chan run, 1)
	go func() {
		r := run{code: -1}
		defer func() { atRelease <- r }() // also when p.run fails the test
		r.code, r.un, r.took = pluginUnannounced(t, ctx, p, svc.Namespace, svc.Name)
	}()
	if err := c.Unroute(ctx, lbIP); err != nil {
		fatalln(t, err)
	}
	if r := c.Request(ctx, lbIP+":80"); r.Verdict == cluster.OK {
		fatalf(t, "with nobody announcing, the request was answered: %s", r)
	}
	// Within the lease duration (less a retry period and a scrape of slack): not unannounced. The agents' GC
	// deletes the released lease meanwhile (every minute in Cilium; at once here, to keep the test short).
	deleted := false
	for time.Since(released) < ciliumLeaseDuration-ciliumRetryPeriod-time.Second {
		if err := unannounced(false); err != nil {
			fatalf(t, "%s after the release: %v", time.Since(released).Round(time.Millisecond), err)
		}
		if !deleted && time.Since(released) > ciliumRetryPeriod {
			if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				fatalln(t, err)
			}
			deleted = true
		}
		time.Sleep(500 * time.Millisecond)
	}
	eventually(t, ciliumLeaseDuration+announcedWithin, "the Service unannounced on every node a lease duration after the release", func() error {
		return unannounced(true)
	})
	// The plugin run at the release answered only after a lease duration without a holder: unannounced.
	if r := <-atRelease; r.code != 1 || len(r.un[svc.Name]) != 1 || r.un[svc.Name][0] != lbIP || r.took < ciliumLeaseDuration-ciliumRetryPeriod {
		errorf(t, "plugin status run at the release: exit %d, unannounced %v after %s; want 1, [%s], after a lease duration, as the exporters",
			r.code, r.un, r.took.Round(time.Millisecond), lbIP)
	}
}

// unannouncedIs checks that node's exporter has decided svc's rotation and exports
// localtraffic_service_unannounced for it (want) or not.
func unannouncedIs(svc *corev1.Service, node string, want bool) func(cluster.Metrics) error {
	labels := svcLabels(svc, node)
	return func(m cluster.Metrics) error {
		if len(m.Series("localtraffic_in_rotation", labels)) == 0 {
			return fmt.Errorf("no localtraffic_in_rotation%v: not decided yet", labels)
		}
		if want {
			return m.Expect("localtraffic_service_unannounced", labels, 1)
		}
		return m.ExpectAbsent("localtraffic_service_unannounced", labels)
	}
}

// unannouncedOn says whether the exporters on nodes, their Cilium sources read, call svc unannounced as want
// says, once they have decided its rotation.
func unannouncedOn(ctx context.Context, c *cluster.Cluster, svc *corev1.Service, nodes []string, want bool) error {
	var errs []error
	for _, node := range nodes {
		if err := expectMetrics(ctx, c, node, sourceOK(node, "cilium_l2"), sourceOK(node, "cilium_l2_policy"), unannouncedIs(svc, node, want)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}

// selectCiliumNode sets policy's nodeSelector to the node alone: which agents may elect themselves.
func selectCiliumNode(t *testing.T, ctx context.Context, policies dynamic.ResourceInterface, policy *unstructured.Unstructured, node string) {
	t.Helper()
	cur, err := policies.Get(ctx, policy.GetName(), metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	if err := unstructured.SetNestedStringMap(cur.Object, map[string]string{"kubernetes.io/hostname": node}, "spec", "nodeSelector", "matchLabels"); err != nil {
		fatalln(t, err)
	}
	if _, err := policies.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		fatalln(t, err)
	}
}

// releaseCiliumLease releases svc's lease as client-go's leader election does on a holder's way out
// (holderIdentity emptied, leaseDurationSeconds 1) and returns its name. Its holder must have stopped renewing.
func releaseCiliumLease(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service) string {
	t.Helper()
	leases := c.Admin().CoordinationV1().Leases(ciliumNamespace)
	name := "cilium-l2announce-" + svc.Namespace + "-" + svc.Name
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr(""), ptr(int32(1))
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		fatalln(t, err)
	}
	return name
}

// TestAnnouncerCiliumExternalIP: a Local NodePort Service with an externalIP and its only replica on node-1,
// selected by a Cilium L2 announcement policy for its externalIPs alone (externalIPs true, loadBalancerIPs
// false), its lease held by node-2 as a Cilium agent holds it (one before 1.20.2 elects whatever the backends;
// a later one keeps the lease until it notices its backend went). The holder answers ARP for the address, so
// the network delivers it to node-2 (routed there): real requests are dropped, and node-2 pages announced_here
// at once, before any grace window, with no arrival needed; node-3 is not the holder and pages nothing. Before
// the exporter read policies' externalIPs, node-2 said nothing within a grace window: the lease counted for
// load balancer IPs only. The lease then moves to node-1 with the route: served there, node-2 stops paging.
// Last the policy selects node-3 alone, which runs no replica: node-1 releases the lease, the agents' GC
// deletes it, nobody answers for the address, and after a lease duration every node calls the Service
// unannounced. Before externalIPs were counted, nothing did: only load balancer IPs were unannounced.
func TestAnnouncerCiliumExternalIP(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	installCiliumPolicyCRD(t, c)
	const extIP = "192.0.2.158"
	svc := serviceSpec(t, c, "e2e-cilium-extip", "reports", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{extIP}
	})
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	policies, policy := createCiliumPolicy(t, c, "e2e-cilium-extip", svc, map[string]any{"externalIPs": true, "loadBalancerIPs": false})
	t.Cleanup(func() { _ = c.Unroute(context.Background(), extIP) })

	holder := holdCiliumLease(t, c, svc, "node-2", 0)
	if err := c.RouteVia(ctx, "node-2", extIP); err != nil {
		fatalln(t, err)
	}
	// Within converge (90 s), less than the shared exporters' grace window (two minutes): the record pages, not
	// the arrivals, and announced_here is the record's reason alone.
	eventually(t, converge, "node-2 holds the lease: the externalIP dropped there, announced_here", func() error {
		if err := wantVerdict(c.Request(ctx, extIP+":80"), cluster.Blackhole, "externalIP via node-2"); err != nil {
			return err
		}
		return expectMetrics(ctx, c, "node-2", sourceOK("node-2", "cilium_l2"), sourceOK("node-2", "cilium_l2_policy"),
			metricIs("localtraffic_blackhole_reason", reasonLabels(svc, "node-2", "announced_here"), 1))
	})
	if err := expectMetrics(ctx, c, "node-3", noCriticalReason(svc, "node-3")); err != nil {
		errorln(t, err)
	}

	// The lease moves to node-1, which runs the replica, and the network follows it.
	holder.stop()
	leases := c.Admin().CoordinationV1().Leases(ciliumNamespace)
	if err := leases.Delete(ctx, "cilium-l2announce-"+svc.Namespace+"-"+svc.Name, metav1.DeleteOptions{}); err != nil {
		fatalln(t, err)
	}
	holder = holdCiliumLease(t, c, svc, "node-1", 0)
	if err := c.RouteVia(ctx, "node-1", extIP); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "node-1 holds the lease: served there, node-2 no longer pages", func() error {
		if err := wantServedLocally(c.Request(ctx, extIP+":80"), "node-1"); err != nil {
			return err
		}
		if err := unannouncedOn(ctx, c, svc, []string{"node-1", "node-2"}, false); err != nil {
			return err
		}
		return expectMetrics(ctx, c, "node-2", noCriticalReason(svc, "node-2"))
	})

	// Only node-3, without a replica, may elect: node-1 releases the lease and the GC deletes it (at once here).
	selectCiliumNode(t, ctx, policies, policy, "node-3")
	holder.stop()
	name := releaseCiliumLease(t, ctx, c, svc)
	released := time.Now()
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		fatalln(t, err)
	}
	if err := c.Unroute(ctx, extIP); err != nil {
		fatalln(t, err)
	}
	if r := c.Request(ctx, extIP+":80"); r.Verdict == cluster.OK {
		fatalf(t, "with nobody announcing, the request was answered: %s", r)
	}
	eventually(t, ciliumLeaseDuration+announcedWithin, "the Service unannounced on node-1 and node-2 a lease duration after the release", func() error {
		return unannouncedOn(ctx, c, svc, []string{"node-1", "node-2"}, true)
	})
	if took := time.Since(released); took < ciliumLeaseDuration-ciliumRetryPeriod {
		errorf(t, "unannounced %s after the release, within the lease duration (%s): a failover would page", took.Round(time.Millisecond), ciliumLeaseDuration)
	}
}
