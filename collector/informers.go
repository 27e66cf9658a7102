package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	informerSynced = stable(newMetric("informer_synced", prometheus.GaugeValue,
		"1 when the informer for the resource has listed everything once.", "resource"))
	informerLastEvent = stable(detailed(newMetric("informer_last_event_timestamp_seconds", prometheus.GaugeValue,
		"When the informer last saw an add, update or delete of the resource.",
		"resource"),
		"When the informer last saw an add, update or delete of the resource (absent until the first). Age: time() minus this."))
	informerLastSuccess = stable(detailed(newMetric("informer_last_success_timestamp_seconds", prometheus.GaugeValue,
		"When the API server last answered the informer for the resource.",
		"resource"),
		"When the API server last answered the informer for the resource: a successful list, a watch opened, or a watch event, bookmarks included (absent until the first). time() minus this is the age of the exporter's API view; it grows while the API server is unreachable, and the last known state keeps being served meanwhile."))
	informerList = detailed(newMetric("informer_list_total", prometheus.CounterValue,
		"Lists of the resource the informer made, by result.",
		"resource", "result"),
		"Lists of the resource the informer made, by result (success, error). Counts start at 0 when the exporter starts.")
	informerWatch = detailed(newMetric("informer_watch_total", prometheus.CounterValue,
		"Watches of the resource the informer opened, by result.",
		"resource", "result"),
		"Watches of the resource the informer opened, by result (success, error). Counts start at 0 when the exporter starts.")
)

// callResult is how a list or watch of the API ended (the informer counters' result label).
type callResult string

const (
	callSuccess callResult = "success"
	callError   callResult = "error"
)

// Informers exports the health of the exporter's watches on the API.
type Informers struct{}

// NewInformers returns the informer self-metrics collector.
func NewInformers() *Informers { return &Informers{} }

func (*Informers) Name() string { return "informers" }

func (*Informers) Metrics() []*Metric {
	return []*Metric{informerSynced, informerLastEvent, informerLastSuccess, informerList, informerWatch}
}

func (*Informers) Inputs() []scrape.Input { return []scrape.Input{scrape.InputInformers} }

func (*Informers) Update(st *scrape.State, out *Sink) error {
	for _, inf := range st.Informers {
		out.send(informerSynced, boolFloat(inf.Synced), inf.Resource)
		if !inf.LastEvent.IsZero() {
			out.send(informerLastEvent, unixSeconds(inf.LastEvent), inf.Resource)
		}
		if !inf.LastSuccess.IsZero() {
			out.send(informerLastSuccess, unixSeconds(inf.LastSuccess), inf.Resource)
		}
		// Both results from the start, so that rate() and increase() see the first error.
		out.send(informerList, float64(inf.ListSuccess), inf.Resource, string(callSuccess))
		out.send(informerList, float64(inf.ListError), inf.Resource, string(callError))
		out.send(informerWatch, float64(inf.WatchSuccess), inf.Resource, string(callSuccess))
		out.send(informerWatch, float64(inf.WatchError), inf.Resource, string(callError))
	}
	return nil
}
