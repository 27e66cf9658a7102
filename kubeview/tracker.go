package kubeview

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// The tracker keeps the view's Snapshot current from the informers' events: each event marks the Services it
// concerns (its own key, an EndpointSlice's Service, an announcer record's Service), and Update recomputes
// those alone. Computing every Service's state for every look at the node cost a scrape O(Services) even
// when nothing had changed; the node model asks only for what did.

// changeSet is what the informers' events marked since the tracker last looked. The View owns one and its
// event handlers fill it; nothing reads it before a Tracker exists.
type changeSet struct {
	mu    sync.Mutex
	keys  map[string]bool // Service keys, namespace/name
	all   bool            // something every Service's state depends on changed (an announcer source's state)
	lease map[string]bool // Cilium lease names whose Service the tracker maps
	ann   bool            // some announcer record changed: the announcer snapshot is read again
	// notify, when set, is called after every mark (outside mu): the node model's wake-up. It must not block.
	notify func()
}

func newChangeSet() *changeSet {
	return &changeSet{keys: map[string]bool{}, lease: map[string]bool{}}
}

func (c *changeSet) mark(fn func(*changeSet)) {
	c.mu.Lock()
	fn(c)
	notify := c.notify
	c.mu.Unlock()
	if notify != nil {
		notify()
	}
}

func (c *changeSet) markKey(key string) {
	if key == "" {
		return
	}
	c.mark(func(c *changeSet) { c.keys[key] = true })
}

func (c *changeSet) markAll() { c.mark(func(c *changeSet) { c.all = true }) }

// take returns what was marked and starts afresh.
func (c *changeSet) take() (keys map[string]bool, leases map[string]bool, all, ann bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, leases, all, ann = c.keys, c.lease, c.all, c.ann
	c.keys, c.lease, c.all, c.ann = map[string]bool{}, map[string]bool{}, false, false
	return keys, leases, all, ann
}

// objectKey is the namespace/name of an informer's object, tombstones included.
func objectKey(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	return k
}

// sliceOwner is the key of the Service an EndpointSlice (or its tombstone) belongs to.
func sliceOwner(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[labelServiceName] == "" {
		return ""
	}
	return s.Namespace + "/" + s.Labels[labelServiceName]
}

// handlers are the event handlers that mark, per resource, what an event concerns.
func (c *changeSet) handlers(resource string) cache.ResourceEventHandlerFuncs {
	switch resource {
	case ResourceServices:
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.markKey(objectKey(o)) },
			UpdateFunc: func(_, o any) { c.markKey(objectKey(o)) },
			DeleteFunc: func(o any) { c.markKey(objectKey(o)) },
		}
	case ResourceEndpointSlices:
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.markKey(sliceOwner(o)) },
			UpdateFunc: func(old, o any) {
				// A slice relabelled to another Service (it does not happen with the controller, but a
				// hand-written slice may) changes both.
				if k := sliceOwner(old); k != sliceOwner(o) {
					c.markKey(k)
				}
				c.markKey(sliceOwner(o))
			},
			DeleteFunc: func(o any) { c.markKey(sliceOwner(o)) },
		}
	}
	// This Node: no Service's state reads it (the node model reads it beside them), so an event only wakes.
	wake := func() { c.mark(func(*changeSet) {}) }
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(any) { wake() },
	}
}

// markAnnouncerRecord marks what an event on an announcer's object names (announce.Informers.Notify): the
// Service of a MetalLB status, the Cilium lease (which the tracker maps back to its Service); any such event
// has the announcer snapshot read again.
func (c *changeSet) markAnnouncerRecord(serviceKey, lease string) {
	c.mark(func(c *changeSet) {
		c.ann = true
		if lease != "" {
			c.lease[lease] = true
		}
		if serviceKey != "" {
			c.keys[serviceKey] = true
		}
	})
}

// Tracker keeps the view's Services current between looks: Update recomputes only the Services an event
// marked since the last Update (and those whose Cilium lease expired since), everything when this Node or an
// announcer source's state changed. Its Snapshot equals the View's at the same moment. One goroutine uses
// it (the node model's); the informers mark changes concurrently.
type Tracker struct {
	v      *View
	states map[string]ServiceState
	sorted []string // keys of states, sorted by namespace then name (Snapshot's order)
	// leaseOf maps a Cilium lease name to the LoadBalancer Service it elects an announcer for.
	leaseOf map[string]string
	// expiry is, per Service with a Cilium lease held and not expired, when it expires unless seen renewed
	// (a lease duration after announce.Informers last saw it change), and per Service a Cilium policy selects
	// without a live lease, when it becomes unannounced (announce.Snapshot.CiliumUnheldAt): its state changes
	// then without an event.
	expiry    map[string]time.Time
	ann       announce.Snapshot
	annStates map[announce.Source]announce.SourceState
	// sources is every announcer source's state with the annotation sources' (Announcers), as of the last
	// Update that changed a Service or a source.
	sources map[announce.Source]announce.SourceState
	node    NodeState
	primed  bool
}

// NewTracker returns the view's tracker. OnChange says whom to wake when events come.
func (v *View) NewTracker() *Tracker {
	return &Tracker{v: v, states: map[string]ServiceState{}, leaseOf: map[string]string{}, expiry: map[string]time.Time{}}
}

// OnChange makes notify (nil: none) be called, without blocking, after every event that changes something a
// Tracker's Update would recompute, and after every change of this Node.
func (v *View) OnChange(notify func()) {
	v.changes.mu.Lock()
	v.changes.notify = notify
	v.changes.mu.Unlock()
}

// Update brings the tracker to now and returns the keys of the Services whose state changed (added, changed
// or gone). It fails, changing nothing, while an informer has not synced; the next Update after the sync
// computes every Service.
func (t *Tracker) Update(now time.Time) ([]string, error) {
	for name, inf := range t.v.informer {
		if !inf.HasSynced() {
			return nil, fmt.Errorf("%s: %w", name, ErrNotSynced)
		}
	}
	keys, leases, all, annChanged := t.v.changes.take()
	if !t.primed {
		all, annChanged = true, true
	}
	t.node = t.v.nodeState()
	if t.v.announcers != nil {
		if annChanged || !t.primed || t.v.announcers.StatesDiffer(t.annStates) {
			t.ann = t.v.announcers.Snapshot(now)
		} else {
			t.ann = t.ann.At(now)
		}
		if st := t.ann.States; !maps.Equal(st, t.annStates) {
			// A source that became readable (or stopped being) changes every LoadBalancer Service's records.
			all = true
			t.annStates = maps.Clone(st)
		}
		for name := range leases {
			if k, ok := t.leaseOf[name]; ok {
				keys[k] = true
			}
		}
		for k, at := range t.expiry {
			if !now.Before(at) {
				keys[k] = true
			}
		}
	}
	store := t.v.informer[ResourceServices].GetStore()
	if all {
		for _, k := range store.ListKeys() {
			keys[k] = true
		}
		for k := range t.states {
			keys[k] = true
		}
	}
	t.primed = true
	var changed []string
	membership := false
	for key := range keys {
		st, ok, err := t.compute(store, key)
		if err != nil {
			return nil, err
		}
		old, had := t.states[key]
		switch {
		case !ok && had:
			delete(t.states, key)
			t.forgetLease(key)
			if t.v.announcers != nil {
				ns, name, _ := strings.Cut(key, "/")
				t.v.announcers.ForgetService(ns, name)
			}
			changed, membership = append(changed, key), true
		case ok && !had:
			t.states[key] = st
			changed, membership = append(changed, key), true
		case ok && !reflect.DeepEqual(old, st):
			t.states[key] = st
			changed = append(changed, key)
		}
	}
	if membership {
		t.sorted = t.sorted[:0]
		for k := range t.states {
			t.sorted = append(t.sorted, k)
		}
		slices.SortFunc(t.sorted, compareServiceKeys)
	}
	slices.SortFunc(changed, compareServiceKeys)
	if t.v.announcers != nil && (len(changed) > 0 || all || t.sources == nil) {
		t.sources = maps.Clone(t.ann.States)
		services := make([]ServiceState, 0, len(t.states))
		for _, st := range t.states {
			services = append(services, st)
		}
		annotationStates(t.sources, services)
	}
	return changed, nil
}

// Announcers is each announcer source's state as of the last Update (Snapshot.Announcers); nil when the view
// reads no announcers' objects. The map is the tracker's: read it, do not change it.
func (t *Tracker) Announcers() map[announce.Source]announce.SourceState { return t.sources }

// compute is the state of the Service key now, as View.Snapshot computes it; ok false when it is no Local
// Service (gone, or another policy).
func (t *Tracker) compute(store cache.Store, key string) (ServiceState, bool, error) {
	obj, exists, err := store.GetByKey(key)
	if err != nil {
		return ServiceState{}, false, fmt.Errorf("service %s: %w", key, err)
	}
	svc, ok := obj.(*corev1.Service)
	if !exists || !ok || !IsExternalLocal(svc) {
		return ServiceState{}, false, nil
	}
	st, err := t.v.serviceState(svc, t.ann)
	if err != nil {
		return ServiceState{}, false, err
	}
	t.forgetLease(key)
	if t.v.announcers != nil && mayBeAnnounced(svc) {
		t.leaseOf[announce.CiliumLeaseName(svc.Namespace, svc.Name)] = key
		if at, ok := t.ann.LeaseExpiry(svc.Namespace, svc.Name); ok {
			t.expiry[key] = at
		} else if at, ok := t.ann.CiliumUnheldAt(svc); ok {
			// A selected Service without a live lease is unannounced a lease duration after it was first
			// seen so, with no event.
			t.expiry[key] = at
		}
	}
	return st, true, nil
}

func (t *Tracker) forgetLease(key string) {
	ns, name, _ := strings.Cut(key, "/")
	delete(t.leaseOf, announce.CiliumLeaseName(ns, name))
	delete(t.expiry, key)
}

// NextChange is the earliest time a Service's state changes without an event (a Cilium lease expiring
// unless renewed); zero when none will.
func (t *Tracker) NextChange() time.Time {
	var next time.Time
	for _, at := range t.expiry {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// Keys lists the Local Services' keys, sorted by namespace then name. The slice is the tracker's: read it
// before the next Update.
func (t *Tracker) Keys() []string { return t.sorted }

// State is the state of the Service key as of the last Update.
func (t *Tracker) State(key string) (ServiceState, bool) {
	st, ok := t.states[key]
	return st, ok
}

// Snapshot is the view as of the last Update, as View.Snapshot gives it.
func (t *Tracker) Snapshot() Snapshot {
	snap := Snapshot{Node: t.node}
	if len(t.sorted) > 0 {
		snap.Services = make([]ServiceState, 0, len(t.sorted))
	}
	for _, k := range t.sorted {
		snap.Services = append(snap.Services, t.states[k])
	}
	if t.v.announcers != nil {
		snap.Announcers = maps.Clone(t.ann.States)
		annotationStates(snap.Announcers, snap.Services)
	}
	return snap
}

// Node is this node's state as of the last Update.
func (t *Tracker) Node() NodeState { return t.node }

// compareServiceKeys orders namespace/name keys as Snapshot orders Services: by namespace, then name.
func compareServiceKeys(a, b string) int {
	an, aname, _ := strings.Cut(a, "/")
	bn, bname, _ := strings.Cut(b, "/")
	if c := strings.Compare(an, bn); c != 0 {
		return c
	}
	return strings.Compare(aname, bname)
}
