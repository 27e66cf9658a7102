package announce

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// The announcers' resources, read through the dynamic client: no announcer's Go module is linked, and a
// cluster without their CRDs is a state, not an error.
var (
	GVRServiceL2Status  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}
	GVRServiceBGPStatus = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicebgpstatuses"}
	GVRLease            = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// MetalLB's labels on its status objects (internal/k8s/controllers/values.go).
const (
	LabelMetalLBNode             = "metallb.io/node"
	LabelMetalLBServiceName      = "metallb.io/service-name"
	LabelMetalLBServiceNamespace = "metallb.io/service-namespace"
)

// DefaultCiliumNamespace is where Cilium's agents keep their L2 announcement leases by default.
const DefaultCiliumNamespace = "kube-system"

// Informers watch the announcers' own objects: MetalLB's ServiceL2Status (all of them: a holder elsewhere
// matters here too) and this node's ServiceBGPStatus, Cilium's L2 announcement leases in one namespace and its
// L2 announcement policies (which Services should have a lease).
// Each informer keeps retrying its list with the reflector's backoff, so a CRD installed later, or RBAC
// granted later, is found without a restart.
type Informers struct {
	node     string
	informer map[Source]cache.SharedIndexInformer
	track    map[Source]*sourceTrack
	// leases is what this reader last saw of each Cilium lease and when it saw it change (snapshots may be
	// taken from more than one goroutine: the tracker's and a gather's).
	leasesMu sync.Mutex
	leases   map[string]leaseRecord
	// unheld is, per Service a Cilium policy selects, since when this reader has seen it without a live lease.
	unheld *unheldClock
}

// NewInformers builds the informers; nothing talks to the API server until Start.
func NewInformers(client dynamic.Interface, node, ciliumNamespace string) *Informers {
	a := &Informers{node: node, informer: map[Source]cache.SharedIndexInformer{}, track: map[Source]*sourceTrack{},
		leases: map[string]leaseRecord{}, unheld: newUnheldClock()}
	add := func(src Source, ri dynamic.ResourceInterface, tweak func(*metav1.ListOptions), transform cache.TransformFunc) {
		t := &sourceTrack{}
		a.track[src] = t
		lw := &trackedLW{ri: ri, tweak: tweak, track: t}
		inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{})
		_ = inf.SetTransform(transform) // fails only once the informer runs
		// The reflector logs every failed list; a missing CRD or a forbidden read is a state, exported, and
		// would log every backoff interval for ever.
		_ = inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
		a.informer[src] = inf
	}
	none := func(*metav1.ListOptions) {}
	add(SourceMetalLBL2, client.Resource(GVRServiceL2Status), none, transformL2Status)
	add(SourceMetalLBBGP, client.Resource(GVRServiceBGPStatus), func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{LabelMetalLBNode: node}.String()
	}, transformBGPStatus)
	add(SourceCiliumL2, client.Resource(GVRLease).Namespace(ciliumNamespace), none, transformLease)
	add(SourceCiliumL2Policy, client.Resource(GVRCiliumL2Policy), none, transformCiliumPolicy)
	return a
}

// Notify has the informers tell a reader (kubeview's tracker) of changes: record gets what an event on an
// announcer's object names (the Service key namespace/name of a MetalLB status, by its fields or labels; the
// name of a Cilium lease, which the reader maps back to its Service; both "" for another object), moved is
// called when a source's answer changes what its state may say (a source turning readable or refused with no
// record changing), and after any event on a Cilium L2 announcement policy, which may change which Services
// any policy selects. Call it before Start; neither may block.
func (a *Informers) Notify(record func(serviceKey, lease string), moved func()) {
	for src, inf := range a.informer {
		_, _ = inf.AddEventHandler(recordHandlers(src, record, moved))
		a.track[src].moved = moved
	}
}

// recordHandlers call record for every event on src's objects, tombstones included.
func recordHandlers(src Source, record func(serviceKey, lease string), moved func()) cache.ResourceEventHandlerFuncs {
	mark := func(o any) {
		if src == SourceCiliumL2Policy {
			record("", "")
			moved()
			return
		}
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if src == SourceCiliumL2 {
			if strings.HasPrefix(u.GetName(), ciliumLeasePrefix) {
				record("", u.GetName())
			} else {
				record("", "")
			}
			return
		}
		_, key, _ := metallbRecord(u)
		record(key, "")
	}
	update := func(old, o any) {
		// Cilium's agents patch a policy's status (a selector or interface regex that does not compile) on each
		// of their events: only a changed spec changes which Services it selects.
		if src == SourceCiliumL2Policy {
			ou, ok1 := old.(*unstructured.Unstructured)
			nu, ok2 := o.(*unstructured.Unstructured)
			if ok1 && ok2 && reflect.DeepEqual(ou.Object["spec"], nu.Object["spec"]) {
				return
			}
		}
		mark(o)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: mark, UpdateFunc: update, DeleteFunc: mark}
}

// StatesDiffer reports whether some source's state now differs from its state in prev (a source turns ok, is
// refused, goes stale without any record changing): the records are then read again.
func (a *Informers) StatesDiffer(prev map[Source]SourceState) bool {
	for _, src := range Sources {
		inf, ok := a.informer[src]
		if !ok {
			continue
		}
		if a.track[src].state(inf.HasSynced()) != prev[src] {
			return true
		}
	}
	return false
}

// Start runs the informers until ctx ends. Nobody waits for them: an announcer that is not installed never
// syncs.
func (a *Informers) Start(ctx context.Context) {
	for _, inf := range a.informer {
		go inf.RunWithContext(ctx)
	}
}

// sourceTrack is one informer's last answer from the API server.
type sourceTrack struct {
	mu       sync.Mutex
	answered bool        // some list or watch succeeded
	failed   SourceState // the state the latest failure means; "" after a success
	// moved, when set (Notify), is called when an answer changes what state may say.
	moved func()
}

func (t *sourceTrack) ok() {
	t.mu.Lock()
	changed := !t.answered || t.failed != ""
	t.answered, t.failed = true, ""
	moved := t.moved
	t.mu.Unlock()
	if changed && moved != nil {
		moved()
	}
}

func (t *sourceTrack) fail(err error) {
	st := SourceStale
	switch {
	case apierrors.IsNotFound(err):
		st = SourceAbsent
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		st = SourceForbidden
	}
	t.mu.Lock()
	changed := t.failed != st
	t.failed = st
	moved := t.moved
	t.mu.Unlock()
	if changed && moved != nil {
		moved()
	}
}

// state: the latest failure wins until the next success. Before any answer, a source that failed for
// another reason (an unreachable API server) is stale: nothing current is known.
func (t *sourceTrack) state(synced bool) SourceState {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.failed != "":
		return t.failed
	case t.answered && synced:
		return SourceOK
	}
	return SourceStale
}

// trackedLW lists and watches one dynamic resource, recording each answer.
type trackedLW struct {
	ri    dynamic.ResourceInterface
	tweak func(*metav1.ListOptions)
	track *sourceTrack
}

func (l *trackedLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	l.tweak(&opts)
	obj, err := l.ri.List(ctx, opts)
	if err != nil {
		l.track.fail(err)
		return nil, err
	}
	l.track.ok()
	return obj, nil
}

func (l *trackedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	l.tweak(&opts)
	w, err := l.ri.Watch(ctx, opts)
	if err != nil {
		l.track.fail(err)
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Error {
			l.track.fail(apierrors.FromObject(e.Object))
		}
		return e, true
	}), nil
}

func (l *trackedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *trackedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported: the dynamic client's lists are plain lists here, counted as answers.
func (l *trackedLW) IsWatchListSemanticsUnSupported() bool { return true }

// slim keeps an object's identity, the labels in keep and the fields at paths: the informers store nothing
// else of the announcers' objects.
func slim(obj any, keep []string, paths ...[]string) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetResourceVersion(u.GetResourceVersion())
	have := u.GetLabels()
	var kept map[string]string
	for _, k := range keep {
		if v, ok := have[k]; ok {
			if kept == nil {
				kept = make(map[string]string, len(keep))
			}
			kept[k] = v
		}
	}
	if kept != nil {
		out.SetLabels(kept)
	}
	for _, p := range paths {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, p...); found {
			if err := unstructured.SetNestedField(out.Object, runtime.DeepCopyJSONValue(v), p...); err != nil {
				return nil, fmt.Errorf("keeping %s of %s/%s: %w", strings.Join(p, "."), u.GetNamespace(), u.GetName(), err)
			}
		}
	}
	return out, nil
}

var metallbLabels = []string{LabelMetalLBNode, LabelMetalLBServiceName, LabelMetalLBServiceNamespace}

func transformL2Status(obj any) (any, error) {
	return slim(obj, metallbLabels, []string{"status", "node"}, []string{"status", "serviceName"}, []string{"status", "serviceNamespace"})
}

func transformBGPStatus(obj any) (any, error) {
	return slim(obj, metallbLabels, []string{"status", "node"}, []string{"status", "serviceName"},
		[]string{"status", "serviceNamespace"}, []string{"status", "peers"})
}

// transformLease keeps Cilium's L2 announcement leases' holder and timing, and only the name of any other
// lease in the namespace.
func transformLease(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if ok && !strings.HasPrefix(u.GetName(), ciliumLeasePrefix) {
		return slim(obj, nil)
	}
	return slim(obj, nil, []string{"spec", "holderIdentity"}, []string{"spec", "renewTime"}, []string{"spec", "leaseDurationSeconds"})
}

// metallbRecord reads a MetalLB status object: the status fields, else the labels MetalLB sets alike.
func metallbRecord(u *unstructured.Unstructured) (node, key string, peers []string) {
	status, _ := u.Object["status"].(map[string]any)
	str := func(field, label string) string {
		if v, _ := status[field].(string); v != "" {
			return v
		}
		// MetalLB labels each status alike; read them only when a field is missing (GetLabels copies the map).
		return u.GetLabels()[label]
	}
	node = str("node", LabelMetalLBNode)
	ns, name := str("serviceNamespace", LabelMetalLBServiceNamespace), str("serviceName", LabelMetalLBServiceName)
	if ns == "" || name == "" {
		return node, "", nil
	}
	if list, ok := status["peers"].([]any); ok {
		for _, p := range list {
			if v, ok := p.(string); ok && v != "" {
				peers = append(peers, v)
			}
		}
	}
	return node, ns + "/" + name, peers
}

func leaseOf(u *unstructured.Unstructured) leaseRecord {
	l := leaseRecord{}
	l.holder, _, _ = unstructured.NestedString(u.Object, "spec", "holderIdentity")
	l.renewRaw, _, _ = unstructured.NestedString(u.Object, "spec", "renewTime")
	if l.renewRaw != "" {
		var t metav1.MicroTime
		if err := t.UnmarshalQueryParameter(l.renewRaw); err == nil {
			l.renew = t.Time
		}
	}
	if d, found, _ := unstructured.NestedInt64(u.Object, "spec", "leaseDurationSeconds"); found {
		l.duration = time.Duration(d) * time.Second
	}
	return l
}

// addRecord adds what one announcer object says. A ServiceBGPStatus counts only for onlyNode ("": any node):
// each node's exporter lists its own, and a status names the peers the Service is configured to be
// advertised to from that node (one without peers advertises nothing).
func (s *Snapshot) addRecord(src Source, u *unstructured.Unstructured, onlyNode string) {
	switch src {
	case SourceMetalLBL2:
		if node, key, _ := metallbRecord(u); key != "" && node != "" {
			s.byService[key] = append(s.byService[key], Announcement{Source: src, Node: node, Exclusive: true})
		}
	case SourceMetalLBBGP:
		if node, key, peers := metallbRecord(u); key != "" && node != "" && (onlyNode == "" || node == onlyNode) && len(peers) > 0 {
			s.byService[key] = append(s.byService[key], Announcement{Source: src, Node: node, Peers: peers})
		}
	case SourceCiliumL2:
		if strings.HasPrefix(u.GetName(), ciliumLeasePrefix) {
			s.leases[u.GetName()] = leaseOf(u)
		}
	case SourceCiliumL2Policy:
		s.policies = append(s.policies, ciliumPolicyOf(u))
	}
}

// Snapshot reads every source's state and the records of those that are ok, at now.
func (a *Informers) Snapshot(now time.Time) Snapshot {
	s := Snapshot{States: map[Source]SourceState{}, byService: map[string][]Announcement{}, leases: map[string]leaseRecord{}, now: now,
		unheld: a.unheld}
	for _, src := range Sources {
		inf, ok := a.informer[src]
		if !ok {
			continue
		}
		st := a.track[src].state(inf.HasSynced())
		s.States[src] = st
		if st != SourceOK {
			continue
		}
		for _, obj := range inf.GetStore().List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				s.addRecord(src, u, a.node)
			}
		}
		if src == SourceCiliumL2 {
			a.observe(s.leases, now)
		}
	}
	return s
}

// observe stamps each lease read with when this reader last saw its record change: now for a lease it has
// not seen before or that changed since, else the time it kept. A lease gone from the store is forgotten.
// A snapshot taken some time after the informer delivered a renewal stamps it late, which only makes the
// lease expire later: a delay never turns into a page. The first sight of a lease starts its duration (as
// client-go's leader election does), whatever its renewTime says.
func (a *Informers) observe(leases map[string]leaseRecord, now time.Time) {
	a.leasesMu.Lock()
	defer a.leasesMu.Unlock()
	seen := make(map[string]leaseRecord, len(leases))
	for name, l := range leases {
		if prev, ok := a.leases[name]; ok && prev.sameRecord(l) {
			l.observed = prev.observed
		} else {
			l.observed = now
		}
		if l.holder != "" {
			a.unheld.sawHeld(l.duration)
		}
		leases[name], seen[name] = l, l
	}
	a.leases = seen
}
