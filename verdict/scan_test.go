package verdict

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// TestPortScanIsNotALoss: where the meter tells attempts that repeated their source (a client's retransmitted
// SYN, its next try) from single ones (a port scan's SYN, a datagram from a source never seen again), a lost
// attempt is a repeated one: single attempts at a dropped destination neither start the loss hold nor put it in
// rotation by arrivals, and so never make its blackhole critical. A repeated attempt pages as before, and a
// meter that tells nothing (Repeats false) counts every attempt, as before.
func TestPortScanIsNotALoss(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newHoldFixtures()
	dropped := now.Add(-20 * time.Minute)
	// scan: one SYN from each of a few sources, the latest 40 s ago, none of them repeated.
	scan := Observation{Watched: true, Attempts: 6, ActiveSince: now.Add(-5 * time.Minute), LastSeen: now.Add(-40 * time.Second),
		Ongoing: true, DroppedSince: dropped, Repeats: true}
	// scanForAges: a scanner every minute for 15 minutes, a run longer than any grace window.
	scanForAges := scan
	scanForAges.Attempts, scanForAges.ActiveSince = 15, now.Add(-15*time.Minute)
	// client: the scan, and a client whose dropped SYN was retransmitted a second later, 3 minutes ago.
	client := scan
	client.Repeated = Repeated{Attempts: 2, ActiveSince: now.Add(-3*time.Minute - time.Second), LastSeen: now.Add(-3 * time.Minute)}
	// clientsForAges: clients retransmitting all along, as a load balancer that ignores the check sends them.
	clientsForAges := scanForAges
	clientsForAges.Repeated = Repeated{Attempts: 30, ActiveSince: now.Add(-15 * time.Minute), LastSeen: now.Add(-30 * time.Second), Ongoing: true}
	// untold: a meter that does not tell repeats, the same single attempts.
	untold := scan
	untold.Repeats = false
	// checkerAndScan: at a NodePort, a checker's probes set aside, a scanner's single SYN the only client attempt.
	checkerAndScan := scan
	checkerAndScan.Attempts = 300
	checkerAndScan.Repeated = Repeated{Attempts: 299, ActiveSince: now.Add(-19 * time.Minute), LastSeen: now.Add(-time.Second), Ongoing: true}
	checkerAndScan.SetAside, checkerAndScan.Checkers = true, []Checker{{Addr: "198.18.0.5", Interval: 2 * time.Second}}
	checkerAndScan.Clients = ClientAttempts{Attempts: 1, ActiveSince: now.Add(-40 * time.Second), LastSeen: now.Add(-40 * time.Second), Ongoing: true}
	declaredNone := f.nodePort
	declaredNone.HealthCheck = announce.CheckNone
	ev := func(hc map[corev1.IPFamily]HealthCheck, a Addresses, o Observed) *Evidence {
		return &Evidence{HealthChecks: hc, Addresses: a, Observed: o, Grace: 2 * time.Minute, LossHold: 15 * time.Minute, Now: now}
	}
	cases := []struct {
		name      string
		in        Input
		blackhole bool
		reason    Reason
	}{
		{"NodePort, single SYNs after the drop: arrivals, no loss (a warning)",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: scan})}, true, ReasonNoTrafficSeen},
		{"NodePort, a retransmitted SYN after the drop: traffic_lost, held",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: client})}, true, ReasonTrafficLost},
		{"NodePort, a meter that tells no repeat: every attempt is a loss, as before",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: untold})}, true, ReasonTrafficLost},
		{"externalIP held here, single SYNs: no loss",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts("198.51.100.7"), seen{ExternalIP: scan})}, true, ReasonNoTrafficSeen},
		{"externalIP held here, a retransmitted SYN: traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts("198.51.100.7"), seen{ExternalIP: client})}, true, ReasonTrafficLost},
		{"externalIP routed here, scanners for longer than grace: no rotation, no blackhole",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: scanForAges})}, false, ""},
		{"externalIP routed here, clients for longer than grace: in rotation, traffic_lost",
			Input{Service: f.withExt, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{ExternalIP: clientsForAges})}, true, ReasonTrafficLost},
		{"LB answering 503, scanners at its IP for longer than grace: not health_check_ignored",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(http.StatusServiceUnavailable), withNodePorts(), seen{LoadBalancerIP: scanForAges})}, false, ""},
		{"LB answering 503, clients at its IP for longer than grace: health_check_ignored",
			Input{Service: f.lb, Node: f.ready, Evidence: ev(checks(http.StatusServiceUnavailable), withNodePorts(), seen{LoadBalancerIP: clientsForAges})}, true, ReasonHealthCheckIgnored},
		{"NodePort, a checker set aside and a scanner's SYN: no client repeated, a warning",
			Input{Service: f.nodePort, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: checkerAndScan})}, true, ReasonNoTrafficSeen},
		{"NodePort declared unchecked: the checker's repeated probes are a client's",
			Input{Service: declaredNone, Node: f.ready, Evidence: ev(nil, withNodePorts(), seen{NodePort: checkerAndScan})}, true, ReasonTrafficLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(tc.in)
			if v.Blackhole != tc.blackhole || v.Reason != tc.reason {
				t.Errorf("blackhole %v reason %q, want %v %q\n%+v", v.Blackhole, v.Reason, tc.blackhole, tc.reason, v.Families)
			}
			if tc.reason == ReasonNoTrafficSeen && v.Reason.Critical() {
				t.Errorf("critical reason %q for single attempts", v.Reason)
			}
		})
	}
}
