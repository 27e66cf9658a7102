package collector

import (
	"errors"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// ciliumRead is what nodeprobe/ciliumsvc returns: a read that says it is Cilium's, with the families read.
type ciliumRead struct{ families []string }

func (c ciliumRead) HasFamily(string) bool { return len(c.families) > 0 }
func (c ciliumRead) Family(dataplane.ServicePort, string) dataplane.PortState {
	return dataplane.PortState{}
}
func (c ciliumRead) Info() dataplane.Info {
	return dataplane.Info{Kind: dataplane.KindCilium, Mode: "kube-proxy-replacement", Families: c.families,
		ReadAt: time.Unix(1700000000, 0), Duration: 3 * time.Millisecond, Watch: dataplane.WatchNone}
}

// On a Cilium node (scrape's TestCiliumDataplaneDecides decides the States) the read of Cilium's service table
// is rendered as the rules' read is: what it is, whether it succeeded. An agent that cannot be read says so in
// localtraffic_rules_read_success 0 and the rules collector's failure; no kube-proxy series either way.
func TestCiliumSeries(t *testing.T) {
	names := []string{"localtraffic_dataplane_info", "localtraffic_blackhole_source_info", "localtraffic_rules_info",
		"localtraffic_rules_read_success", "localtraffic_rules_supported", "localtraffic_rules_watch_state",
		"localtraffic_kube_proxy_up", "localtraffic_kube_proxy_programmed", "localtraffic_scrape_collector_success"}
	for _, c := range []struct {
		name string
		st   scrape.State
		want string
	}{
		{"read", scrape.State{Dataplane: scrape.DataplaneCilium, Source: verdict.SourceRules, RulesConfigured: true,
			Rules: ciliumRead{families: []string{dataplane.FamilyIPv4}}, KubeProxy: kubeProxyAnswer(nodeprobe.ResultRefused)}, `
localtraffic_blackhole_source_info{source="rules"} 1
localtraffic_dataplane_info{dataplane="cilium"} 1
localtraffic_rules_info{backend="",mode="kube-proxy-replacement"} 1
localtraffic_rules_read_success 1
localtraffic_rules_supported 1
localtraffic_rules_watch_state{state="none"} 1
localtraffic_rules_watch_state{state="notified"} 0
localtraffic_rules_watch_state{state="polled"} 0
` + everyCollectorOK},
		{"agent's socket absent", scrape.State{Dataplane: scrape.DataplaneCilium, Source: verdict.SourceAPI, RulesConfigured: true,
			Rules: ciliumRead{}, RulesErr: errors.New("reading Cilium's service table: the Cilium agent's socket /var/run/cilium/cilium.sock does not exist"),
			KubeProxy: kubeProxyAnswer(nodeprobe.ResultRefused)}, `
localtraffic_blackhole_source_info{source="api"} 1
localtraffic_dataplane_info{dataplane="cilium"} 1
localtraffic_rules_info{backend="",mode="kube-proxy-replacement"} 1
localtraffic_rules_read_success 0
localtraffic_rules_watch_state{state="none"} 1
localtraffic_rules_watch_state{state="notified"} 0
localtraffic_rules_watch_state{state="polled"} 0
localtraffic_scrape_collector_success{collector="announcers"} 1
localtraffic_scrape_collector_success{collector="arrivals"} 1
localtraffic_scrape_collector_success{collector="dataplane"} 1
localtraffic_scrape_collector_success{collector="exposure"} 1
localtraffic_scrape_collector_success{collector="informers"} 1
localtraffic_scrape_collector_success{collector="kube_proxy"} 1
localtraffic_scrape_collector_success{collector="node"} 1
localtraffic_scrape_collector_success{collector="rules"} 0
localtraffic_scrape_collector_success{collector="service_arrivals"} 1
localtraffic_scrape_collector_success{collector="service_details"} 1
localtraffic_scrape_collector_success{collector="service_exposure"} 1
localtraffic_scrape_collector_success{collector="services"} 1
localtraffic_scrape_collector_success{collector="state_file"} 1
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			st.Node = scrapetest.DualStackNode()
			st.Services = []*scrape.ServiceResult{checkoutResult(scrapetest.NodePortService(0), verdict.Verdict{Source: st.Source})}
			expectSeries(t, render(&st), c.want, names...)
		})
	}
}
