package announce

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// stepClock moves on at once when slept on, then runs step with the new time: there the test writes what
// Cilium's agents would have written by then.
type stepClock struct {
	now   time.Time
	slept time.Duration
	step  func(now time.Time)
}

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	c.now = c.now.Add(d)
	c.slept += d
	if c.step != nil {
		c.step(c.now)
	}
	return true
}

// renewedBy is a held lease's record after a renewal by its holder: acquireTime kept, renewTime the holder's
// clock's now (client-go's tryAcquireOrRenew).
func renewedBy(holder string, acquired, renew time.Time) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15,
		AcquireTime: metav1.NewTime(acquired), RenewTime: metav1.NewTime(renew)}
}

// settleRun reads objs as the plugin does (List, then Settle for svc on clock) and returns the snapshot and the
// number of lease lists made after the first.
func settleRun(t *testing.T, client *dynamicfake.FakeDynamicClient, clock *stepClock, limit time.Duration, svc *corev1.Service) (Snapshot, int) {
	t.Helper()
	ctx := context.Background()
	s := List(ctx, client, DefaultCiliumNamespace, clock.Now())
	before := countLists(client, "leases")
	s = s.Settle(ctx, client, DefaultCiliumNamespace, []*corev1.Service{svc}, clock, limit)
	return s, countLists(client, "leases") - before
}

func countLists(client *dynamicfake.FakeDynamicClient, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func writeLease(t *testing.T, client *dynamicfake.FakeDynamicClient, rec resourcelock.LeaderElectionRecord) {
	t.Helper()
	u := ciliumLeaseAs(t, CiliumLeaseName("shop", "web"), rec)
	if _, err := client.Resource(GVRLease).Namespace(DefaultCiliumNamespace).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSettleReleasedLease: a policy selects the Service and its lease was released (client-go's release: no
// holder, 1 s) and then deleted by the agents' GC: one read says nothing, and after a lease duration of
// re-reads with no holder the Service is unannounced, as the exporter calls it.
func TestSettleReleasedLease(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	web := lbService("shop", "web", map[string]string{"app": "web"}, "192.0.2.10")
	name := CiliumLeaseName("shop", "web")
	client := fakeDynamic(ciliumPolicyObj("all", nil, true, false), ciliumLeaseAs(t, name, released(t0.Add(-time.Second))))
	clock := &stepClock{now: t0}
	clock.step = func(now time.Time) {
		if now.Sub(t0) == 3*time.Second {
			if err := client.Resource(GVRLease).Namespace(DefaultCiliumNamespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := List(context.Background(), client, DefaultCiliumNamespace, t0).CiliumUnheld(web, lbIPs(web), nil); got != nil {
		t.Errorf("one read: unheld %v, want nothing before a lease duration", got)
	}
	s, lists := settleRun(t, client, clock, 0, web)
	if got, want := s.CiliumUnheld(web, lbIPs(web), nil), lbIPs(web); !reflect.DeepEqual(got, want) {
		t.Errorf("after the wait: unheld %v, want %v", got, want)
	}
	if clock.slept != DefaultCiliumLeaseDuration || lists != int(DefaultCiliumLeaseDuration/SettlePoll) {
		t.Errorf("waited %s with %d re-reads, want Cilium's default lease duration, one re-read a %s", clock.slept, lists, SettlePoll)
	}
	if got := s.AnnouncementsFor("shop", "web"); got != nil {
		t.Errorf("announcements %+v, want none", got)
	}
}

// TestSettleFailover: the holder released the lease and another agent takes it 5 s later, within the lease
// duration: the Service is announced by the new holder, not unannounced, and the wait ends at the takeover.
func TestSettleFailover(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	web := lbService("shop", "web", nil, "192.0.2.10")
	// Another Service's lease, held and fresh: the agents' duration (15 s) for the failover.
	other := ciliumLeaseAs(t, CiliumLeaseName("shop", "api"), renewedBy("node-3", t0.Add(-time.Hour), t0.Add(-time.Second)))
	client := fakeDynamic(ciliumPolicyObj("all", nil, true, false), other,
		ciliumLeaseAs(t, CiliumLeaseName("shop", "web"), released(t0.Add(-time.Second))))
	clock := &stepClock{now: t0}
	clock.step = func(now time.Time) {
		if now.Sub(t0) == 5*time.Second {
			writeLease(t, client, renewedBy("node-2", now, now))
		}
	}
	s, _ := settleRun(t, client, clock, 0, web)
	if got := s.CiliumUnheld(web, lbIPs(web), nil); got != nil {
		t.Errorf("a failover within the lease duration: unheld %v, want nothing", got)
	}
	if got := s.AnnouncementsFor("shop", "web"); len(got) != 1 || got[0].Node != "node-2" || got[0].Expired {
		t.Errorf("announcements %+v, want node-2's live lease", got)
	}
	if clock.slept != 5*time.Second {
		t.Errorf("waited %s, want the 5 s until the takeover", clock.slept)
	}
	if got := s.AnnouncementsFor("shop", "api"); len(got) != 1 || got[0].Expired {
		t.Errorf("a fresh lease not in doubt after the wait: %+v, want live as the first read judged it", got)
	}
}

// TestSettleSkewedHolder: a holder whose clock runs ten minutes behind renews every 2 s: its renewTime looks
// expired to the plugin, which watches it and calls it live at its first renewal (client-go's rule). One that
// stopped renewing is expired after its duration, unchanged. A holder ten minutes ahead writes a renewTime in
// the future, which says nothing of when it renewed: watched alike. One whose renewTime looks fresh costs no
// re-read.
func TestSettleSkewedHolder(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	web := lbService("shop", "web", nil, "192.0.2.10")
	skew := -10 * time.Minute
	acquired := t0.Add(-time.Hour + skew)
	for _, c := range []struct {
		name     string
		renewing bool
		ahead    bool      // the holder's clock runs ten minutes ahead, not behind
		renew    time.Time // the first read's renewTime
		expired  bool
		slept    time.Duration
		rereads  int
	}{
		{name: "behind, renewing", renewing: true, renew: t0.Add(skew), slept: 2 * time.Second, rereads: 2},
		{name: "behind, stopped", renew: t0.Add(skew), expired: true, slept: 15 * time.Second, rereads: 15},
		{name: "ahead, renewing", renewing: true, ahead: true, renew: t0.Add(-skew), slept: 2 * time.Second, rereads: 2},
		{name: "ahead, stopped", ahead: true, renew: t0.Add(-skew), expired: true, slept: 15 * time.Second, rereads: 15},
		{name: "on time", renew: t0.Add(-time.Second), slept: 0, rereads: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fakeDynamic(ciliumLeaseAs(t, CiliumLeaseName("shop", "web"), renewedBy("node-1", acquired, c.renew)))
			clock := &stepClock{now: t0}
			clock.step = func(now time.Time) {
				if c.renewing && now.Sub(t0)%(2*time.Second) == 0 {
					off := skew
					if c.ahead {
						off = -skew
					}
					writeLease(t, client, renewedBy("node-1", acquired, now.Add(off)))
				}
			}
			s, rereads := settleRun(t, client, clock, 0, web)
			got := s.AnnouncementsFor("shop", "web")
			if len(got) != 1 || got[0].Node != "node-1" || got[0].Expired != c.expired {
				t.Errorf("announcements %+v, want node-1's lease, expired %v", got, c.expired)
			}
			if clock.slept != c.slept || rereads != c.rereads {
				t.Errorf("waited %s with %d re-reads, want %s and %d", clock.slept, rereads, c.slept, c.rereads)
			}
		})
	}
}

// TestSettleSaysNothingUnread: policies the plugin may not read (forbidden) or that do not exist leave a
// Service without a lease as before, and cost no wait; a wait cut short by the limit (--request-timeout) calls
// nothing unannounced or expired; a re-read refused turns the leases' state, and their records say nothing.
func TestSettleSaysNothingUnread(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	web := lbService("shop", "web", nil, "192.0.2.10")
	name := CiliumLeaseName("shop", "web")

	client := fakeDynamic(ciliumPolicyObj("all", nil, true, false), ciliumLeaseAs(t, name, released(t0)))
	client.PrependReactor("list", "ciliuml2announcementpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(GVRCiliumL2Policy.GroupResource(), "", nil)
	})
	clock := &stepClock{now: t0}
	s, rereads := settleRun(t, client, clock, 0, web)
	if s.States[SourceCiliumL2Policy] != SourceForbidden || s.CiliumUnheld(web, lbIPs(web), nil) != nil || clock.slept != 0 || rereads != 0 {
		t.Errorf("policies forbidden: state %s, unheld %v, waited %s (%d re-reads); want forbidden, nothing, no wait",
			s.States[SourceCiliumL2Policy], s.CiliumUnheld(web, lbIPs(web), nil), clock.slept, rereads)
	}

	client = fakeDynamic(ciliumPolicyObj("all", nil, true, false), ciliumLeaseAs(t, name, released(t0)))
	clock = &stepClock{now: t0}
	s, _ = settleRun(t, client, clock, 5*time.Second, web)
	if got := s.CiliumUnheld(web, lbIPs(web), nil); got != nil || clock.slept != 5*time.Second {
		t.Errorf("a wait cut to 5 s: unheld %v after %s, want nothing after 5 s", got, clock.slept)
	}

	client = fakeDynamic(ciliumLeaseAs(t, name, renewedBy("node-1", t0.Add(-time.Hour), t0.Add(-time.Minute))))
	clock = &stepClock{now: t0}
	clock.step = func(time.Time) {
		client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(GVRLease.GroupResource(), "", nil)
		})
	}
	s, _ = settleRun(t, client, clock, 0, web)
	if s.States[SourceCiliumL2] != SourceForbidden {
		t.Errorf("a re-read refused: leases %s, want forbidden", s.States[SourceCiliumL2])
	}
}

func lbIPs(svc *corev1.Service) []string { return []string{svc.Status.LoadBalancer.Ingress[0].IP} }
