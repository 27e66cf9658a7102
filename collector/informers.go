package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	informerSynced = stable(newMetric("informer_synced", prometheus.GaugeValue,
		"1 when the informer for the resource has listed everything once.", "resource"))
	informerLastEvent = stable(newMetric("informer_last_event_timestamp_seconds", prometheus.GaugeValue,
		"When the informer last saw an add, update or delete of the resource (absent until the first). Age: time() minus this.",
		"resource"))
)

// Informers exports the health of the exporter's watches on the API.
type Informers struct{}

// NewInformers returns the informer self-metrics collector.
func NewInformers() *Informers { return &Informers{} }

func (*Informers) Name() string { return "informers" }

func (*Informers) Metrics() []*Metric { return []*Metric{informerSynced, informerLastEvent} }

func (*Informers) Inputs() []Input { return []Input{InputInformers} }

func (*Informers) Update(st *State, ch chan<- prometheus.Metric) error {
	for _, inf := range st.Informers {
		ch <- informerSynced.must(boolFloat(inf.Synced), inf.Resource)
		if !inf.LastEvent.IsZero() {
			ch <- informerLastEvent.must(unixSeconds(inf.LastEvent), inf.Resource)
		}
	}
	return nil
}
