package placement

import "github.com/localtraffic/localtraffic-exporter/verdict"

// Observed is what the exporters on the nodes report, as far as the plugin could read them: per node, the
// blackhole reasons of its Services. The API alone cannot say
// whether traffic really reaches a node (docs/rotation.md); the exporter on the node can.
type Observed map[string]NodeObserved

// NodeObserved is one node's exporter's report.
type NodeObserved struct {
	// Reasons maps "namespace/service" to localtraffic_blackhole_reason's reason for the Services the node
	// blackholes; a Service absent is not blackholed there.
	Reasons map[string]string
	// Drains maps "namespace/service" to the node's histogram of the Service's measured drain
	// (localtraffic_service_lb_drain_seconds, read by --from-exporters): absent where it has no episode or the
	// exporter does not run the service_exposure collector.
	Drains map[string][]Bucket
}

// Bucket is one cumulative histogram bucket: the observations at or below UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Observation is what a node's exporter reports of one Service (NodeStatus.Observed): the reason of its
// blackhole (localtraffic_blackhole_reason's reason), or ObservedNoBlackhole.
type Observation string

// ObservedNoBlackhole: the node's exporter reports no blackhole for the Service.
const ObservedNoBlackhole Observation = "no_blackhole"

// ObservedBlackholes lists the Observations of a blackhole, strongest reason first (verdict.Reasons).
func ObservedBlackholes() []Observation {
	out := make([]Observation, len(verdict.Reasons))
	for i, r := range verdict.Reasons {
		out[i] = Observation(r)
	}
	return out
}
