package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var stateFileState = detailed(newMetric("state_file_state", prometheus.GaugeValue,
	"The state of the exporter's state file, which says what this process started from, one-hot.",
	"state"),
	"The exporter's state file (--state.file), one-hot over restored, expired, new, corrupt, foreign, unreadable, write_failed and disabled: what this process started from (restored: arrival runs and dropped-since times carried over a restart), or write_failed while the latest write failed. Anything but restored after a restart means critical reasons wait for new arrivals and the grace window again.")

// StateFileCollector exports the state file's state.
type StateFileCollector struct{}

// NewStateFileCollector returns the state_file collector.
func NewStateFileCollector() *StateFileCollector { return &StateFileCollector{} }

func (*StateFileCollector) Name() string { return "state_file" }

func (*StateFileCollector) Metrics() []*Metric { return []*Metric{stateFileState} }

// Inputs: none gathered per scrape; the file is read once at start.
func (*StateFileCollector) Inputs() []scrape.Input { return nil }

func (*StateFileCollector) Update(st *scrape.State, out *Sink) error {
	for _, s := range scrape.StateFileStates {
		out.send(stateFileState, boolFloat(s == st.StateFile), s)
	}
	return nil
}
