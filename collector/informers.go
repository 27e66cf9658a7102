package collector

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

var (
	informerSynced = stable(newMetric("informer_synced", prometheus.GaugeValue,
		"1 when the informer for the resource has listed everything once.", "resource"))
	informerLastEvent = stable(newMetric("informer_last_event_timestamp_seconds", prometheus.GaugeValue,
		"When the informer last saw an add, update or delete of the resource (absent until the first). Age: time() minus this.",
		"resource"))
	informerLastSuccess = stable(newMetric("informer_last_success_timestamp_seconds", prometheus.GaugeValue,
		"When the API server last answered the informer for the resource: a successful list, a watch opened, or a watch event, bookmarks included (absent until the first). time() minus this is the age of the exporter's API view; it grows while the API server is unreachable, and the last known state keeps being served meanwhile.",
		"resource"))
	informerList = newMetric("informer_list_total", prometheus.CounterValue,
		"Lists of the resource the informer made, by result (success, error). Counts start at 0 when the exporter starts.",
		"resource", "result")
	informerWatch = newMetric("informer_watch_total", prometheus.CounterValue,
		"Watches of the resource the informer opened, by result (success, error). Counts start at 0 when the exporter starts.",
		"resource", "result")
)

// InformerSource reports the state of the exporter's informers.
type InformerSource interface {
	Informers() []kubeview.InformerStatus
}

// Informers exports the health of the exporter's watches on the API.
type Informers struct{ src InformerSource }

// NewInformers returns the informer self-metrics collector.
func NewInformers(src InformerSource) *Informers { return &Informers{src: src} }

func (*Informers) Name() string { return "informers" }

func (*Informers) Metrics() []*Metric {
	return []*Metric{informerSynced, informerLastEvent, informerLastSuccess, informerList, informerWatch}
}

func (i *Informers) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	for _, st := range i.src.Informers() {
		ch <- informerSynced.must(boolFloat(st.Synced), st.Resource)
		if !st.LastEvent.IsZero() {
			ch <- informerLastEvent.must(unixSeconds(st.LastEvent), st.Resource)
		}
		if !st.LastSuccess.IsZero() {
			ch <- informerLastSuccess.must(unixSeconds(st.LastSuccess), st.Resource)
		}
		// Both results from the start, so that rate() and increase() see the first error.
		ch <- informerList.must(float64(st.ListSuccess), st.Resource, "success")
		ch <- informerList.must(float64(st.ListError), st.Resource, "error")
		ch <- informerWatch.must(float64(st.WatchSuccess), st.Resource, "success")
		ch <- informerWatch.must(float64(st.WatchError), st.Resource, "error")
	}
	return nil
}
