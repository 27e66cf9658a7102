// Package kubeview is the exporter's view of the Kubernetes API: the Services whose external traffic policy is
// Local, their EndpointSlices reduced to this node's endpoints, and this node's Node object. It answers, as
// kube-proxy would decide it, how many local endpoints each such Service has here.
package kubeview

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// Node label and taint that take a node out of external load balancing.
const (
	LabelExcludeFromLB   = corev1.LabelNodeExcludeBalancers // node.kubernetes.io/exclude-from-external-load-balancers
	TaintToBeDeletedByCA = "ToBeDeletedByClusterAutoscaler"
)

// ErrNotSynced means the informers have not listed everything yet: any answer now would be a guess.
var ErrNotSynced = errors.New("informer caches not synced yet")

const sliceByServiceIndex = "service"

// View watches the API. Create it with New, then Start it.
type View struct {
	node     string
	informer map[string]cache.SharedIndexInformer
	// stats holds, per resource, the informer's list and watch bookkeeping (informers.go).
	stats map[string]*informerStats
	// ignore selects the Services a cluster owner excludes (nil: none); see IgnoredReason.
	ignore labels.Selector
	// announcers reads the announcers' own objects (nil: only their Service annotations are read).
	announcers *announce.Informers
	// changes is what the informers' events marked for the Tracker (tracker.go).
	changes *changeSet
}

// Option changes how New builds the view.
type Option func(*View)

// WithIgnoreSelector marks the Services whose labels match sel as ignored (IgnoredReason), unless their own
// annotation gives a reason first.
func WithIgnoreSelector(sel labels.Selector) Option {
	return func(v *View) { v.ignore = sel }
}

// WithAnnouncers adds the announcers' own objects (MetalLB's statuses, Cilium's leases) to each snapshot's
// Services, and their sources' states to Snapshot.Announcers. Start runs them; WaitForSync does not wait for
// them (an announcer that is not installed never syncs).
func WithAnnouncers(a *announce.Informers) Option {
	return func(v *View) { v.announcers = a }
}

// Resources the view watches, as named in the informer self-metrics.
const (
	ResourceServices       = "services"
	ResourceEndpointSlices = "endpointslices"
	ResourceNodes          = "nodes"
)

// New builds the informers. Nothing talks to the API server until Start.
func New(api API, node string, opts ...Option) *View {
	v := &View{node: node, informer: map[string]cache.SharedIndexInformer{}, stats: map[string]*informerStats{},
		changes: newChangeSet()}
	for _, o := range opts {
		o(v)
	}
	var selectorKeys []string
	if v.ignore != nil {
		reqs, _ := v.ignore.Requirements() // not selectable only for labels.Nothing, which has no keys
		for _, r := range reqs {
			selectorKeys = append(selectorKeys, r.Key())
		}
	}
	for _, r := range []string{ResourceServices, ResourceEndpointSlices, ResourceNodes} {
		v.stats[r] = &informerStats{}
	}
	transform := TransformService(selectorKeys...)
	if v.announcers != nil {
		transform = TransformServiceForAnnouncers(selectorKeys...)
	}
	v.informer[ResourceServices] = servicesInformer(api, v.stats[ResourceServices], transform)
	v.informer[ResourceEndpointSlices] = endpointSlicesInformer(api, v.stats[ResourceEndpointSlices], TransformEndpointSlice(node))
	v.informer[ResourceNodes] = nodeInformer(api, v.stats[ResourceNodes],
		fields.OneTermEqualSelector("metadata.name", node).String())
	_ = v.informer[ResourceEndpointSlices].AddIndexers(cache.Indexers{sliceByServiceIndex: sliceServiceKey})
	for name, inf := range v.informer {
		stats := v.stats[name]
		touch := func() { stats.lastEvent.Store(time.Now().UnixNano()) }
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { touch() },
			UpdateFunc: func(any, any) { touch() },
			DeleteFunc: func(any) { touch() },
		})
		_, _ = inf.AddEventHandler(v.changes.handlers(name))
	}
	if v.announcers != nil {
		// A source turning readable or refused, with no record changing, changes every LoadBalancer
		// Service's announcements.
		v.announcers.Notify(v.changes.markAnnouncerRecord, v.changes.markAll)
	}
	return v
}

func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			Labels: n.Labels, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec: corev1.NodeSpec{Taints: n.Spec.Taints, ProviderID: n.Spec.ProviderID, PodCIDRs: n.Spec.PodCIDRs,
			Unschedulable: n.Spec.Unschedulable},
		Status: corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}

func sliceServiceKey(obj any) ([]string, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := slice.Labels[labelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{slice.Namespace + "/" + svc}, nil
}

// Start runs the informers until ctx ends.
func (v *View) Start(ctx context.Context) {
	for _, inf := range v.informer {
		go inf.RunWithContext(ctx)
	}
	if v.announcers != nil {
		v.announcers.Start(ctx)
	}
	// The events of the first lists come before the informers count as synced, when a Tracker's Update still
	// fails: wake its owner once more when they have.
	go func() {
		if v.WaitForSync(ctx) == nil {
			v.changes.mark(func(*changeSet) {})
		}
	}()
}

// WaitForSync blocks until every informer has listed once, or ctx ends.
func (v *View) WaitForSync(ctx context.Context) error {
	for name, inf := range v.informer {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("waiting for the %s informer: %w", name, ctx.Err())
		}
	}
	return nil
}

// InformerStatus is one informer's health, for the self-metrics.
type InformerStatus struct {
	Resource  string
	Synced    bool
	LastEvent time.Time // zero when no event was seen yet
	// LastSuccess is when the API server last answered: a list, a watch opened, or a watch event (bookmarks
	// included). While the API server is unreachable it stops and the view's age grows. Zero before the first.
	LastSuccess              time.Time
	ListSuccess, ListError   uint64
	WatchSuccess, WatchError uint64
}

// Informers reports every informer's status, sorted by resource.
func (v *View) Informers() []InformerStatus {
	out := make([]InformerStatus, 0, len(v.informer))
	for name, inf := range v.informer {
		out = append(out, v.stats[name].status(name, inf.HasSynced()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// Snapshot is a consistent enough copy of the view for one scrape.
type Snapshot struct {
	Node     NodeState
	Services []ServiceState // sorted by namespace, name
	// Announcers is each announcer source's state; nil when the view reads no announcers' objects.
	Announcers map[announce.Source]announce.SourceState
}

// Snapshot computes the view now. It fails while any informer has not synced.
func (v *View) Snapshot() (Snapshot, error) {
	for name, inf := range v.informer {
		if !inf.HasSynced() {
			return Snapshot{}, fmt.Errorf("%s: %w", name, ErrNotSynced)
		}
	}
	snap := Snapshot{Node: v.nodeState()}
	var ann announce.Snapshot
	if v.announcers != nil {
		ann = v.announcers.Snapshot(time.Now())
	}
	for _, obj := range v.informer[ResourceServices].GetStore().List() {
		svc, ok := obj.(*corev1.Service)
		if !ok || !IsExternalLocal(svc) {
			continue
		}
		st, err := v.serviceState(svc, ann)
		if err != nil {
			return Snapshot{}, err
		}
		snap.Services = append(snap.Services, st)
	}
	if v.announcers != nil {
		snap.Announcers = ann.States
		annotationStates(snap.Announcers, snap.Services)
	}
	sort.Slice(snap.Services, func(i, j int) bool {
		a, b := snap.Services[i], snap.Services[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return snap, nil
}

// serviceState is one Local Service's state from the informers' stores: its usable EndpointSlices counted,
// whether it is ignored, and the announcers' records of it (ann, when the view reads them).
func (v *View) serviceState(svc *corev1.Service, ann announce.Snapshot) (ServiceState, error) {
	objs, err := v.informer[ResourceEndpointSlices].GetIndexer().ByIndex(sliceByServiceIndex, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return ServiceState{}, fmt.Errorf("endpoint slices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && UsableSlice(s) {
			slices = append(slices, s)
		}
	}
	st := ServiceStateOf(svc, slices)
	st.IgnoredReason, st.Ignored = IgnoredReason(svc, v.ignore)
	if v.announcers != nil {
		st.AddAnnouncers(ann, svc)
	}
	return st, nil
}

// UsableSlice: kube-proxy v1.37's EndpointSlice informer drops slices labelled service.kubernetes.io/headless
// and nothing else (cmd/kube-proxy/app/server.go). The endpointslice controller copies a Service's labels onto
// its slices, so a Service labelled headless keeps its rules but has no endpoints anywhere.
func UsableSlice(s *discoveryv1.EndpointSlice) bool {
	_, headless := s.Labels[labelHeadless]
	return !headless
}

// IsExternalLocal tells whether kube-proxy gives the Service external traffic with the Local policy: reachable
// from outside (NodePort, LoadBalancer or externalIPs), and kept by kube-proxy v1.37's Service informer, which
// drops Services labelled service.kubernetes.io/service-proxy-name and headless ones (clusterIP None).
func IsExternalLocal(svc *corev1.Service) bool {
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return false
	}
	if _, other := svc.Labels[labelServiceProxyName]; other {
		return false
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return false
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		return true
	case corev1.ServiceTypeClusterIP:
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

// Node returns this node's state alone: cheaper than a Snapshot for collectors that need nothing else.
func (v *View) Node() (NodeState, error) {
	if !v.informer[ResourceNodes].HasSynced() {
		return NodeState{}, fmt.Errorf("%s: %w", ResourceNodes, ErrNotSynced)
	}
	return v.nodeState(), nil
}

func (v *View) nodeState() NodeState {
	st := NodeState{Name: v.node}
	obj, exists, err := v.informer[ResourceNodes].GetStore().GetByKey(v.node)
	if err != nil || !exists {
		return st
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return st
	}
	return NodeStateOf(n)
}
