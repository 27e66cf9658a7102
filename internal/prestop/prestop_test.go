package prestop

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestExecSleep(t *testing.T) {
	for cmd, want := range map[string]int64{"sleep 5": 5, "/usr/bin/sleep 7s": 7, "sleep": -1, "sleep 5 && kill 1": -1, "sleep 1.5": -1, "echo 5": -1} {
		got, ok := execSleep(strings.Fields(cmd))
		if (want < 0) == ok || ok && got != want {
			t.Errorf("%q: %d %t, want %d", cmd, got, ok, want)
		}
	}
	if got, ok := execSleep([]string{"/bin/sh", "-c", "sleep 12"}); !ok || got != 12 {
		t.Errorf("sh -c sleep 12: %d %t", got, ok)
	}
}

// The serving container (the one declaring the target port) decides; a sidecar's longer sleep does not count,
// and a hook that is not a plain sleep is unknown rather than guessed.
func TestSpec(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}
	app := corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}}
	side := corev1.Container{Name: "side", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "60"}}}}}
	if s, why := Spec(&corev1.PodSpec{Containers: []corev1.Container{app, side}}, svc); s != 5 || why != "" {
		t.Errorf("app and sidecar: %d %q, want 5", s, why)
	}
	app.Lifecycle.PreStop = &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}}
	if _, why := Spec(&corev1.PodSpec{Containers: []corev1.Container{app}}, svc); why == "" {
		t.Error("an HTTP preStop read as a sleep")
	}
}

func TestRecommend(t *testing.T) {
	for _, c := range []struct {
		delay, grace, need int64
		needed             bool
		rgrace             int64
	}{{5, 30, 27, true, 52}, {10, 120, 37, true, 147}, {27, 30, 27, false, 0}, {40, 60, 37, false, 0}, {0, 10, 27, true, 37}} {
		n, g := Recommend(c.delay, c.grace, c.need)
		if n != c.needed || g != c.rgrace {
			t.Errorf("Recommend(%d, %d, %d) = %t %d, want %t %d", c.delay, c.grace, c.need, n, g, c.needed, c.rgrace)
		}
	}
}
