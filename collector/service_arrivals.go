package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

var serviceArrivals = detailed(newMetric("service_arrivals_total", prometheus.CounterValue,
	"New external connection attempts that reached this node for the Service, by destination kind and IP family.",
	"namespace", "service", "kind", "ip_family"),
	"New external connection attempts that reached this node for the Service, by destination kind and IP family (arrivals meter; counted since the destination was first watched, carried over an exporter restart while its run is in the state file).")

// ServiceArrivals exports each Local Service's arrivals by destination kind and family.
type ServiceArrivals struct{}

// NewServiceArrivals returns the service_arrivals collector.
func NewServiceArrivals() *ServiceArrivals { return &ServiceArrivals{} }

func (*ServiceArrivals) Name() string { return "service_arrivals" }

func (*ServiceArrivals) Metrics() []*Metric { return []*Metric{serviceArrivals} }

func (*ServiceArrivals) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputAPI, scrape.InputArrivals}
}

func (*ServiceArrivals) Update(st *scrape.State, out *Sink) error {
	if st.APIErr != nil {
		return st.APIErr
	}
	snap := st.Arrivals.Snapshot
	if snap == nil || snap.Status != arrivals.StatusOK {
		return nil // arrivals_meter_state says why
	}
	type key struct{ kind, family string }
	for _, r := range st.Services {
		sums := map[key]uint64{}
		for _, fam := range r.Service.Families {
			scrape.Destinations(r.Service, fam, func(d verdict.Destination) {
				ad, ok := scrape.MeterDest(d)
				if !ok {
					return
				}
				k := key{string(d.Kind), string(d.Family)}
				c, _ := snap.Dest(ad)
				sums[k] += c.Attempts
			})
		}
		for k, n := range sums {
			out.send(serviceArrivals, float64(n), r.Service.Namespace, r.Service.Name, k.kind, k.family)
		}
	}
	return nil
}
