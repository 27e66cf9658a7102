package eventwriter

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// selectedWeb is Service shop/web selecting app=web, its target port the pods' "http".
var selectedWeb = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"},
	Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30090}}}}

func controller(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: new(true)}}
}

// webPod is a pod of Service web owned as owners say, its app container's preStop sleeping preStop seconds
// (a sidecar sleeps longer, which does not keep the app serving), its grace period grace.
func webPod(name string, owners []metav1.OwnerReference, preStop, grace int64) *corev1.Pod {
	sleep := func(n int64) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: n}}}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "web"}, OwnerReferences: owners},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(grace), Containers: []corev1.Container{
			{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}, Lifecycle: sleep(preStop)},
			{Name: "proxy", Lifecycle: sleep(preStop + 60)},
		}}}
}

// deploymentPods are Deployment web's pods mid-rollout: one of the old ReplicaSet and one of the new.
func deploymentPods(preStop, grace int64) []runtime.Object {
	var out []runtime.Object
	for _, rs := range []string{"web-old", "web-new"} {
		out = append(out, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: rs, Namespace: "shop", OwnerReferences: controller("Deployment", "web")}},
			webPod(rs+"-x1", controller("ReplicaSet", rs), preStop, grace))
	}
	return out
}

// noteFor has the leader write the Event of one rollout episode at node-b (37 attempts lost over 14 s, the load
// balancer's drain 22 s, so a recommended preStop of 27 s) with objs in the API, and returns its note.
func noteFor(t *testing.T, objs []runtime.Object, react func(*fake.Clientset)) (string, *Writer, *bytes.Buffer) {
	t.Helper()
	p := newPeer(t, "node-b", "i1")
	p.add(30090, 37)
	drain := 22.0
	p.mu.Lock()
	p.eps[0].LBDrainSeconds, p.eps[0].RecommendedPreStopSeconds = &drain, 27
	p.mu.Unlock()
	cs := fake.NewClientset(append(objs, p.slice(t))...)
	if react != nil {
		react(cs)
	}
	var log bytes.Buffer
	w, err := New(testConfig(), clientsOf(cs), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.poll(context.Background(), map[string]Cursor{})
	evs := events(t, cs)
	if len(evs) != 1 {
		t.Fatalf("%d Events, want 1", len(evs))
	}
	return evs[0].Note, w, &log
}

const episodeNote = "node-b dropped 37 connection attempts at NodePort 30090/TCP (IPv4) over 14 s; the load balancer took 22 s to stop sending"

// A Deployment's rollout: the pods of both its ReplicaSets name the Deployment; their 5 s preStop is short of the
// 27 s needed, and their 30 s grace period must grow to keep the app's 25 s of shutdown after it.
func TestNoteNamesDeploymentRollout(t *testing.T) {
	wantDeploymentNote(t, append(deploymentPods(5, 30), selectedWeb))
}

// wantDeploymentNote wants, with objs in the API, the note naming Deployment web whose pods' 5 s preStop and
// 30 s grace period fall short, and no lookup failed.
func wantDeploymentNote(t *testing.T, objs []runtime.Object) {
	t.Helper()
	note, w, _ := noteFor(t, objs, nil)
	want := "rollout deployment/web: " + episodeNote + "; preStop 5 s — set it to at least 27 s and terminationGracePeriodSeconds to at least 52 s"
	if note != want {
		t.Errorf("note\n%q, want\n%q", note, want)
	}
	if n := testutil.ToFloat64(w.m.lookupsFailed); n != 0 {
		t.Errorf("lookups failed = %v", n)
	}
}

// A preStop shorter than recommended: the grace period grows by as much, keeping the app's 110 s of shutdown
// after it. A StatefulSet's pods are named after it.
func TestNotePreStopShorterThanRecommended(t *testing.T) {
	note, _, _ := noteFor(t, []runtime.Object{selectedWeb, webPod("web-0", controller("StatefulSet", "web"), 10, 120)}, nil)
	want := "rollout statefulset/web: " + episodeNote + "; preStop 10 s — set it to at least 27 s and terminationGracePeriodSeconds to at least 137 s"
	if note != want {
		t.Errorf("note\n%q, want\n%q", note, want)
	}
}

// Pods whose preStop already outlasts the drain get no advice.
func TestNotePreStopEnough(t *testing.T) {
	note, _, _ := noteFor(t, append(deploymentPods(30, 60), selectedWeb), nil)
	if want := "rollout deployment/web: " + episodeNote; note != want {
		t.Errorf("note\n%q, want\n%q", note, want)
	}
}

// Reads refused (the writer's RBAC without pods, or without ReplicaSets): the Event is written with the note as
// without them, the failure counted at each Event and logged once.
func TestNoteLookupsForbidden(t *testing.T) {
	old := "rollout: " + episodeNote + "; set the pods' preStop to at least 27 s"
	for _, resource := range []string{"pods", "replicasets"} {
		t.Run(resource, func(t *testing.T) {
			note, w, log := noteFor(t, append(deploymentPods(5, 30), selectedWeb), func(cs *fake.Clientset) {
				cs.PrependReactor("*", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
				})
			})
			if note != old {
				t.Errorf("note\n%q, want\n%q", note, old)
			}
			if n := testutil.ToFloat64(w.m.lookupsFailed); n != 1 {
				t.Errorf("lookups failed = %v, want 1", n)
			}
			if testutil.ToFloat64(w.m.events.WithLabelValues(ResultWritten)) != 1 {
				t.Error("the Event was not counted written")
			}
			// A second Event of the same Service: counted again, not logged again.
			w.backing(context.Background(), selectedWeb)
			if n := testutil.ToFloat64(w.m.lookupsFailed); n != 2 {
				t.Errorf("lookups failed = %v, want 2", n)
			}
			if c := strings.Count(log.String(), "cannot read the Service's pods"); c != 1 {
				t.Errorf("logged %d times, want once:\n%s", c, log.String())
			}
		})
	}
}

// A Service whose pods are all gone: the note as without them.
func TestNotePodsGone(t *testing.T) {
	note, w, _ := noteFor(t, []runtime.Object{selectedWeb}, nil)
	if want := "rollout: " + episodeNote + "; set the pods' preStop to at least 27 s"; note != want {
		t.Errorf("note\n%q, want\n%q", note, want)
	}
	if n := testutil.ToFloat64(w.m.lookupsFailed); n != 1 {
		t.Errorf("lookups failed = %v, want 1", n)
	}
}

// A Service without a selector whose EndpointSlices (written by whoever manages them) name its pods: the note
// names their workload as for a selected Service; an endpoint naming no pod, and a pod no endpoint names, are
// left out.
func TestNoteSelectorlessServiceFromSlices(t *testing.T) {
	svc := selectedWeb.DeepCopy()
	svc.Spec.Selector = nil
	objs := append(deploymentPods(5, 30), svc,
		webPod("stray", controller("StatefulSet", "stray"), 1, 30),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-manual", Namespace: "shop",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-old-x1"}},
				{Addresses: []string{"10.0.0.2"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-new-x1"}},
				{Addresses: []string{"192.0.2.9"}},
			}})
	wantDeploymentNote(t, objs)
}

// A selectorless Service whose slices name no pod (addresses outside the cluster): the note as without pods.
func TestNoteSelectorlessServiceWithoutPods(t *testing.T) {
	svc := selectedWeb.DeepCopy()
	svc.Spec.Selector = nil
	objs := append(deploymentPods(5, 30), svc, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-manual",
		Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.9"}}}})
	note, _, _ := noteFor(t, objs, nil)
	if want := "rollout: " + episodeNote + "; set the pods' preStop to at least 27 s"; note != want {
		t.Errorf("note\n%q, want\n%q", note, want)
	}
}
