package collector

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The state file's state is one-hot over every state the scrape package knows.
func TestStateFileStateOneHot(t *testing.T) {
	for _, state := range scrape.StateFileStates {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewExporter(slog.New(slog.DiscardHandler), fixedState{&scrape.State{StateFile: state}}, NewStateFileCollector()).Bind(context.Background()))
		var want strings.Builder
		for _, s := range scrape.StateFileStates {
			fmt.Fprintf(&want, "localtraffic_state_file_state{state=%q} %d\n", s, map[bool]int{true: 1}[s == state])
		}
		expectSeries(t, reg, want.String(), "localtraffic_state_file_state")
	}
}
