package scrape

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// ciliumRead is a read of Cilium's service table (what nodeprobe/ciliumsvc returns), IPv4 only.
type ciliumRead map[dataplane.ServicePort]dataplane.PortState

func (c ciliumRead) HasFamily(f string) bool { return f == dataplane.FamilyIPv4 }
func (c ciliumRead) Family(sp dataplane.ServicePort, f string) dataplane.PortState {
	if f != dataplane.FamilyIPv4 {
		return dataplane.PortState{}
	}
	return c[sp]
}
func (c ciliumRead) Info() dataplane.Info {
	return dataplane.Info{Kind: dataplane.KindCilium, Mode: "kube-proxy-replacement", Families: []string{dataplane.FamilyIPv4},
		ReadAt: time.Unix(1700000000, 0), Watch: dataplane.WatchNone}
}

// On a Cilium node the verdict rests on what Cilium programmed. The API view says kubelings/checkout has a
// local endpoint; Cilium's table says whether its NodePort forwards there or drops. The same reads on a node
// taken for a replacement without Cilium's reader are judged from the API view alone; a failed read of
// Cilium's table leaves the API view the verdict's source, and says so.
func TestCiliumDataplaneDecides(t *testing.T) {
	svc := scrapetest.NodePortService(1)
	svc.Families[0].Ports[0].LocalAddrs = []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080")}
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{svc}}}
	sp := dataplane.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	drops := ciliumRead{sp: {Programmed: true, Drop: true, Drops: []dataplane.DropRule{{Port: 30090}}}}
	forwards := ciliumRead{sp: {Programmed: true, LocalEndpoints: 1, Endpoints: []dataplane.Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:8080")}}}}
	absent := &scrapetest.Reader{Snap: ciliumRead{}, Err: errors.New("the Cilium agent's socket /var/run/cilium/cilium.sock does not exist")}
	for _, tc := range []struct {
		name      string
		dataplane DataplaneKind
		reader    DataplaneReader
		want      string
		drops     bool
		mismatch  bool
	}{
		{"Cilium drops the NodePort", DataplaneCilium, &scrapetest.Reader{Snap: drops},
			"dataplane=cilium source=rules not_programmed=false rules_err=false", true, true},
		{"Cilium forwards to the local endpoint", DataplaneCilium, &scrapetest.Reader{Snap: forwards},
			"dataplane=cilium source=rules not_programmed=false rules_err=false", false, false},
		{"agent unreadable: the API view decides", DataplaneCilium, absent,
			"dataplane=cilium source=api not_programmed=false rules_err=true", false, false},
		{"control: a replacement without Cilium's reader", DataplaneReplacement, nil,
			"dataplane=replacement source=api not_programmed=false rules_err=false", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := gatherSetup{view: view, reader: tc.reader, dataplane: tc.dataplane, kubeProxy: scrapetest.RefusedKubeProxy(t)}.gather(t)
			if got := dataplaneOf(st); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
			r := resultOf(t, st, "checkout")
			if r.Verdict.Drops != tc.drops || r.Mismatch != tc.mismatch {
				t.Errorf("drops %v, mismatch %v (source %s); want drops %v, mismatch %v", r.Verdict.Drops, r.Mismatch, r.Verdict.Source, tc.drops, tc.mismatch)
			}
			if r.Verdict.Source != st.Source {
				t.Errorf("verdict from %s, the state's source %s", r.Verdict.Source, st.Source)
			}
		})
	}
}
