package nodeagent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServingUntil: a deleted pod's stand-ins serve until its grace period ends, unless they exit on SIGTERM:
// then until the shortest preStop sleep ends, cut at the grace period, at once for a container without one.
func TestServingUntil(t *testing.T) {
	deleted := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const grace = 10
	sleep := func(s int64) corev1.Container {
		return corev1.Container{Name: "c", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}}
	}
	exec := corev1.Container{Name: "e", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}
	for _, tc := range []struct {
		name       string
		exitOnTerm bool
		containers []corev1.Container
		want       time.Duration // after the deletion
	}{
		{"drains its grace period, no hook", false, []corev1.Container{{Name: "c"}}, grace * time.Second},
		{"drains its grace period, sleep hook", false, []corev1.Container{sleep(4)}, grace * time.Second},
		{"exits on SIGTERM, no hook", true, []corev1.Container{{Name: "c"}}, 0},
		{"exits on SIGTERM after the sleep", true, []corev1.Container{sleep(4)}, 4 * time.Second},
		{"the sleep cut at the grace period", true, []corev1.Container{sleep(30)}, grace * time.Second},
		{"the first container to exit", true, []corev1.Container{sleep(7), sleep(3)}, 3 * time.Second},
		{"an exec hook the agent cannot run", true, []corev1.Container{sleep(7), exec}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := int64(grace)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				DeletionTimestamp:          &metav1.Time{Time: deleted.Add(grace * time.Second)},
				DeletionGracePeriodSeconds: &g,
			}, Spec: corev1.PodSpec{Containers: tc.containers}}
			if tc.exitOnTerm {
				pod.Annotations = map[string]string{ExitOnTermAnnotation: "true"}
			}
			if got := servingUntil(pod).Sub(deleted); got != tc.want {
				t.Errorf("serving until %s after the deletion, want %s", got, tc.want)
			}
		})
	}
}
