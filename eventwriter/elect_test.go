package eventwriter

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A Lease held by another writer is taken only once its record stopped changing for its duration by the
// candidate's own clock: the holder's renewTime, written by another node's clock an hour behind, says nothing;
// a renewal restarts the wait; a takeover counts a transition.
func TestElectorTakesOverByItsOwnClock(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	skewed := t0.Add(-time.Hour)
	other, dur := "writer-b", int32(15)
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "lt"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &other, LeaseDurationSeconds: &dur,
			AcquireTime: &metav1.MicroTime{Time: skewed}, RenewTime: &metav1.MicroTime{Time: skewed}, LeaseTransitions: new(int32(3))}})
	now := t0
	e := &elector{lock: &cursorLock{client: clientsOf(cs).Leases, namespace: "lt", name: "events", identity: "writer-a"},
		identity: "writer-a", timing: DefaultTiming, now: func() time.Time { return now }}

	for _, at := range []time.Duration{0, 10 * time.Second, 14 * time.Second} {
		now = t0.Add(at)
		if e.try(ctx) {
			t.Fatalf("took the Lease %s after first seeing it, within its 15 s", at)
		}
	}
	// The holder renews (its clock still an hour behind): the wait starts again from when this candidate saw it.
	l, err := cs.CoordinationV1().Leases("lt").Get(ctx, "events", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: skewed.Add(12 * time.Second)}
	if _, err := cs.CoordinationV1().Leases("lt").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{20 * time.Second, 34 * time.Second} {
		now = t0.Add(at)
		if e.try(ctx) {
			t.Fatalf("took the Lease at %s, %s after its renewal was seen", at, at-20*time.Second)
		}
	}
	now = t0.Add(36 * time.Second)
	if !e.try(ctx) {
		t.Fatal("did not take the Lease 16 s after its record last changed")
	}
	l, err = cs.CoordinationV1().Leases("lt").Get(ctx, "events", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recordOf(l.Spec); got.Holder != "writer-a" || got.Transitions != 4 || !got.Renew.Equal(now) || got.LeaseDuration != 15*time.Second {
		t.Fatalf("after the takeover the Lease says %+v", got)
	}
	// Released (no holder): another candidate takes it at once.
	e.release()
	b := &elector{lock: &cursorLock{client: clientsOf(cs).Leases, namespace: "lt", name: "events", identity: "writer-b"},
		identity: "writer-b", timing: DefaultTiming, now: func() time.Time { return now }}
	if !b.try(ctx) {
		t.Fatal("a released Lease was not taken at once")
	}
}
