// Package prestop reads how long a pod's preStop hook keeps its serving containers up, and what preStop and
// termination grace period would outlast a measured load balancer drain. kubectl-localtraffic reads it from the
// workloads' templates (its drain-check advice), the Event writer from the Service's current pods (its notes):
// both must read a hook the same way, or the two would advise differently.
package prestop

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MarginSeconds is what the recommended preStop sleep adds to the measured drain. The measured drain runs from
// the node's health check first answering 503 to the last new connection attempt, but the pod's preStop starts
// earlier than that 503: at its deletion, before the EndpointSlice controller has published the endpoint as
// terminating and kube-proxy has synced it (each batches for about a second; a busy control plane takes
// longer). The margin covers that head start, and the linear interpolation of a p95 inside its histogram
// bucket. It is fixed, not a probe interval: the load balancer's interval and threshold are inside the
// measurement already.
const MarginSeconds = 5

// NeedSeconds is the preStop sleep that outlasts a drain of drainSeconds: the drain rounded up to whole seconds
// (lifecycle.preStop.sleep.seconds is an integer) plus MarginSeconds.
func NeedSeconds(drainSeconds float64) int64 { return int64(math.Ceil(drainSeconds)) + MarginSeconds }

// DefaultGracePeriodSeconds is the API's default terminationGracePeriodSeconds.
const DefaultGracePeriodSeconds = 30

// Grace is the pod spec's terminationGracePeriodSeconds, the API's default when unset.
func Grace(spec *corev1.PodSpec) int64 {
	if spec.TerminationGracePeriodSeconds != nil {
		return *spec.TerminationGracePeriodSeconds
	}
	return DefaultGracePeriodSeconds
}

// Spec reads how long the spec's serving containers delay their stop with a preStop hook: the containers that
// declare one of the Service's target ports (all of them when none does, as when the ports are not declared),
// the shortest delay among them (the first to stop ends the serving). why is set when a hook is not a plain
// sleep (a script, an HTTP call): its duration is not readable, and is not guessed.
func Spec(spec *corev1.PodSpec, svc *corev1.Service) (seconds int64, why string) {
	first := true
	for _, c := range servingContainers(spec, svc) {
		d, ok := containerPreStop(c)
		if !ok {
			return 0, fmt.Sprintf("container %s's preStop is not a plain sleep", c.Name)
		}
		if first || d < seconds {
			seconds, first = d, false
		}
	}
	return seconds, ""
}

// Recommend compares a preStop delay and grace period with the delay needed: needed when the delay is short,
// and then the grace period to set, which keeps the time the app has now to shut down after its preStop (its
// grace minus its preStop) and never lowers the grace.
func Recommend(delay, grace, need int64) (needed bool, recommendedGrace int64) {
	if delay >= need {
		return false, 0
	}
	shutdown := max(grace-delay, 0)
	return true, max(grace, need+shutdown)
}

// servingContainers are the containers that declare one of the Service's target ports; all of them when none
// does.
func servingContainers(spec *corev1.PodSpec, svc *corev1.Service) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return declares(c, p.TargetPort, p.Port) }) {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// declares tells whether the container declares the target port (by name or number; an unset targetPort is the
// Service's port).
func declares(c *corev1.Container, target intstr.IntOrString, port int32) bool {
	for _, cp := range c.Ports {
		switch {
		case target.Type == intstr.String && target.StrVal != "" && cp.Name == target.StrVal:
			return true
		case target.Type == intstr.Int && target.IntVal != 0 && cp.ContainerPort == target.IntVal:
			return true
		case target.Type == intstr.Int && target.IntVal == 0 && cp.ContainerPort == port:
			return true
		}
	}
	return false
}

// containerPreStop is the container's preStop delay in seconds: 0 without a hook, the native sleep action's
// seconds, or an exec of sleep N (directly, or as the whole of a sh -c). ok is false for anything else.
func containerPreStop(c *corev1.Container) (seconds int64, ok bool) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0, true
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return h.Sleep.Seconds, true
	case h.Exec != nil:
		return execSleep(h.Exec.Command)
	}
	return 0, false
}

// execSleep reads ["sleep", "N"], ["/bin/sleep", "N"] or ["sh", "-c", "sleep N"] (any shell path, N whole
// seconds, an optional trailing s).
func execSleep(cmd []string) (int64, bool) {
	if len(cmd) == 3 && slices.Contains([]string{"sh", "bash", "ash", "dash"}, path.Base(cmd[0])) && cmd[1] == "-c" {
		cmd = strings.Fields(cmd[2])
	}
	if len(cmd) != 2 || path.Base(cmd[0]) != "sleep" {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(cmd[1], "s"), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
