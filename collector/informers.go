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

func (*Informers) Metrics() []*Metric { return []*Metric{informerSynced, informerLastEvent} }

func (i *Informers) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	for _, st := range i.src.Informers() {
		ch <- informerSynced.must(boolFloat(st.Synced), st.Resource)
		if !st.LastEvent.IsZero() {
			ch <- informerLastEvent.must(unixSeconds(st.LastEvent), st.Resource)
		}
	}
	return nil
}
