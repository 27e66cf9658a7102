package placement

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

// PreStopMarginSeconds is what the recommended preStop sleep adds to the measured drain. The measured drain runs
// from the node's health check first answering 503 to the last new connection attempt, but the pod's preStop
// starts earlier than that 503: at its deletion, before the EndpointSlice controller has published the endpoint
// as terminating and kube-proxy has synced it (each batches for about a second; a busy control plane takes
// longer). The margin covers that head start, and the linear interpolation of the p95 inside its histogram bucket.
// It is fixed, not a probe interval: the load balancer's interval and threshold are inside the measurement
// already.
const PreStopMarginSeconds = 5

// defaultGracePeriodSeconds is the API's default terminationGracePeriodSeconds.
const defaultGracePeriodSeconds = 30

// MeasuredDrain is how long a Service's load balancers kept sending new connections to nodes whose health check
// already answered 503 (the exporters' localtraffic_service_lb_drain_seconds), over its recent episodes.
type MeasuredDrain struct {
	// P95Seconds is the episodes' 95th percentile, interpolated in the histogram's buckets as Prometheus'
	// histogram_quantile does.
	P95Seconds float64 `json:"p95Seconds"`
	// Episodes is how many episodes it rests on (fractional from Prometheus' increase()).
	Episodes float64 `json:"episodes"`
	// Source: "prometheus" (over the --drain-lookback window) or "exporters" (since each exporter started).
	Source string `json:"source"`
}

// MeasuredDrains maps "namespace/service" to the Service's measured drain; a Service absent has none.
type MeasuredDrains map[string]MeasuredDrain

// PreStopAdvice is, for one Service with a measured drain, the preStop sleep and termination grace period that
// would have kept its pods serving until its load balancers stopped sending, against what its workloads have.
type PreStopAdvice struct {
	Drain MeasuredDrain `json:"drain"`
	// MarginSeconds is PreStopMarginSeconds; PreStopSeconds the sleep its pods need: the drain's p95 plus the
	// margin, rounded up to whole seconds (lifecycle.preStop.sleep.seconds is an integer).
	MarginSeconds  int64 `json:"marginSeconds"`
	PreStopSeconds int64 `json:"preStopSeconds"`
	// Workloads are the controllers whose pods back the Service, by kind and name.
	Workloads []WorkloadPreStop `json:"workloads"`
}

// WorkloadPreStop is one workload's preStop delay and grace period against the advice.
type WorkloadPreStop struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// PreStopSeconds is how long its serving containers' preStop hook delays their stop (the shortest of them:
	// the first to stop ends the serving); nil when not readable (PreStopUnknown says why).
	PreStopSeconds *int64 `json:"preStopSeconds,omitempty"`
	PreStopUnknown string `json:"preStopUnknown,omitempty"`
	// GraceSeconds is its terminationGracePeriodSeconds (the API's default 30 when unset).
	GraceSeconds int64 `json:"graceSeconds"`
	// Needed: "yes" when PreStopSeconds is below the advice (then RecommendedPreStopSeconds and
	// RecommendedGraceSeconds say what to set), "no" when it has enough, "unknown" when its preStop is not
	// readable.
	Needed                    string `json:"needed"`
	RecommendedPreStopSeconds int64  `json:"recommendedPreStopSeconds,omitempty"`
	// RecommendedGraceSeconds keeps the time the app has now to shut down after its preStop (its grace minus
	// its preStop), and never lowers the grace.
	RecommendedGraceSeconds int64 `json:"recommendedGraceSeconds,omitempty"`
}

// PreStopNeeded tells whether some workload of the advice has less preStop delay than it needs.
func (a *PreStopAdvice) PreStopNeeded() bool {
	return slices.ContainsFunc(a.Workloads, func(w WorkloadPreStop) bool { return w.Needed == "yes" })
}

// AdvisePreStop gives, for each Local Service of c with a measured drain, the advice (by "namespace/service").
// It reads the pod templates of the workloads whose pods back the Service (their owners' templates, which the
// next rollout's pods get), so c needs Pods and the workloads.
func AdvisePreStop(c *Cluster, drains MeasuredDrains) map[string]*PreStopAdvice {
	if len(drains) == 0 {
		return nil
	}
	ix := newBackingIndex(c, workloads(c))
	out := map[string]*PreStopAdvice{}
	for _, svc := range c.Services {
		key := svc.Namespace + "/" + svc.Name
		d, ok := drains[key]
		if !ok {
			continue
		}
		need := int64(math.Ceil(d.P95Seconds)) + PreStopMarginSeconds
		a := &PreStopAdvice{Drain: d, MarginSeconds: PreStopMarginSeconds, PreStopSeconds: need, Workloads: []WorkloadPreStop{}}
		ws, _, _ := ix.backing(svc)
		for _, w := range ws {
			a.Workloads = append(a.Workloads, advise(w, svc, need))
		}
		slices.SortFunc(a.Workloads, func(x, y WorkloadPreStop) int {
			return strings.Compare(x.Kind+"/"+x.Name, y.Kind+"/"+y.Name)
		})
		out[key] = a
	}
	return out
}

// advise compares one workload's template with the needed preStop delay.
func advise(w *Workload, svc *corev1.Service, need int64) WorkloadPreStop {
	spec := &w.Template.Spec
	out := WorkloadPreStop{Kind: w.Kind, Name: w.Name, GraceSeconds: defaultGracePeriodSeconds}
	if spec.TerminationGracePeriodSeconds != nil {
		out.GraceSeconds = *spec.TerminationGracePeriodSeconds
	}
	delay, why := templatePreStop(spec, svc)
	if why != "" {
		out.Needed, out.PreStopUnknown = "unknown", why
		return out
	}
	out.PreStopSeconds = &delay
	if delay >= need {
		out.Needed = "no"
		return out
	}
	// The app's own shutdown time is what the grace period leaves after the preStop now; kept as it is.
	shutdown := max(out.GraceSeconds-delay, 0)
	out.Needed, out.RecommendedPreStopSeconds = "yes", need
	out.RecommendedGraceSeconds = max(out.GraceSeconds, need+shutdown)
	return out
}

// templatePreStop reads how long the template's serving containers delay their stop with a preStop hook: the
// containers that declare one of the Service's target ports (all of them when none does, as when the ports are
// not declared), the shortest delay among them. why is set when a hook is not a plain sleep (a script, an HTTP
// call): its duration is not readable, and is not guessed.
func templatePreStop(spec *corev1.PodSpec, svc *corev1.Service) (seconds int64, why string) {
	serving := servingContainers(spec, svc)
	first := true
	for _, c := range serving {
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
