package verdict

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// counters is kube-proxy's drop counters' evidence: per destination kind, whether its drop rule counter grew
// within the evidence window.
type counters map[Kind]bool

func (c counters) Arriving(d Destination) (string, bool) {
	return "drop counter grew within the evidence window", c[d.Kind]
}

// holdFixtures are the Services and nodes the hold and counter tables share.
type holdFixtures struct {
	nodePort, lb, withExt kubeview.ServiceState
	ready, excluded       kubeview.NodeState
}

func newHoldFixtures() holdFixtures {
	f := holdFixtures{lb: lbService(0, 0), ready: kubeview.NodeState{Name: "n", Found: true},
		excluded: kubeview.NodeState{Name: "n", Found: true, Excluded: true}}
	f.nodePort = lbService(0, 0)
	f.nodePort.Type, f.nodePort.HealthCheckNodePort, f.nodePort.LoadBalancerIPs = corev1.ServiceTypeNodePort, 0, nil
	f.withExt = lbService(0, 0, "198.51.100.7")
	f.withExt.Type, f.withExt.HealthCheckNodePort, f.withExt.LoadBalancerIPs = corev1.ServiceTypeClusterIP, 0, nil
	f.withExt.Families[0].Ports[0].NodePort = 0
	return f
}

func checks(code int) map[corev1.IPFamily]HealthCheck {
	r := "ok"
	if code != http.StatusOK {
		r = "unavailable"
	}
	return map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: code, Result: r}}
}

// TestLossHold: traffic_lost holds for Evidence.LossHold after the last attempt that arrived while the
// destination was dropped, so a client that tries every few minutes keeps one critical reason instead of
// alternating with no_traffic_seen (each change restarted the other alert's for:, and nothing ever fired). The
// hold keeps a loss; it never starts one, never outlives the drop, and never keeps a rotation the declared model
// does not give. now is the scrape; the meter's quiet period is 2 minutes, so an attempt 3 minutes old has
// ended its run (Ongoing false).
func TestLossHold(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const hold = 15 * time.Minute
	f := newHoldFixtures()
	// ago is one attempt that arrived d before the scrape; the node has dropped the destination since 20
	// minutes before the scrape.
	ago := func(d time.Duration) Observation {
		return Observation{Watched: true, Attempts: 5, ActiveSince: now.Add(-d), LastSeen: now.Add(-d),
			Ongoing: d < 2*time.Minute, DroppedSince: now.Add(-20 * time.Minute)}
	}
	// longRunEnded: attempts kept arriving for 10 minutes after the drop, the last 3 minutes ago.
	longRunEnded := Observation{Watched: true, Attempts: 600, ActiveSince: now.Add(-13 * time.Minute), LastSeen: now.Add(-3 * time.Minute),
		DroppedSince: now.Add(-20 * time.Minute)}
	ev := func(hcs map[corev1.IPFamily]HealthCheck, a Addresses, o Observed, h time.Duration) *Evidence {
		return &Evidence{HealthChecks: hcs, Addresses: a, Observed: o, Grace: 2 * time.Minute, LossHold: h, Now: now}
	}
	cases := []struct {
		name      string
		in        Input
		blackhole bool
		reason    Reason
	}{
		{"NodePort, one lost attempt 3 minutes ago (after its run ended): still traffic_lost",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: ago(3 * time.Minute)}, hold)},
			true, ReasonTrafficLost},
		{"NodePort, the last lost attempt 14 minutes ago: still within the hold",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: ago(14 * time.Minute)}, hold)},
			true, ReasonTrafficLost},
		{"NodePort, the last lost attempt 16 minutes ago: the hold is over, a warning again",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: ago(16 * time.Minute)}, hold)},
			true, ReasonNoTrafficSeen},
		{"without a hold (0) the reason falls back as soon as the run ends",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: ago(3 * time.Minute)}, 0)},
			true, ReasonNoTrafficSeen},
		{"the hold does not start a page: the last attempt came while the destination was served",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: func() Observation {
				o := ago(3 * time.Minute)
				o.DroppedSince = now.Add(-time.Minute)
				return o
			}()}, hold)},
			true, ReasonNoTrafficSeen},
		{"the hold does not start a page: the first scrape that finds it dropped",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: func() Observation {
				o := ago(3 * time.Minute)
				o.DroppedSince = time.Time{}
				return o
			}()}, hold)},
			true, ReasonNoTrafficSeen},
		{"served again (not dropped): no blackhole, whatever was lost before",
			Input{Service: func() kubeview.ServiceState {
				s := f.nodePort
				s.Families = []kubeview.FamilyEndpoints{f.nodePort.Families[0]}
				s.Families[0].Ports = []kubeview.PortEndpoints{f.nodePort.Families[0].Ports[0]}
				s.Families[0].Ports[0].Local = 1
				return s
			}(), Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: func() Observation {
				o := ago(3 * time.Minute)
				o.DroppedSince = time.Time{} // the exporter forgets it the scrape it finds it served
				return o
			}()}, hold)},
			false, ""},
		{"excluded node: in rotation by arrivals only while they keep coming, the hold keeps no rotation",
			Input{Service: f.nodePort, Node: f.excluded, Evidence: ev(nil, withNodePorts(), seen{NodePort: longRunEnded}, hold)},
			false, ""},
		{"excluded node, rare attempts: never in rotation by arrivals, so never held",
			Input{Service: f.nodePort, Node: f.excluded, Evidence: ev(nil, withNodePorts(), seen{NodePort: ago(3 * time.Minute)}, hold)},
			false, ""},
		{"LB answering 503 that kept sending past grace, then stopped: drained at last, health_check_ignored is not held",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(503), withNodePorts(), seen{NodePort: longRunEnded, LoadBalancerIP: longRunEnded}, hold)},
			false, ""},
		{"LB IP held on this node, the last lost attempt 5 minutes ago: traffic_lost",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(503), withNodePorts("192.0.2.10"), seen{LoadBalancerIP: ago(5 * time.Minute)}, hold)},
			true, ReasonTrafficLost},
		{"health check 200, a port dropped, a lost attempt 5 minutes ago: traffic_lost (critical either way)",
			Input{Service: func() kubeview.ServiceState {
				s := lbService(1, 1)
				s.Families[0].Ports = append(s.Families[0].Ports, kubeview.PortEndpoints{Name: "admin", Protocol: corev1.ProtocolTCP,
					Port: 9000, NodePort: 30091, ClusterWide: true})
				return s
			}(), Node: f.ready, Evidence: ev(checks(200), withNodePorts(), seen{NodePort: ago(5 * time.Minute)}, hold)},
			true, ReasonTrafficLost},
		{"externalIP routed here, arrivals past grace then a pause: out of rotation when the run ends, not held",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: longRunEnded}, hold)},
			false, ""},
		{"externalIP assigned here, the last lost attempt 5 minutes ago: traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts("198.51.100.7"), seen{ExternalIP: ago(5 * time.Minute)}, hold)},
			true, ReasonTrafficLost},
		{"meter blind: the hold has nothing to keep",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), blind{}, hold)},
			true, ReasonNotObserved},
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

// TestCounterEvidence: where the meter cannot see (off, or blind without CAP_NET_RAW), kube-proxy's drop rule
// counters (iptables modes) are the evidence of lost traffic: a declared-in-rotation dropped destination whose
// counter grew is traffic_lost, not not_observed. A counter never puts a NodePort or load balancer IP in
// rotation (a load balancer draining the node still sends for a few seconds), and where the meter watches an
// externalIP its counter is no shortcut past the grace window.
func TestCounterEvidence(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newHoldFixtures()
	// A route that sent clients for 20 s after the node lost its endpoint, then was withdrawn.
	withdrawn := Observation{Watched: true, Attempts: 20, ActiveSince: now.Add(-40 * time.Second), LastSeen: now.Add(-20 * time.Second),
		Ongoing: true, DroppedSince: now.Add(-40 * time.Second)}
	arriving := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute)}
	ev := func(hcs map[corev1.IPFamily]HealthCheck, a Addresses, o Observed, c Arrivals) *Evidence {
		return &Evidence{HealthChecks: hcs, Addresses: a, Observed: o, Arrivals: c, Grace: 2 * time.Minute, LossHold: 15 * time.Minute, Now: now}
	}
	cases := []struct {
		name      string
		in        Input
		blackhole bool
		reason    Reason
	}{
		{"meter off, NodePort counter grew: traffic_lost",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), nil, counters{NodePort: true})},
			true, ReasonTrafficLost},
		{"meter blind, NodePort counter grew: traffic_lost",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), blind{}, counters{NodePort: true})},
			true, ReasonTrafficLost},
		{"meter off, no counter grew (or nftables mode, none at all): not_observed",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), nil, counters{})},
			true, ReasonNotObserved},
		{"meter off, no counter evidence read (rules unread): not_observed",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), nil, nil)},
			true, ReasonNotObserved},
		{"meter off, LB IP held on this node, its counter grew (the firewall's included): traffic_lost",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(503), withNodePorts("192.0.2.10"), nil, counters{LoadBalancerIP: true})},
			true, ReasonTrafficLost},
		{"meter off, health check 200 with a second port dropped and counted: traffic_lost",
			Input{Service: func() kubeview.ServiceState {
				s := lbService(1, 1)
				s.Families[0].Ports = append(s.Families[0].Ports, kubeview.PortEndpoints{Name: "admin", Protocol: corev1.ProtocolTCP,
					Port: 9000, NodePort: 30091, ClusterWide: true})
				return s
			}(), Node: f.ready, Evidence: ev(checks(200), withNodePorts(), nil, counters{NodePort: true})},
			true, ReasonTrafficLost},
		{"meter off, LB answering 503, counters grew while it drained: out, a counter puts no NodePort or LB IP in rotation",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(503), withNodePorts(), nil, counters{NodePort: true, LoadBalancerIP: true})},
			false, ""},
		{"meter off, excluded node, NodePort counter grew: out (only the meter's arrivals past grace put it in)",
			Input{Service: f.nodePort, Node: f.excluded, Evidence: ev(nil, withNodePorts(), nil, counters{NodePort: true})},
			false, ""},
		{"meter off, externalIP counter grew: routed here, traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), nil, counters{ExternalIP: true})},
			true, ReasonTrafficLost},
		{"meter blind, externalIP counter grew: routed here, traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), blind{}, counters{ExternalIP: true})},
			true, ReasonTrafficLost},
		{"meter working, externalIP route withdrawn 20 s after the drop: the counter grew, but within grace: out",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: withdrawn}, counters{ExternalIP: true})},
			false, ""},
		{"meter working, externalIP arrivals past grace: in, traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: arriving}, counters{ExternalIP: true})},
			true, ReasonTrafficLost},
		{"meter working and silent, NodePort counter grew: the meter decides (it sees every attempt the counter counts)",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{}, counters{NodePort: true})},
			true, ReasonNoTrafficSeen},
		{"meter off, served: no blackhole, whatever a counter says",
			Input{Service: func() kubeview.ServiceState {
				s := f.nodePort
				s.Families = []kubeview.FamilyEndpoints{f.nodePort.Families[0]}
				s.Families[0].Ports = []kubeview.PortEndpoints{f.nodePort.Families[0].Ports[0]}
				s.Families[0].Ports[0].Local = 1
				return s
			}(), Node: f.ready, Evidence: ev(nil, withNodePorts(), nil, counters{NodePort: true})},
			false, ""},
		{"virtual node: out, whatever the counters",
			Input{Service: f.nodePort, Node: kubeview.NodeState{Name: "n", Found: true, Virtual: true},
				Evidence: ev(nil, withNodePorts(), nil, counters{NodePort: true})},
			false, ""},
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
