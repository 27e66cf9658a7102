package verdict

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// seen is a meter's view: per destination kind, the arrivals. Anything absent is watched and silent.
type seen map[Kind]Observation

func (s seen) Observe(d Destination) Observation {
	if o, ok := s[d.Kind]; ok {
		return o
	}
	return Observation{Watched: true}
}

// blind is a meter that cannot see (permission denied).
type blind struct{}

func (blind) Observe(Destination) Observation { return Observation{} }

type addrs struct {
	assigned  map[string]bool
	nodePorts map[corev1.IPFamily]bool
}

func (a addrs) Assigned(addr string) bool        { return a.assigned[addr] }
func (a addrs) NodePorts(f corev1.IPFamily) bool { return a.nodePorts[f] }
func withNodePorts(assigned ...string) addrs {
	a := addrs{assigned: map[string]bool{}, nodePorts: map[corev1.IPFamily]bool{corev1.IPv4Protocol: true}}
	for _, x := range assigned {
		a.assigned[x] = true
	}
	return a
}

// TestRotationFromEvidence: rotation is declared OR observed, and a blackhole's reason follows the evidence
// (docs/rotation.md). now is the scrape; the node has dropped since 10 minutes before it.
func TestRotationFromEvidence(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	grace := 2 * time.Minute
	droppedSince := now.Add(-10 * time.Minute)
	// Attempts arriving for the last 5 minutes, the latest a second ago.
	arriving := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: droppedSince}
	// A load balancer that honoured the health check: it kept sending for 30 s after the drop, then stopped.
	deregistered := Observation{Watched: true, Attempts: 40, ActiveSince: now.Add(-3 * time.Hour), LastSeen: now.Add(-90 * time.Second),
		Ongoing: true, DroppedSince: now.Add(-2 * time.Minute)}
	deregistered.DroppedSince = deregistered.LastSeen.Add(-30 * time.Second)
	hc := func(code int) map[corev1.IPFamily]HealthCheck {
		r := "ok"
		if code != http.StatusOK {
			r = "unavailable"
		}
		return map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: code, Result: r}}
	}
	ev := func(checks map[corev1.IPFamily]HealthCheck, a Addresses, o Observed) *Evidence {
		return &Evidence{HealthChecks: checks, Addresses: a, Observed: o, Grace: grace, Now: now}
	}
	nodePort := lbService(0, 0)
	nodePort.Type, nodePort.HealthCheckNodePort, nodePort.LoadBalancerIPs = corev1.ServiceTypeNodePort, 0, nil
	trafficPort := lbService(0, 0)
	trafficPort.LBCheck = announce.LBCheckTrafficPort
	withExt := lbService(0, 0, "198.51.100.7")
	withExt.Type, withExt.HealthCheckNodePort, withExt.LoadBalancerIPs = corev1.ServiceTypeClusterIP, 0, nil
	withExt.Families[0].Ports[0].NodePort = 0
	ready := kubeview.NodeState{Name: "n", Found: true}
	excluded := kubeview.NodeState{Name: "n", Found: true, Excluded: true}

	cases := []struct {
		name      string
		in        Input
		blackhole bool
		reason    Reason
	}{
		{"LB answering 503, the router keeps sending past grace: the load balancer ignores the health check",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: arriving})},
			true, ReasonHealthCheckIgnored},
		{"UDP, LB answering 503, only flows that began before the drop keep arriving: pinned flows, not an ignored check",
			Input{Service: udpService(), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: func() Observation {
				o := arriving
				o.LastNewFlow = droppedSince.Add(-time.Minute)
				return o
			}()})},
			true, ReasonUDPFlowPinned},
		{"UDP, LB answering 503, a flow began after the drop: the load balancer ignores the health check",
			Input{Service: udpService(), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: func() Observation {
				o := arriving
				o.LastNewFlow = droppedSince.Add(time.Minute)
				return o
			}()})},
			true, ReasonHealthCheckIgnored},
		{"TCP knows no pinned flows: every SYN is a new connection the load balancer chose to send",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: func() Observation {
				o := arriving
				o.LastNewFlow = droppedSince.Add(-time.Minute)
				return o
			}()})},
			true, ReasonHealthCheckIgnored},
		{"LB that deregistered the node within grace: drained, no blackhole ever",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: deregistered, LoadBalancerIP: deregistered})},
			false, ""},
		{"arrivals that began before the drop count from the drop",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: func() Observation {
				o := arriving
				o.ActiveSince, o.DroppedSince = now.Add(-time.Hour), now.Add(-time.Minute)
				return o
			}()})},
			false, ""},
		{"the first scrape that finds it dropped is no evidence yet",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: func() Observation {
				o := arriving
				o.DroppedSince = time.Time{}
				return o
			}()})},
			false, ""},
		{"a traffic-port health checker's SYNs at the NodePort are health checks: no page, however long",
			Input{Service: trafficPort, Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{NodePort: arriving})},
			false, ""},
		{"LB IP held on this node's interface: in rotation whatever the health check, nothing arrived yet",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts("192.0.2.10"), seen{})},
			true, ReasonNoTrafficSeen},
		{"LB IP held here and clients arriving: traffic lost",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts("192.0.2.10"), seen{LoadBalancerIP: arriving})},
			true, ReasonTrafficLost},
		{"LB IP only on a dummy (kube-ipvs0): not assigned, out",
			Input{Service: lbService(0, 0), Node: ready, Evidence: ev(hc(503), withNodePorts(), seen{})},
			false, ""},
		{"health check 200 with a second port dropped: declared by its own answer",
			Input{Service: func() kubeview.ServiceState {
				s := lbService(1, 1)
				s.Families[0].Ports = append(s.Families[0].Ports, kubeview.PortEndpoints{Name: "admin", Protocol: corev1.ProtocolTCP,
					Port: 9000, NodePort: 30091, ClusterWide: true})
				return s
			}(), Node: ready, Evidence: ev(hc(200), withNodePorts(), seen{})},
			true, ReasonHealthCheckPassing},
		{"NodePort nobody uses on this node: a warning",
			Input{Service: nodePort, Node: ready, Evidence: ev(nil, withNodePorts(), seen{})}, true, ReasonNoTrafficSeen},
		{"NodePort with clients: critical",
			Input{Service: nodePort, Node: ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: arriving})}, true, ReasonTrafficLost},
		{"NodePort, meter blind: declared, not observed",
			Input{Service: nodePort, Node: ready, Evidence: ev(nil, withNodePorts(), blind{})}, true, ReasonNotObserved},
		{"NodePort on a node without a NodePort address: out",
			Input{Service: nodePort, Node: ready, Evidence: ev(nil, addrs{}, seen{})}, false, ""},
		{"exclude label, NodePort clients keep using the node: judged by arrivals",
			Input{Service: nodePort, Node: excluded, Evidence: ev(nil, withNodePorts(), seen{NodePort: arriving})}, true, ReasonTrafficLost},
		{"exclude label, nobody sends: out",
			Input{Service: nodePort, Node: excluded, Evidence: ev(nil, withNodePorts(), seen{})}, false, ""},
		{"externalIP routed here (arrivals), not assigned: in",
			Input{Service: withExt, Node: ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: arriving})}, true, ReasonTrafficLost},
		{"externalIP on every node's kube-ipvs0, routed elsewhere: out",
			Input{Service: withExt, Node: ready, Evidence: ev(nil, withNodePorts(), seen{})}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.Blackhole != c.blackhole || v.Reason != c.reason || v.CannotTell {
				t.Errorf("blackhole %v reason %q cannot tell %v, want %v %q\n%+v", v.Blackhole, v.Reason, v.CannotTell, c.blackhole, c.reason, v.Families)
			}
		})
	}
}

// Without node evidence the plugin says "cannot observe" exactly where rotation rests on arrivals.
func TestPluginCannotObserve(t *testing.T) {
	nodePort := lbService(0, 0)
	nodePort.Type, nodePort.HealthCheckNodePort, nodePort.LoadBalancerIPs = corev1.ServiceTypeNodePort, 0, nil
	misdirected := lbService(0, 0)
	misdirected.LBCheck = announce.LBCheckMisdirected
	for _, c := range []struct {
		name       string
		in         Input
		cannotTell bool
		blackhole  bool
	}{
		{"excluded node, NodePort", Input{Service: nodePort, Node: kubeview.NodeState{Found: true, Excluded: true}}, true, false},
		{"draining node, NodePort", Input{Service: nodePort, Node: kubeview.NodeState{Found: true, Deleting: true}}, true, false},
		{"eligible node, NodePort: declared (a blackhole, known from the API)", Input{Service: nodePort, Node: kubeview.NodeState{Found: true}}, false, true},
		{"LB checked over HTTP on healthCheckNodePort: drained", Input{Service: lbService(0, 0), Node: kubeview.NodeState{Found: true}}, false, false},
		{"LB whose check is misdirected: only arrivals tell", Input{Service: misdirected, Node: kubeview.NodeState{Found: true}}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.CannotTell != c.cannotTell || v.Blackhole != c.blackhole {
				t.Errorf("cannot tell %v blackhole %v, want %v %v\n%+v", v.CannotTell, v.Blackhole, c.cannotTell, c.blackhole, v.Families)
			}
		})
	}
}

// A health check's 200 keeps a node in rotation only where a load balancer honours that check. Where none is
// known to (an announcer: MetalLB's or Cilium's L2 VIP goes to one node whatever every node's check says), a
// second port dropped behind a 200 is a warning while nothing arrives for the meter's quiet period, critical
// once attempts arrive; where the contract holds (a cloud controller that checks the health check node port)
// it stays critical.
func TestHealthCheckPassingWithoutAContract(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	twoPorts := func(providerAnnotated bool) kubeview.ServiceState {
		// ServiceStateOf keeps what decides the load balancer's check; the families come from the fixture.
		ann := map[string]string{}
		if providerAnnotated {
			ann["service.beta.kubernetes.io/aws-load-balancer-type"] = "nlb"
		}
		s := kubeview.ServiceStateOf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: 32000,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}, nil)
		f := lbService(1, 1)
		s.LoadBalancerIPs, s.Families = f.LoadBalancerIPs, f.Families
		s.Families[0].Ports = append(s.Families[0].Ports, kubeview.PortEndpoints{Name: "admin", Protocol: corev1.ProtocolTCP,
			Port: 9000, NodePort: 30091, ClusterWide: true})
		return s
	}
	silent := Observation{Watched: true, Silent: true}
	justWatched := Observation{Watched: true} // watched for less than the quiet period: nothing to conclude
	arriving := Observation{Watched: true, Attempts: 3, ActiveSince: now.Add(-time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute)}
	// A checker probing the traffic port (the dropped NodePort), its SYNs retransmitted: arrivals, repeated,
	// set aside as a steady source's; no client among them.
	probed := Observation{Watched: true, Attempts: 40, ActiveSince: now.Add(-80 * time.Second), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute), Repeats: true,
		Repeated: Repeated{Attempts: 40, ActiveSince: now.Add(-80 * time.Second), LastSeen: now.Add(-time.Second), Ongoing: true},
		SetAside: true, Checkers: []Checker{{Addr: "198.51.100.9", Interval: 2 * time.Second}}, Clients: ClientAttempts{Silent: true}}
	probedAndClient := probed
	probedAndClient.Clients = ClientAttempts{Attempts: 3, ActiveSince: now.Add(-5 * time.Second), LastSeen: now.Add(-time.Second), Ongoing: true,
		Repeated: Repeated{Attempts: 3, ActiveSince: now.Add(-5 * time.Second), LastSeen: now.Add(-time.Second), Ongoing: true}}
	checks := map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: http.StatusOK, Result: "ok"}}
	bare, gce := kubeview.NodeState{Name: "n", Found: true}, kubeview.NodeState{Name: "n", Found: true, ProviderID: "gce://p/z/n"}
	for _, c := range []struct {
		name string
		svc  kubeview.ServiceState
		node kubeview.NodeState
		o    Observation
		want Reason
		lb   *Observation // at the load balancer IP, when not o
	}{
		{"announcer, nothing arrives for the quiet period: a warning", twoPorts(false), bare, silent, ReasonNoTrafficSeen, nil},
		{"announcer, the meter just started: still critical", twoPorts(false), bare, justWatched, ReasonHealthCheckPassing, nil},
		{"announcer, clients arrive: critical", twoPorts(false), bare, arriving, ReasonTrafficLost, nil},
		{"GCE nodes: the load balancer keeps it for its 200", twoPorts(false), gce, silent, ReasonHealthCheckPassing, nil},
		{"AWS annotations: the same", twoPorts(true), bare, silent, ReasonHealthCheckPassing, nil},
		{"announcer, only a traffic-port checker's probes arrive: a warning", twoPorts(false), bare, probed, ReasonNoTrafficSeen, &silent},
		{"announcer, a client arrives beside the checker: critical", twoPorts(false), bare, probedAndClient, ReasonTrafficLost, &silent},
	} {
		atLB := c.o
		if c.lb != nil {
			atLB = *c.lb
		}
		v := Decide(Input{Service: c.svc, Node: c.node, Evidence: &Evidence{HealthChecks: checks, Addresses: withNodePorts(),
			Observed: seen{NodePort: c.o, LoadBalancerIP: atLB}, Grace: 2 * time.Minute, Now: now}})
		if !v.Blackhole || v.Reason != c.want {
			t.Errorf("%s: blackhole %v reason %q, want %q\n%+v", c.name, v.Blackhole, v.Reason, c.want, v.Families)
		}
	}
}

// udpService is lbService with its one port UDP.
func udpService() kubeview.ServiceState {
	s := lbService(0, 0)
	s.Families[0].Ports[0].Protocol = corev1.ProtocolUDP
	return s
}
