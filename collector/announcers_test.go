package collector

import (
	"testing"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// Each announcer source has one series on the node, with its current state, and only while the view reads
// announcers; a Service whose only layer 2 record is a lease nobody renews has its unannounced series, and
// an announced one has none.
func TestAnnouncersSeries(t *testing.T) {
	unannounced := scrapetest.LBService(scrapetest.Family(v4, 0, true))
	unannounced.Name, unannounced.LoadBalancerIPs = "cart", []string{"192.0.2.20"}
	unannounced.Announcements = []announce.Announcement{{Source: announce.SourceCiliumL2, Node: "node-3", Exclusive: true, Expired: true}}
	announced := scrapetest.LBService(scrapetest.Family(v4, 0, true))
	announced.LoadBalancerIPs = []string{"192.0.2.10"}
	announced.Announcements = []announce.Announcement{{Source: announce.SourceMetalLBL2, Node: "node-3", Exclusive: true}}
	snap := kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true}, Services: []kubeview.ServiceState{announced, unannounced},
		Announcers: map[announce.Source]announce.SourceState{
			announce.SourceMetalLBL2: announce.SourceOK, announce.SourceMetalLBBGP: announce.SourceForbidden,
			announce.SourceCiliumL2: announce.SourceOK, announce.SourceKubeVIP: announce.SourceAbsent,
			announce.SourceOpenELB: announce.SourceAbsent, announce.SourcePureLB: announce.SourceStale}}
	reg := scrapeSetup{view: &scrapetest.View{Snap: snap}}.scrape(t)
	expectSeries(t, reg, `
localtraffic_announcer_source_state{source="cilium_l2",state="ok"} 1
localtraffic_announcer_source_state{source="kube_vip",state="absent"} 1
localtraffic_announcer_source_state{source="metallb_bgp",state="forbidden"} 1
localtraffic_announcer_source_state{source="metallb_l2",state="ok"} 1
localtraffic_announcer_source_state{source="openelb",state="absent"} 1
localtraffic_announcer_source_state{source="purelb",state="stale"} 1
localtraffic_service_unannounced{namespace="kubelings",service="cart"} 1
`, "localtraffic_announcer_source_state", "localtraffic_service_unannounced")

	snap.Announcers = nil
	reg = scrapeSetup{view: &scrapetest.View{Snap: snap}}.scrape(t)
	expectSeries(t, reg, `localtraffic_service_unannounced{namespace="kubelings",service="cart"} 1`,
		"localtraffic_announcer_source_state", "localtraffic_service_unannounced")
}
