package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/exposure"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	exposureSeconds = detailed(newMetric("exposure_seconds_total", prometheus.CounterValue,
		"Seconds this node dropped new connections of Local Services while they were still sent to it, by cause.",
		"cause"),
		"Seconds of exposure episodes (docs/exposure.md): this node dropped a Local Service's new connections at a destination (NodePort, load balancer IP, externalIP; per family) that was still sent them, summed over destinations, by cause: drain (the Node cordoned), node_deleting (the Node being deleted), rollout (a local endpoint terminating and no longer serving while the family has ready endpoints elsewhere), node_join (kube-proxy's first rules on the node dropped it), other. With the arrivals meter, an episode's seconds run from the drop to its last lost attempt; without it, for as long as the verdict kept the destination in rotation. Carried over a restart by the state file.")
	exposureAttempts = detailed(newMetric("exposure_attempts_total", prometheus.CounterValue,
		"Distinct new connection attempts this node dropped in exposure episodes, by cause.",
		"cause"),
		"Distinct new connection attempts (SYN retransmissions not counted again) the arrivals meter saw arrive at destinations in exposure episodes, by cause as for localtraffic_exposure_seconds_total. Holds still while localtraffic_exposure_attempts_counted is 0 (the meter off or blind): not counted, never none lost. Carried over a restart by the state file.")
	exposureEpisodeSeconds = detailed(newHistogram("exposure_episode_seconds",
		"How long the ended exposure episodes of this node lasted.", exposure.Buckets),
		"How long each ended exposure episode lasted, as localtraffic_exposure_seconds_total counted it (an episode in which nothing arrived counts 0 with the meter): buckets from 1 s to 10 min.")
	exposureAttemptsCounted = detailed(newMetric("exposure_attempts_counted", prometheus.GaugeValue,
		"1 when the arrivals meter counts the attempts exposure episodes lose; 0: only their seconds are counted."),
		"1 when the arrivals meter counts the attempts exposure episodes lose (it runs and sees); 0 when it is off or blind: episodes then come from kube-proxy's rules and the API view alone and count seconds only.")
	exposureOpen = newMetric("exposure_episodes_open", prometheus.GaugeValue,
		"Exposure episodes under way on this node.")
	lbDrainSeconds = detailed(newHistogram("lb_drain_seconds",
		"How long load balancers kept sending new connections after the health check node port first answered 503.", exposure.DrainBuckets),
		"The load balancer's measured reaction (docs/exposure.md, \"The load balancer's drain\"): per ended exposure episode at a LoadBalancer Service whose health check node port a checker probes, the time from the port's first 503 (no ready local endpoint in kube-proxy's view) to the last new client attempt the arrivals meter saw arrive at the destination. Observed only where the meter counted the destination throughout and a checker's probes arrived at the port after the 503: never guessed. Buckets from 1 s to 5 min; carried over a restart by the state file.")
)

// Exposure exports what the exposure recorder counted: the seconds and connection attempts this node lost in
// exposure episodes, by cause, and how long the episodes lasted. Node-level series only: a Service's part is
// not exported (the series budget).
type Exposure struct{}

// NewExposure returns the exposure collector.
func NewExposure() *Exposure { return &Exposure{} }

func (*Exposure) Name() string { return "exposure" }

func (*Exposure) Metrics() []*Metric {
	return []*Metric{exposureSeconds, exposureAttempts, exposureEpisodeSeconds, exposureAttemptsCounted, exposureOpen, lbDrainSeconds}
}

func (*Exposure) Inputs() []scrape.Input { return nil }

// Update renders the model's recorder. A State outside the node model has none: nothing is sent then.
func (*Exposure) Update(st *scrape.State, out *Sink) error {
	x := st.Exposure
	if x == nil {
		return nil
	}
	for _, c := range exposure.Causes {
		t := x.Totals[c]
		out.send(exposureSeconds, t.Seconds, string(c))
		out.send(exposureAttempts, float64(t.Attempts), string(c))
	}
	out.histogram(exposureEpisodeSeconds, x.Episodes.Count, x.Episodes.Sum, x.Episodes.Cumulative())
	out.send(exposureAttemptsCounted, boolFloat(x.AttemptsCounted))
	out.send(exposureOpen, float64(x.Open))
	out.histogram(lbDrainSeconds, x.Drains.Count, x.Drains.Sum, x.Drains.CumulativeOf(exposure.DrainBuckets))
	return nil
}
