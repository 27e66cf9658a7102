package verdict

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// TestHealthCheckersAreNotClients: at a NodePort, the arrivals of steady sources (the meter's checkers) are a
// load balancer's health checks unless the Service declares otherwise; everyone else is a client, and clients
// page as before. now is the scrape; the node has dropped since 10 minutes before it.
func TestHealthCheckersAreNotClients(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	dropped := now.Add(-10 * time.Minute)
	checker := []Checker{{Addr: "198.18.0.5", Interval: 2 * time.Second}}
	// Only a checker: every attempt set aside, no client.
	probesOnly := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-9 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: dropped, SetAside: true, Checkers: checker}
	// The checker and a client arriving for the last 5 minutes.
	withClient := probesOnly
	withClient.Clients = ClientAttempts{Attempts: 40, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-3 * time.Second), Ongoing: true}
	// A client that stopped 10 minutes ago, the checker still probing.
	clientGone := probesOnly
	clientGone.Clients = ClientAttempts{Attempts: 4, ActiveSince: now.Add(-20 * time.Minute), LastSeen: now.Add(-10 * time.Minute)}

	hc503 := map[corev1.IPFamily]HealthCheck{corev1.IPv4Protocol: {StatusCode: http.StatusServiceUnavailable, Result: "unavailable"}}
	ev := func(checks map[corev1.IPFamily]HealthCheck, o Observation) *Evidence {
		return &Evidence{HealthChecks: checks, Addresses: withNodePorts(), Observed: seen{NodePort: o}, Grace: 2 * time.Minute, Now: now}
	}
	svc := func(typ corev1.ServiceType, declared announce.DeclaredCheck) kubeview.ServiceState {
		s := lbService(0, 0)
		s.HealthCheck = declared
		if c, ok := declared.Class(); ok {
			s.LBCheck = c
		}
		if typ == corev1.ServiceTypeNodePort {
			s.Type, s.HealthCheckNodePort, s.LoadBalancerIPs = typ, 0, nil
		}
		return s
	}
	ready := kubeview.NodeState{Name: "n", Found: true}
	excluded := kubeview.NodeState{Name: "n", Found: true, Excluded: true}
	const np, lb = corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer
	undeclared := announce.CheckUndeclared

	cases := []struct {
		name      string
		in        Input
		blackhole bool
		reason    Reason
		checkers  bool // the entry names the steady sources (the exporter warns once)
	}{
		{"NodePort Service, only an HAProxy-style checker: a warning, not a page",
			Input{Service: svc(np, undeclared), Node: ready, Evidence: ev(nil, probesOnly)}, true, ReasonNoTrafficSeen, true},
		{"NodePort Service, the checker and a client: the client pages",
			Input{Service: svc(np, undeclared), Node: ready, Evidence: ev(nil, withClient)}, true, ReasonTrafficLost, true},
		{"NodePort Service, the client gone 10 minutes, the checker still probing: no longer losing",
			Input{Service: svc(np, undeclared), Node: ready, Evidence: ev(nil, clientGone)}, true, ReasonNoTrafficSeen, true},
		{"NodePort Service declared none: the steady source is a client",
			Input{Service: svc(np, announce.CheckNone), Node: ready, Evidence: ev(nil, probesOnly)}, true, ReasonTrafficLost, false},
		{"NodePort Service declared health-check-node-port: nothing probes the NodePort, a client",
			Input{Service: svc(np, announce.CheckHealthCheckNodePort), Node: ready, Evidence: ev(nil, probesOnly)}, true, ReasonTrafficLost, false},
		{"NodePort Service declared traffic-port: the checker's probes, no warning needed",
			Input{Service: svc(np, announce.CheckTrafficPort), Node: ready, Evidence: ev(nil, probesOnly)}, true, ReasonNoTrafficSeen, false},
		{"NodePort Service declared traffic-port, a client too: it still pages",
			Input{Service: svc(np, announce.CheckTrafficPort), Node: ready, Evidence: ev(nil, withClient)}, true, ReasonTrafficLost, false},
		{"excluded node, only the checker: out of rotation",
			Input{Service: svc(np, undeclared), Node: excluded, Evidence: ev(nil, probesOnly)}, false, "", true},
		{"excluded node, the checker and a client past grace: in rotation by the client",
			Input{Service: svc(np, undeclared), Node: excluded, Evidence: ev(nil, withClient)}, true, ReasonTrafficLost, true},
		{"excluded node, declared traffic-port: arrivals at the NodePort never put it in rotation",
			Input{Service: svc(np, announce.CheckTrafficPort), Node: excluded, Evidence: ev(nil, withClient)}, false, "", false},
		{"LoadBalancer of an unknown controller answering 503, only its checker: drained, no page",
			Input{Service: svc(lb, undeclared), Node: ready, Evidence: ev(hc503, probesOnly)}, false, "", true},
		{"LoadBalancer of an unknown controller answering 503, a client past grace: it ignores the health check",
			Input{Service: svc(lb, undeclared), Node: ready, Evidence: ev(hc503, withClient)}, true, ReasonHealthCheckIgnored, true},
		{"LoadBalancer declared none answering 503, the steady source past grace: a client the load balancer sends",
			Input{Service: svc(lb, announce.CheckNone), Node: ready, Evidence: ev(hc503, probesOnly)}, true, ReasonHealthCheckIgnored, false},
		{"LoadBalancer declared traffic-port answering 503, a client too: the load balancer drains by its own check",
			Input{Service: svc(lb, announce.CheckTrafficPort), Node: ready, Evidence: ev(hc503, withClient)}, false, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.Blackhole != c.blackhole || v.Reason != c.reason {
				t.Errorf("blackhole %v reason %q, want %v %q\n%+v", v.Blackhole, v.Reason, c.blackhole, c.reason, v.Families)
			}
			e := v.Families[0].Entries[0]
			if e.Kind != NodePort {
				t.Fatalf("first entry %v, want the NodePort", e.Destination)
			}
			if (len(e.Checkers) > 0) != c.checkers {
				t.Errorf("entry names checkers %v, want %v", e.Checkers, c.checkers)
			}
			if c.checkers && !strings.Contains(e.Why, "198.18.0.5 every 2s") {
				t.Errorf("why %q does not name the steady source", e.Why)
			}
		})
	}
}

// Only NodePorts hold checks: a steady source at a load balancer IP held on the node is a client.
func TestCheckersOnlyAtNodePorts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o := Observation{Watched: true, Attempts: 300, ActiveSince: now.Add(-9 * time.Minute), LastSeen: now.Add(-time.Second),
		Ongoing: true, DroppedSince: now.Add(-10 * time.Minute), SetAside: true,
		Checkers: []Checker{{Addr: "198.18.0.5", Interval: 2 * time.Second}}}
	in := Input{Service: lbService(0, 0), Node: kubeview.NodeState{Name: "n", Found: true}, Evidence: &Evidence{
		Addresses: withNodePorts("192.0.2.10"), Observed: seen{LoadBalancerIP: o}, Grace: 2 * time.Minute, Now: now}}
	if v := Decide(in); !v.Blackhole || v.Reason != ReasonTrafficLost {
		t.Errorf("blackhole %v reason %q, want traffic_lost", v.Blackhole, v.Reason)
	}
}
