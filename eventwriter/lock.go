package eventwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CursorsAnnotation is the Lease's annotation that keeps, per peer, the instance and number of the last episode
// the leader handled: a new leader reads it and goes on from there.
const CursorsAnnotation = "localtraffic.io/event-cursors"

// Cursor is how far the leader got with one peer: the peer's process (its instance id) and the number of the
// last episode written (or found written) for it.
type Cursor struct {
	Instance string `json:"instance"`
	Seq      uint64 `json:"seq"`
}

// record is what the Lease says of its holder (coordination/v1 LeaseSpec), as client-go's leader election
// reads and writes it.
type record struct {
	Holder        string
	LeaseDuration time.Duration
	Acquire       time.Time
	Renew         time.Time
	Transitions   int32
}

// same: the two records say the same (times to the Lease's microseconds).
func (r record) same(o record) bool {
	return r.Holder == o.Holder && r.LeaseDuration == o.LeaseDuration && r.Transitions == o.Transitions &&
		r.Acquire.Truncate(time.Microsecond).Equal(o.Acquire.Truncate(time.Microsecond)) &&
		r.Renew.Truncate(time.Microsecond).Equal(o.Renew.Truncate(time.Microsecond))
}

func recordOf(spec coordinationv1.LeaseSpec) record {
	var r record
	if spec.HolderIdentity != nil {
		r.Holder = *spec.HolderIdentity
	}
	if spec.LeaseDurationSeconds != nil {
		r.LeaseDuration = time.Duration(*spec.LeaseDurationSeconds) * time.Second
	}
	if spec.AcquireTime != nil {
		r.Acquire = spec.AcquireTime.Time
	}
	if spec.RenewTime != nil {
		r.Renew = spec.RenewTime.Time
	}
	if spec.LeaseTransitions != nil {
		r.Transitions = *spec.LeaseTransitions
	}
	return r
}

func (r record) spec() coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{HolderIdentity: &r.Holder, LeaseDurationSeconds: ptr(int32(r.LeaseDuration / time.Second)),
		AcquireTime: &metav1.MicroTime{Time: r.Acquire}, RenewTime: &metav1.MicroTime{Time: r.Renew},
		LeaseTransitions: &r.Transitions}
}

func ptr[T any](v T) *T { return &v }

// cursorLock reads and writes the writers' Lease, and its every write also carries the leader's cursors in an
// annotation: a separate write of the annotation would race the elector's renewals (a conflict each time),
// while riding on them keeps one writer of the Lease. The cursors it writes lag the writes of Events by at most
// a renewal period; an episode a new leader finds again is skipped by its Event's deterministic name.
type cursorLock struct {
	client         Leases
	namespace      string
	name, identity string

	mu    sync.Mutex
	lease *coordinationv1.Lease
	// cursors are set by the leader only (nil otherwise): a writer that leads again must not write back what it
	// had when it led before. leading is set between start and stop; setCursors is ignored outside.
	cursors map[string]Cursor
	leading bool
}

// get reads the Lease's record (a NotFound error where there is none).
func (l *cursorLock) get(ctx context.Context) (record, error) {
	lease, err := l.client.Get(ctx, l.namespace, l.name)
	if err != nil {
		return record{}, err
	}
	l.mu.Lock()
	l.lease = lease
	l.mu.Unlock()
	return recordOf(lease.Spec), nil
}

// create makes the Lease with rec.
func (l *cursorLock) create(ctx context.Context, rec record) error {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}, Spec: rec.spec()}
	return l.write(lease, func(lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		return l.client.Create(ctx, lease)
	})
}

// update writes rec over the Lease last read: a conflict if someone wrote it since.
func (l *cursorLock) update(ctx context.Context, rec record) error {
	l.mu.Lock()
	if l.lease == nil {
		l.mu.Unlock()
		return errors.New("the Lease was not read yet")
	}
	lease := l.lease.DeepCopy()
	l.mu.Unlock()
	lease.Spec = rec.spec()
	return l.write(lease, func(lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		return l.client.Update(ctx, lease)
	})
}

// write sends lease with the leader's cursors on it and keeps what the API server returned: the next update
// starts from its resourceVersion.
func (l *cursorLock) write(lease *coordinationv1.Lease, send func(*coordinationv1.Lease) (*coordinationv1.Lease, error)) error {
	if err := l.annotate(lease); err != nil {
		return err
	}
	got, err := send(lease)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = got
	l.mu.Unlock()
	return nil
}

// annotate puts the leader's cursors on lease; without any (not leading, or leading and not yet polled) it
// keeps what the Lease has.
func (l *cursorLock) annotate(lease *coordinationv1.Lease) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cursors == nil {
		return nil
	}
	raw, err := json.Marshal(l.cursors)
	if err != nil {
		return fmt.Errorf("encoding the cursors: %w", err)
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[CursorsAnnotation] = string(raw)
	return nil
}

// Describe names the Lease, for logs.
func (l *cursorLock) Describe() string { return l.namespace + "/" + l.name }

// stored is the cursors the Lease held when last read or written (empty: none, or not readable).
func (l *cursorLock) stored() map[string]Cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Cursor{}
	if l.lease == nil || l.lease.Annotations[CursorsAnnotation] == "" {
		return out
	}
	// A Lease's annotation someone else wrote may not parse: then the leader starts over, and the Events'
	// deterministic names skip what was written already.
	_ = json.Unmarshal([]byte(l.lease.Annotations[CursorsAnnotation]), &out)
	return out
}

// start begins a term: the cursors the Lease holds (the last leader's), which it writes back from now on.
func (l *cursorLock) start() map[string]Cursor {
	c := l.stored()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading, l.cursors = true, maps.Clone(c)
	return c
}

// stop ends the term: the Lease's annotation is no longer this writer's to write.
func (l *cursorLock) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading, l.cursors = false, nil
}

// setCursors hands the lock the leader's cursors to write with the next renewal; ignored outside a term (a
// loop of an ended term finishing its poll).
func (l *cursorLock) setCursors(c map[string]Cursor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		l.cursors = maps.Clone(c)
	}
}
