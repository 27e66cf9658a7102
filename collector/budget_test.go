package collector

import (
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The series budget (docs/metrics.md "Series budget"): with the default collectors a single-port,
// single-family Local Service costs at most 4 series per node as a NodePort Service and 6 as a LoadBalancer
// Service, in every state the node can be in: serving, blackholing, drained, with or without rules. Every
// figure multiplies by the node count, so this is the test that keeps a 5,000-node cluster's Prometheus sane.
// A node that blackholes the Service has one more, localtraffic_blackhole_reason (what the page's severity
// follows): it exists only while localtraffic_blackhole is 1, on the few nodes an alert fires for.
func TestSeriesBudget(t *testing.T) {
	const nodePortBudget, loadBalancerBudget, whileBlackholing = 4, 6, 1
	sp := kernelrules.ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	snapshot := func(st kernelrules.PortState) *kernelrules.Snapshot {
		return kernelrules.NewSnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, []string{kernelrules.FamilyIPv4}, time.Unix(1700000000, 0),
			map[kernelrules.ServicePort]kernelrules.PortState{sp: st})
	}
	dropping := snapshot(kernelrules.PortState{Programmed: true, Drop: true, DropPackets: 12,
		Drops: []kernelrules.DropRule{{Port: 30090, Packets: 12, Counted: true}}})
	serving := snapshot(kernelrules.PortState{Programmed: true, LocalEndpoints: 1})
	node := kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}
	lb := func(hcnp int32, local int) kubeview.Snapshot {
		svc := scrapetest.LBService(scrapetest.Family(v4, local, true))
		svc.HealthCheckNodePort = hcnp
		return kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{svc}}
	}
	nodePort := func(local int) kubeview.Snapshot {
		return kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{scrapetest.NodePortService(local)}}
	}
	// An ignored Service (docs/metrics.md): one series more, localtraffic_service_ignored_info, and only for
	// the Services a cluster owner marked.
	ignored := func(v kubeview.Snapshot) kubeview.Snapshot {
		v.Services[0].Ignored, v.Services[0].IgnoredReason = true, "pinned on purpose"
		return v
	}
	healthy := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 200, Local: 1}, scrapetest.HealthAnswer{Status: 200, Local: 1})
	draining := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{Status: 503, Local: 0}, scrapetest.HealthAnswer{Status: 503, Local: 0})
	refused := scrapetest.DualStackHealthCheck(t, scrapetest.HealthAnswer{}, scrapetest.HealthAnswer{})

	cases := []struct {
		name   string
		budget int
		view   kubeview.Snapshot
		reader scrape.DataplaneReader // nil: --rules.mode=none
	}{
		{"NodePort serving", nodePortBudget, nodePort(1), &scrapetest.Reader{Snap: serving}},
		{"NodePort blackhole", nodePortBudget + whileBlackholing, nodePort(0), &scrapetest.Reader{Snap: dropping}},
		{"NodePort without rules", nodePortBudget + whileBlackholing, nodePort(0), nil},
		{"LoadBalancer serving", loadBalancerBudget, lb(healthy, 1), &scrapetest.Reader{Snap: serving}},
		{"LoadBalancer drained, dropping", loadBalancerBudget, lb(draining, 0), &scrapetest.Reader{Snap: dropping}},
		{"LoadBalancer kube-proxy down", loadBalancerBudget, lb(refused, 0), &scrapetest.Reader{Snap: dropping}},
		{"LoadBalancer without rules", loadBalancerBudget, lb(healthy, 1), nil},
		{"NodePort ignored, blackhole", nodePortBudget + whileBlackholing + 1, ignored(nodePort(0)), &scrapetest.Reader{Snap: dropping}},
		{"LoadBalancer ignored, drained", loadBalancerBudget + 1, ignored(lb(draining, 0)), &scrapetest.Reader{Snap: dropping}},
	}
	def, all := DefaultSelection(), allSelection()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setup := scrapeSetup{view: &scrapetest.View{Snap: c.view}, reader: c.reader, addrs: scrapetest.Addrs{"127.0.0.1"}, selection: &def}
			got := serviceSeries(t, setup.scrape(t))
			setup.selection = &all
			everything := serviceSeries(t, setup.scrape(t))
			t.Logf("%d series by default (budget %d), %d with every collector and per-port series on", len(got), c.budget, len(everything))
			if len(got) > c.budget {
				t.Errorf("%d series per node for one Service, budget %d: %v", len(got), c.budget, got)
			}
			// The verdict's contract stays in the defaults.
			for _, name := range []string{"localtraffic_blackhole", "localtraffic_in_rotation", "localtraffic_local_endpoints"} {
				if !contains(got, name) {
					t.Errorf("%s missing from the defaults: %v", name, got)
				}
			}
			if ign := contains(got, "localtraffic_service_ignored_info"); ign != c.view.Services[0].Ignored {
				t.Errorf("localtraffic_service_ignored_info exported: %v, want %v (%v)", ign, c.view.Services[0].Ignored, got)
			}
			if c.view.Services[0].HealthCheckNodePort != 0 && !contains(got, "localtraffic_health_check_up") {
				t.Errorf("localtraffic_health_check_up missing from the defaults: %v", got)
			}
		})
	}
}

// serviceSeries lists the metric name of every series of reg that carries a service label.
func serviceSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "service" {
					out = append(out, mf.GetName())
				}
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
