package verdict

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// Health checkers are not clients. A load balancer that checks the traffic port opens a connection to the
// Service's NodePort on every node at a fixed interval; a node without a local endpoint drops it, which is how
// the load balancer drains that node. Those arrivals are no client's, and must neither put the node in rotation
// nor make its blackhole traffic_lost. Which arrivals are checks:
//   - the Service declares it (announce.AnnotationHealthCheck): traffic-port, the steady sources are the
//     checker (and for any Service type arrivals at the NodePort never put the node in rotation, as for a
//     cloud's traffic-port check); health-check-node-port or none, nothing at the NodePort is a check: every
//     arrival is a client, however steady;
//   - undeclared, the arrivals meter's steady sources at a NodePort (Observation.Checkers: five new attempts
//     like a clock, docs/rotation.md) are taken as checks, and the rest as clients. The Entry names them
//     (Entry.Checkers) so the exporter can say once which sources it set aside and how to settle it.

// clientsOnly returns o with its attempts narrowed to the clients' where the Service's NodePort arrivals hold
// health checks, and notes on e the steady sources set aside without a declaration.
func clientsOnly(in Input, e *Entry, o Observation) Observation {
	if !checkersAside(in, *e, o) {
		return o
	}
	if len(o.Checkers) > 0 && e.Dropped && in.Service.HealthCheck == announce.CheckUndeclared {
		e.Checkers = o.Checkers
	}
	if len(o.Checkers) > 0 {
		e.Why += "; " + checkersWhy(in, o.Checkers)
	}
	o.Attempts, o.ActiveSince, o.LastSeen, o.Ongoing = o.Clients.Attempts, o.Clients.ActiveSince, o.Clients.LastSeen, o.Clients.Ongoing
	o.Repeated = o.Clients.Repeated
	return o
}

// checkersAside: the meter set some of the NodePort's arrivals aside as steady sources' (or ones proving their
// cadence), and nothing the Service declares makes them clients: a declared check on the health check node
// port, or none at all, means nothing probes the NodePort and every arrival is a client.
func checkersAside(in Input, e Entry, o Observation) bool {
	if e.Kind != NodePort || !o.SetAside {
		return false
	}
	switch in.Service.HealthCheck {
	case announce.CheckNone, announce.CheckHealthCheckNodePort:
		return false
	}
	return true
}

// trafficPortChecked: the Service's load balancer checks the NodePort, as declared or as its cloud
// controller's annotations say.
func trafficPortChecked(in Input) bool {
	if in.Service.HealthCheck == announce.CheckTrafficPort {
		return true
	}
	return in.Service.Type == corev1.ServiceTypeLoadBalancer && in.Service.LBCheckOn(in.Node) == announce.LBCheckTrafficPort
}

func checkersWhy(in Input, cs []Checker) string {
	what := "arrive like a load balancer's health checks and are not counted as clients (annotate " +
		announce.AnnotationHealthCheck + ": none if they are clients)"
	if in.Service.HealthCheck == announce.CheckTrafficPort {
		what = "are the load balancer's traffic-port health checks (" + announce.AnnotationHealthCheck + ": traffic-port)"
	}
	return fmt.Sprintf("%s at a steady cadence %s", CheckersString(cs), what)
}

// CheckersString names steady sources for a person: "198.18.0.5 every 2s, 198.18.0.6 every 2s".
func CheckersString(cs []Checker) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s every %s", c.Addr, c.Interval.Round(100*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
