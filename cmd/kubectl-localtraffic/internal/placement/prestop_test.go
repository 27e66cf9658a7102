package placement

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func preStop(h *corev1.LifecycleHandler, grace *int64) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: h}
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = grace
	}
}

func sleepAction(n int64) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: n}}
}

func execAction(cmd ...string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

// The advice: measured p95 + the margin, rounded up; recommended only where the workload has less; the grace
// keeps the app's shutdown time; a preStop that is not a plain sleep is unknown.
func TestAdvisePreStop(t *testing.T) {
	drain := MeasuredDrain{P95Seconds: 31.2, Episodes: 12, Source: "prometheus"}
	const need = 32 + PreStopMarginSeconds
	for _, tc := range []struct {
		name                 string
		mod                  func(*appsv1.Deployment)
		needed               string
		current, preS, grace int64
		unknown              bool
	}{
		{"no hook", func(*appsv1.Deployment) {}, "yes", 0, need, 30 + need, false},
		{"native sleep too short, long grace", preStop(sleepAction(10), ptr.To[int64](120)), "yes", 10, need, need + 110, false},
		{"native sleep too short, grace leaves 20s of shutdown", preStop(sleepAction(10), ptr.To[int64](30)), "yes", 10, need, need + 20, false},
		{"exec sleep enough", preStop(execAction("/bin/sleep", "40"), ptr.To[int64](60)), "no", 40, 0, 0, false},
		{"sh -c sleep", preStop(execAction("sh", "-c", "sleep 5"), nil), "yes", 5, need, need + 25, false},
		{"native sleep exactly", preStop(sleepAction(need), nil), "no", need, 0, 0, false},
		{"script", preStop(execAction("/drain.sh"), nil), "unknown", 0, 0, 0, true},
		{"http", preStop(&corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}}, nil), "unknown", 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := nodePortService("checkout")
			d := deployment("checkout", 2, tc.mod)
			pods, rss, _ := readyPods(d, svc, "node-1", "node-2")
			c := &Cluster{Live: true, Nodes: workers(2), Services: []*corev1.Service{svc}, Deployments: []*appsv1.Deployment{d},
				Pods: pods, ReplicaSets: rss}
			got := AdvisePreStop(c, MeasuredDrains{"kubelings/checkout": drain, "kubelings/other": drain})
			if len(got) != 1 {
				t.Fatalf("advice for %d Services, want 1 (a drain of a Service not in the cluster is none)", len(got))
			}
			a := got["kubelings/checkout"]
			if a == nil || a.PreStopSeconds != need || a.MarginSeconds != PreStopMarginSeconds || a.Drain != drain {
				t.Fatalf("advice %+v, want preStop %d", a, need)
			}
			if len(a.Workloads) != 1 || a.Workloads[0].Kind != "Deployment" || a.Workloads[0].Name != "checkout" {
				t.Fatalf("workloads %+v, want Deployment checkout", a.Workloads)
			}
			w := a.Workloads[0]
			if w.Needed != tc.needed || w.RecommendedPreStopSeconds != tc.preS || w.RecommendedGraceSeconds != tc.grace {
				t.Errorf("%+v, want needed %s, preStop %d, grace %d", w, tc.needed, tc.preS, tc.grace)
			}
			if tc.unknown != (w.PreStopSeconds == nil) || tc.unknown != (w.PreStopUnknown != "") {
				t.Errorf("preStop %v (%q), want unknown %t", w.PreStopSeconds, w.PreStopUnknown, tc.unknown)
			}
			if !tc.unknown && *w.PreStopSeconds != tc.current {
				t.Errorf("current preStop %d, want %d", *w.PreStopSeconds, tc.current)
			}
			if a.PreStopNeeded() != (tc.needed == "yes") {
				t.Errorf("PreStopNeeded %t", a.PreStopNeeded())
			}
		})
	}
}

// The serving container decides: a sidecar's sleep does not keep the app serving, and the shortest of the serving
// containers' delays counts.
func TestAdvisePreStopServingContainer(t *testing.T) {
	svc := nodePortService("checkout")
	d := deployment("checkout", 1, func(d *appsv1.Deployment) {
		spec := &d.Spec.Template.Spec
		spec.Containers = append(spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy",
			Lifecycle: &corev1.Lifecycle{PreStop: sleepAction(60)}, Ports: []corev1.ContainerPort{{ContainerPort: 9901}}})
	})
	c := &Cluster{Live: true, Nodes: workers(1), Services: []*corev1.Service{svc}, Deployments: []*appsv1.Deployment{d}}
	w := AdvisePreStop(c, MeasuredDrains{"kubelings/checkout": {P95Seconds: 10}})["kubelings/checkout"].Workloads[0]
	if w.PreStopSeconds == nil || *w.PreStopSeconds != 0 || w.Needed != "yes" {
		t.Errorf("%+v: the app container (port 8080) has no preStop; the sidecar's sleep does not count", w)
	}
}
