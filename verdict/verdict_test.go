package verdict

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

func lbService(local4, ready4 int, ext ...string) kubeview.ServiceState {
	return kubeview.ServiceState{Namespace: "shop", Name: "web", Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: 32000,
		LoadBalancerIPs: []string{"192.0.2.10"}, ExternalIPs: ext,
		Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol, LocalEndpoints: local4, LocalReadyEndpoints: ready4,
			Ports: []kubeview.PortEndpoints{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090, Local: local4, ClusterWide: true}}}}}
}

// Without node evidence (the plugin) the health check's answer is the one kube-proxy gives from the API's
// count, and an externalIP's rotation is Unknown; with evidence (the exporter) nothing is Unknown.
func TestDecideWithoutEvidence(t *testing.T) {
	ready := kubeview.NodeState{Name: "n", Found: true}
	cases := []struct {
		name       string
		in         Input
		blackhole  bool
		inRotation bool
		cannotTell bool
	}{
		{"LB with a ready local endpoint: the check would answer 200", Input{Service: lbService(1, 1), Node: ready}, false, true, false},
		{"LB without one: the check would answer 503, drained", Input{Service: lbService(0, 0), Node: ready}, false, false, false},
		{"LB, serving-terminating only: forwards, drained by its 503", Input{Service: lbService(1, 0), Node: ready}, false, false, false},
		{"externalIP dropped: cannot tell", Input{Service: lbService(0, 0, "198.51.100.7"), Node: ready}, false, false, true},
		{"externalIP with evidence that nothing arrives: out", Input{Service: lbService(0, 0, "198.51.100.7"), Node: ready,
			Evidence: &Evidence{HealthChecks: map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: 503, Result: "unavailable"}}}},
			false, false, false},
		{"externalIP with arrivals: blackhole", Input{Service: lbService(0, 0, "198.51.100.7"), Node: ready,
			Evidence: &Evidence{Arrivals: arrivals{"198.51.100.7": true}}}, true, true, false},
		{"a blackhole known from the API is no cannot-tell", Input{Service: func() kubeview.ServiceState {
			s := lbService(0, 0, "198.51.100.7")
			s.Type, s.HealthCheckNodePort = corev1.ServiceTypeNodePort, 0
			return s
		}(), Node: ready}, true, true, false},
		{"virtual node: out, whatever the evidence", Input{Service: lbService(0, 0, "198.51.100.7"), Node: kubeview.NodeState{Found: true, Virtual: true},
			Evidence: &Evidence{Arrivals: arrivals{"198.51.100.7": true}}}, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.Blackhole != c.blackhole || v.InRotation != c.inRotation || v.CannotTell != c.cannotTell {
				t.Errorf("blackhole %v in rotation %v cannot tell %v, want %v %v %v\n%+v", v.Blackhole, v.InRotation, v.CannotTell,
					c.blackhole, c.inRotation, c.cannotTell, v.Families)
			}
			if c.cannotTell {
				if e := v.CannotTellEntries(); len(e) != 1 || e[0].Kind != ExternalIP || e[0].String() != "externalIP 198.51.100.7:80/TCP" {
					t.Errorf("cannot-tell entries %+v", e)
				}
			}
		})
	}
}

type arrivals map[string]bool

func (a arrivals) Arriving(d Destination) (string, bool) { return "seen", a[d.Address] }

func TestDestinationString(t *testing.T) {
	for d, want := range map[Destination]string{
		{Kind: NodePort, DestPort: 30090, Protocol: corev1.ProtocolUDP}:                             "NodePort 30090/UDP",
		{Kind: LoadBalancerIP, Address: "2001:db8::1", DestPort: 443, Protocol: corev1.ProtocolTCP}: "load balancer IP [2001:db8::1]:443/TCP",
		{Kind: ExternalIP, Address: "192.0.2.70", DestPort: 80, Protocol: corev1.ProtocolTCP}:       "externalIP 192.0.2.70:80/TCP",
	} {
		if got := d.String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

// CannotTellEntries lists the dropped entries whose rotation is Unknown.
func (v Verdict) CannotTellEntries() []Entry {
	var out []Entry
	for _, f := range v.Families {
		for _, e := range f.Entries {
			if e.Dropped && e.Rotation == Unknown {
				out = append(out, e)
			}
		}
	}
	return out
}
