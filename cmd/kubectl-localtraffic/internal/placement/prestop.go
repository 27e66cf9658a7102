package placement

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/internal/prestop"
)

// PreStopMarginSeconds is what the recommended preStop sleep adds to the measured drain (prestop.MarginSeconds).
const PreStopMarginSeconds = prestop.MarginSeconds

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
		need := prestop.NeedSeconds(d.P95Seconds)
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
	out := WorkloadPreStop{Kind: w.Kind, Name: w.Name, GraceSeconds: prestop.Grace(spec)}
	delay, why := prestop.Spec(spec, svc)
	if why != "" {
		out.Needed, out.PreStopUnknown = "unknown", why
		return out
	}
	out.PreStopSeconds = &delay
	needed, grace := prestop.Recommend(delay, out.GraceSeconds, need)
	if !needed {
		out.Needed = "no"
		return out
	}
	out.Needed, out.RecommendedPreStopSeconds, out.RecommendedGraceSeconds = "yes", need, grace
	return out
}
