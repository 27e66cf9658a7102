package announce

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// What a one-shot reader (the plugin) does where one read of Cilium's leases cannot tell what the exporter,
// which watches them, would say: it watches those few leases for up to a lease duration, re-reading them, and
// judges them by the exporter's rules (client-go's for a lease, the unheld clock for a Service a policy
// selects). A lease that looks fresh costs no wait.

// Clock is a one-shot reader's time: the wall clock (RealClock), or a test's.
type Clock interface {
	Now() time.Time
	// Sleep waits d, and reports false when ctx ended first.
	Sleep(ctx context.Context, d time.Duration) bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx ends.
func (RealClock) Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// renewAheadSlack is how far in the future a renewTime may be and still count as a fresh lease: further ahead,
// the holder's clock runs ahead of this reader's, and its renewTime would keep a lease it stopped renewing
// looking fresh for as long as the skew.
const renewAheadSlack = time.Second

// SettlePoll is how often Settle re-reads the leases: within Cilium's retry period (2 s by default), so a holder
// renewing on time is seen to renew.
const SettlePoll = time.Second

// Settle decides, for the Local LoadBalancer Services among services, what List's one read left in doubt, as
// the exporter would having watched from List's now:
//   - a held lease whose renewTime looks older than its duration (its holder stopped, or its clock runs behind)
//     or lies in the future (the holder's clock runs ahead, and says nothing of when it last renewed): live if
//     it changes within its duration (client-go's rule), expired if it does not;
//   - a Service a Cilium L2 announcement policy selects with no live-looking lease (released, deleted, or none
//     yet): unannounced (CiliumUnheld) once no live lease has been seen for a lease duration (the last held
//     lease's, else Cilium's default), so that a failover in flight is not called a loss.
//
// It re-reads the leases every SettlePoll until every doubt is settled (a held lease changed) or the longest
// duration has passed, and never longer than limit (0: no limit) or past ctx: a wait cut short calls nothing
// expired or unannounced that has not been watched for its whole duration. Nothing in doubt: no wait, no
// read. A re-read that fails turns the leases' state to what the failure means, and their records say nothing.
// Leases not in doubt keep the judgment of the first read. The Snapshot returned is judged at the end of the
// wait.
func (s Snapshot) Settle(ctx context.Context, client dynamic.Interface, ciliumNamespace string, services []*corev1.Service,
	clock Clock, limit time.Duration) Snapshot {
	if s.States[SourceCiliumL2] != SourceOK {
		return s
	}
	start := s.now
	// The duration a failover may take: Cilium's agents share one --l2-announcements-lease-duration.
	failover := time.Duration(0)
	for _, l := range s.leases {
		if l.holder != "" {
			failover = max(failover, l.duration)
		}
	}
	if failover == 0 {
		failover = DefaultCiliumLeaseDuration
	}
	policiesOK := s.States[SourceCiliumL2Policy] == SourceOK
	doubts := map[string]time.Duration{} // lease name: how long it must be watched
	for _, svc := range services {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			continue
		}
		name := CiliumLeaseName(svc.Namespace, svc.Name)
		l, ok := s.leases[name]
		held := ok && l.holder != ""
		if held && l.validAt(start) && !l.renew.After(start.Add(renewAheadSlack)) {
			continue
		}
		var d time.Duration
		if held {
			d = l.duration
		}
		if policiesOK && ciliumSelectsLoadBalancerIPs(s.policies, svc) {
			d = max(d, failover)
		} else if !held {
			continue
		}
		doubts[name] = d
	}
	if len(doubts) == 0 {
		return s
	}
	wait := time.Duration(0)
	for _, d := range doubts {
		wait = max(wait, d)
	}
	if limit > 0 {
		wait = min(wait, limit)
	}

	// watched holds the doubtful leases as last read, stamped by the exporter's rule: first sight (the first
	// read) starts the duration, each change seen restarts it.
	watched := map[string]leaseRecord{}
	for name := range doubts {
		if l, ok := s.leases[name]; ok {
			l.observed = start
			watched[name] = l
		}
	}
	settled := func() bool {
		for name := range doubts {
			if l, ok := watched[name]; !ok || l.holder == "" || !l.observed.After(start) {
				return false
			}
		}
		return true
	}
	ri := client.Resource(GVRLease).Namespace(ciliumNamespace)
	now := start
	for deadline := start.Add(wait); !settled() && now.Before(deadline); {
		if !clock.Sleep(ctx, min(SettlePoll, deadline.Sub(now))) {
			now = clock.Now()
			break
		}
		list, err := ri.List(ctx, metav1.ListOptions{})
		now = clock.Now()
		if err != nil {
			var t sourceTrack
			t.fail(err)
			s.States = maps.Clone(s.States)
			s.States[SourceCiliumL2] = t.state(false)
			return s
		}
		seen := make(map[string]leaseRecord, len(doubts))
		for i := range list.Items {
			name := list.Items[i].GetName()
			if _, ok := doubts[name]; !ok {
				continue
			}
			l := leaseOf(&list.Items[i])
			if prev, ok := watched[name]; ok && prev.sameRecord(l) {
				l.observed = prev.observed
			} else {
				l.observed = now
			}
			seen[name] = l
		}
		watched = seen // a lease gone from the list was deleted (Cilium's GC of a released lease)
	}

	leases := make(map[string]leaseRecord, len(s.leases))
	for name, l := range s.leases {
		if _, ok := doubts[name]; !ok {
			l.observed = l.observed.Add(now.Sub(start)) // judged at now as the first read judged it
			leases[name] = l
		}
	}
	for name, l := range watched {
		leases[name] = l
	}
	unheld := newUnheldClock()
	unheld.duration = failover
	for name := range doubts {
		unheld.since[name] = start
	}
	s.leases, s.unheld, s.now = leases, unheld, now
	return s
}
