package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// Where the exporter's view of kube-proxy's configuration comes from is exported, one-hot (the scrape package's
// tests decide it: TestKubeProxyConfigState there).
func TestKubeProxyConfigStateOneHot(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, state := range scrape.ConfigStates {
		st := &scrape.State{KubeProxyConfigState: state, KubeProxy: scrape.KubeProxyState{Err: errors.New("no address to probe in this test")}}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewExporter(logger, fixedState{st}, NewKubeProxy()).Bind(context.Background()))
		var want strings.Builder
		for _, s := range scrape.ConfigStates {
			fmt.Fprintf(&want, "localtraffic_kube_proxy_config_state{state=%q} %d\n", s, map[bool]int{true: 1}[s == state])
		}
		expectSeries(t, reg, want.String(), "localtraffic_kube_proxy_config_state")
	}
}
