package collector

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

type fakeRules map[string]bool // "ns/name:port" -> drop

func (f fakeRules) PortDrop(ns, name, port string, _ corev1.Protocol) (bool, bool) {
	drop, ok := f[ns+"/"+name+":"+port]
	return drop, ok
}

func TestDecide(t *testing.T) {
	nodePort := func(local int, clusterWide bool) kubeview.ServiceState {
		return kubeview.ServiceState{Namespace: "kubelings", Name: "checkout", Type: corev1.ServiceTypeNodePort,
			Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol,
				Ports: []kubeview.PortEndpoints{{Name: "http", Protocol: corev1.ProtocolTCP, NodePort: 30090, Local: local, ClusterWide: clusterWide}}}}}
	}
	lb := func(local int) kubeview.ServiceState {
		s := nodePort(local, true)
		s.Type, s.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
		return s
	}
	hc := func(status int) *nodeprobe.HealthCheck { return &nodeprobe.HealthCheck{StatusCode: status} }
	ready := kubeview.NodeState{Name: "node-1", Found: true}
	excluded := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true}
	deleting := kubeview.NodeState{Name: "node-1", Found: true, Deleting: true}
	toBeDeleted := kubeview.NodeState{Name: "node-1", Found: true, ToBeDeleted: true}

	cases := []struct {
		name  string
		svc   kubeview.ServiceState
		node  kubeview.NodeState
		hc    *nodeprobe.HealthCheck
		rules RuleView
		want  Verdict
	}{
		{"nodeport with a local endpoint serves", nodePort(1, true), ready, nil, nil,
			Verdict{InRotation: true, Source: SourceAPI}},
		{"nodeport without one is a blackhole", nodePort(0, true), ready, nil, nil,
			Verdict{InRotation: true, Drops: true, Blackhole: true, Source: SourceAPI}},
		{"no endpoint anywhere is an outage, not a blackhole", nodePort(0, false), ready, nil, nil,
			Verdict{InRotation: true, Source: SourceAPI}},
		{"excluded node drops but receives nothing", nodePort(0, true), excluded, nil, nil,
			Verdict{Drops: true, Source: SourceAPI}},
		{"deleting node is out of nodeport rotation", nodePort(0, true), deleting, nil, nil,
			Verdict{Drops: true, Source: SourceAPI}},
		{"autoscaler-tainted node is out of nodeport rotation", nodePort(0, true), toBeDeleted, nil, nil,
			Verdict{Drops: true, Source: SourceAPI}},
		{"LB answering 503 is drained: working as designed", lb(0), ready, hc(503), nil,
			Verdict{Drops: true, Source: SourceAPI}},
		{"LB answering 200 while dropping is a blackhole", lb(0), ready, hc(200), nil,
			Verdict{InRotation: true, Drops: true, Blackhole: true, Source: SourceAPI}},
		{"LB health check unreachable while dropping is a blackhole", lb(0), ready, hc(0), nil,
			Verdict{InRotation: true, Drops: true, Blackhole: true, Source: SourceAPI}},
		{"LB health check answering 500 is drained", lb(0), ready, hc(500), nil,
			Verdict{Drops: true, Source: SourceAPI}},
		{"LB node being deleted stays in rotation: the health check ignores eligibility", lb(0), deleting, hc(200), nil,
			Verdict{InRotation: true, Drops: true, Blackhole: true, Source: SourceAPI}},
		{"rules decide when read: API says local, rules drop (stale sync)", nodePort(1, true), ready, nil,
			fakeRules{"kubelings/checkout:http": true},
			Verdict{InRotation: true, Drops: true, Blackhole: true, Source: SourceRules}},
		{"rules decide when read: API says none, rules forward", nodePort(0, true), ready, nil,
			fakeRules{"kubelings/checkout:http": false},
			Verdict{InRotation: true, Source: SourceRules}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Decide(c.svc, c.node, c.hc, c.rules); got != c.want {
				t.Errorf("Decide = %+v, want %+v", got, c.want)
			}
		})
	}
}

// A multi-port Service blackholes when any port drops.
func TestDecideMultiPort(t *testing.T) {
	svc := kubeview.ServiceState{Namespace: "dns", Name: "resolver", Type: corev1.ServiceTypeNodePort,
		Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol, Ports: []kubeview.PortEndpoints{
			{Name: "dns", Protocol: corev1.ProtocolUDP, NodePort: 30053, Local: 1, ClusterWide: true},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, NodePort: 30054, Local: 0, ClusterWide: true},
		}}}}
	if v := Decide(svc, kubeview.NodeState{Found: true}, nil, nil); !v.Blackhole {
		t.Errorf("one port without a local endpoint: %+v", v)
	}
}

// A LoadBalancer Service without NodePorts (allocateLoadBalancerNodePorts false) and no ingress IP yet: no
// external traffic can reach the node, so nothing is dropped.
func TestDecideUnreachablePort(t *testing.T) {
	svc := kubeview.ServiceState{Namespace: "shop", Name: "pending", Type: corev1.ServiceTypeLoadBalancer,
		Families: []kubeview.FamilyEndpoints{{Family: corev1.IPv4Protocol,
			Ports: []kubeview.PortEndpoints{{Name: "http", Protocol: corev1.ProtocolTCP, Local: 0, ClusterWide: true}}}}}
	if v := Decide(svc, kubeview.NodeState{Found: true}, nil, nil); v.Drops {
		t.Errorf("no NodePort, no address: %+v", v)
	}
	svc.LoadBalancerIPs = []string{"192.0.2.10"}
	if v := Decide(svc, kubeview.NodeState{Found: true}, nil, nil); !v.Drops {
		t.Errorf("with an ingress IP the port is reachable and drops: %+v", v)
	}
}
