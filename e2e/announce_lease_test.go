package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		t.Fatal(err)
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
					t.Errorf("renewing %s: %v", name, err)
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

// TestAnnouncerLeaseClockSkew: a Cilium lease is expired when it stopped changing for its duration by the
// reader's own clock (client-go's leader election rule), not when the holder's renewTime looks old. Two
// LoadBalancer Services, each served by a replica on node-1, are announced by node-1 through leases renewed
// every 2 s with Cilium's 15 s duration, by a holder whose clock runs ten minutes behind and by one ten minutes
// ahead. For longer than a lease duration neither is unannounced on any node (judged by renewTime, the one
// behind was unannounced at once, a page with nothing lost). Then both holders stop: each Service is
// unannounced within a lease duration of its last renewal (judged by renewTime, the one ahead stayed
// announced for ten minutes while nobody answered for its address).
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
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Unroute(context.Background(), s.lbIP) })
		if err := c.RouteVia(ctx, "node-1", s.lbIP); err != nil {
			t.Fatal(err)
		}
		s.holder = holdCiliumLease(t, c, s.svc, "node-1", s.skew)
	}
	// unannounced checks every Service on every node: the Service decided (its rotation exported) and
	// localtraffic_service_unannounced present (want) or absent, as the exporter exports it.
	unannounced := func(want bool) error {
		var errs []error
		for _, s := range cases {
			for _, node := range nodes {
				labels := svcLabels(s.svc, node)
				check := func(m cluster.Metrics) error {
					if len(m.Series("localtraffic_in_rotation", labels)) == 0 {
						return fmt.Errorf("no localtraffic_in_rotation%v: not decided yet", labels)
					}
					if want {
						return m.Expect("localtraffic_service_unannounced", labels, 1)
					}
					return m.ExpectAbsent("localtraffic_service_unannounced", labels)
				}
				if err := expectMetrics(ctx, c, node, sourceOK(node, "cilium_l2"), check); err != nil {
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
	// Renewed on time for longer than a lease duration: announced throughout, whatever the holders' clocks.
	for end := time.Now().Add(ciliumLeaseDuration + 5*time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if err := unannounced(false); err != nil {
			t.Fatalf("a lease renewed every %s: %v", ciliumRetryPeriod, err)
		}
	}
	// Both holders stop renewing: each lease expires a duration after the exporters last saw it change.
	for _, s := range cases {
		s.holder.stop()
	}
	stopped := time.Now()
	eventually(t, ciliumLeaseDuration+announcedWithin, "both Services unannounced a lease duration after the last renewal", func() error {
		return unannounced(true)
	})
	if took := time.Since(stopped); took < ciliumLeaseDuration-ciliumRetryPeriod-time.Second {
		t.Errorf("unannounced %s after the last renewal, before the lease's %s could pass", took, ciliumLeaseDuration)
	}
}
