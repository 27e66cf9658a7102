package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/localtraffic/localtraffic-exporter/internal/prestop"
)

// lookupTimeout bounds the reads a note's workload and preStop take: past it the Event is written without them,
// never held back.
const lookupTimeout = 3 * time.Second

// backing is what the writer read at write time of the pods behind an episode's Service: the per-node recorder
// knows neither the workload nor the pods' preStop, the API does, and one writer per cluster pays the reads.
type backing struct {
	// workloads are the pods' controllers as kubectl names them ("deployment/web"), sorted.
	workloads []string
	// preStop is the shortest preStop delay among the pods' serving containers (the first pod to stop ends its
	// serving), nil when some pod's hook is not a plain sleep.
	preStop *int64
	// pods are each pod's preStop delay and grace period.
	pods []podStop
}

// podStop is one pod's preStop delay (ok false: not readable) and grace period.
type podStop struct {
	delay, grace int64
	ok           bool
}

// errNoPods: the Service has no pod (gone after the rollout, or a Service without a selector whose
// EndpointSlices name none): the note cannot name a workload.
var errNoPods = errors.New("no pods selected")

// lookupBacking reads the Service's pods (those its selector picks; without a selector, those its EndpointSlices'
// endpoints name) and their controllers: a ReplicaSet's Deployment (the ReplicaSet's own controller), else the
// pod's controller itself.
func (w *Writer) lookupBacking(ctx context.Context, svc *corev1.Service) (*backing, error) {
	if w.c.Pods == nil {
		return nil, errNoPods
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var pods []corev1.Pod
	var err error
	if len(svc.Spec.Selector) > 0 {
		pods, err = w.c.Pods.List(ctx, svc.Namespace, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	} else {
		pods, err = w.slicePods(ctx, svc)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the pods of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	if len(pods) == 0 {
		return nil, errNoPods
	}
	b := &backing{}
	owners := map[string]string{} // ReplicaSet name -> its workload
	for i := range pods {
		p := &pods[i]
		wl, err := w.workload(ctx, p, owners)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(b.workloads, wl) {
			b.workloads = append(b.workloads, wl)
		}
		d, why := prestop.Spec(&p.Spec, svc)
		b.pods = append(b.pods, podStop{delay: d, grace: prestop.Grace(&p.Spec), ok: why == ""})
	}
	slices.Sort(b.workloads)
	for _, p := range b.pods {
		if !p.ok {
			b.preStop = nil
			break
		}
		if b.preStop == nil || p.delay < *b.preStop {
			b.preStop = new(p.delay)
		}
	}
	return b, nil
}

// slicePods is a selectorless Service's pods: those its EndpointSlices' endpoints name as their target (whoever
// manages the slices says so; endpoints that name no pod, such as an address outside the cluster, are no pod's).
// The namespace's pods are listed once and those named kept: listing needs no grant beyond the one the selector
// case uses.
func (w *Writer) slicePods(ctx context.Context, svc *corev1.Service) ([]corev1.Pod, error) {
	if w.c.Slices == nil {
		return nil, nil
	}
	sl, err := w.c.Slices.List(ctx, svc.Namespace, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return nil, fmt.Errorf("its EndpointSlices: %w", err)
	}
	named := map[string]bool{}
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if r := ep.TargetRef; r != nil && r.Kind == "Pod" && (r.Namespace == "" || r.Namespace == svc.Namespace) {
				named[r.Name] = true
			}
		}
	}
	if len(named) == 0 {
		return nil, nil
	}
	all, err := w.c.Pods.List(ctx, svc.Namespace, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(p corev1.Pod) bool { return !named[p.Name] }), nil
}

// advice is what the note says of the pods' preStop against the needed delay need: needed when the shortest is
// below it, and then the grace period the pods need: the longest of what each short pod needs to keep its app's
// shutdown time after the longer preStop (prestop.Recommend, the plugin's advice too).
func (b *backing) advice(need int64) (needed bool, grace int64) {
	if b.preStop == nil {
		return false, 0
	}
	for _, p := range b.pods {
		if n, g := prestop.Recommend(p.delay, p.grace, need); n {
			needed, grace = true, max(grace, g)
		}
	}
	return needed, grace
}

// workload names pod p's controller; owners caches the ReplicaSets already read.
func (w *Writer) workload(ctx context.Context, p *corev1.Pod, owners map[string]string) (string, error) {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return "pod/" + p.Name, nil
	}
	if ref.Kind != "ReplicaSet" || w.c.ReplicaSets == nil {
		return strings.ToLower(ref.Kind) + "/" + ref.Name, nil
	}
	if wl, ok := owners[ref.Name]; ok {
		return wl, nil
	}
	rs, err := w.c.ReplicaSets.Get(ctx, p.Namespace, ref.Name)
	if err != nil {
		return "", fmt.Errorf("reading ReplicaSet %s/%s of pod %s: %w", p.Namespace, ref.Name, p.Name, err)
	}
	wl := "replicaset/" + rs.Name
	if o := metav1.GetControllerOf(rs); o != nil {
		wl = strings.ToLower(o.Kind) + "/" + o.Name
	}
	owners[ref.Name] = wl
	return wl, nil
}
