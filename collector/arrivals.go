package collector

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/verdict"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
)

// ArrivalsMeter is what the gatherer asks of the arrivals meter: what to count, and what it counted.
// *arrivals.Meter implements it.
type ArrivalsMeter interface {
	Watch(arrivals.Watch) error
	Snapshot() arrivals.Snapshot
}

// Defaults of the rotation evidence (docs/rotation.md, "Grace window").
const (
	// DefaultGrace covers a load balancer's deregistration of a node whose health check fails: AWS target
	// groups check every 30 s and take a target out after 2 failures (60 s), GCE's L4 health checks for Local
	// every 8 s after 3 (24 s), the AWS Load Balancer Controller's Local defaults every 10 s after 2 (20 s);
	// twice the longest leaves room for the probe timeout and the load balancer's propagation.
	DefaultGrace = 2 * time.Minute
	// DefaultQuiet is the pause that ends a run of arrivals: the meter's default QuietPeriod.
	DefaultQuiet = 2 * time.Minute
)

// The meter's states as exported: the meter's own (arrivals.Status), and meterDisabled (--no-arrivals.enabled).
var meterStates = []string{arrivals.StatusOK.String(), arrivals.StatusPermissionDenied.String(),
	arrivals.StatusFailed.String(), arrivals.StatusClosed.String(), meterDisabled}

const meterDisabled = "disabled"

// kindHealthCheck is the arrivals' kind of a health check node port's probes: arrivals_total counts them beside
// the entry kinds (verdict.NodePort ...), though they are no way in for a Service's traffic.
const kindHealthCheck verdict.Kind = "health_check"

// missedCause is why the meter missed packets (arrivals_missed_total's cause).
type missedCause string

const (
	missedRingFull  missedCause = "ring_full"  // the kernel dropped them: the ring was full
	missedRateLimit missedCause = "rate_limit" // over the meter's packet budget
)

// destOf is the meter's destination for a verdict destination; ok is false for a protocol or address it
// cannot count.
func destOf(d verdict.Destination) (arrivals.Dest, bool) {
	p, err := arrivals.ParseProtocol(string(d.Protocol))
	if err != nil || d.DestPort <= 0 || d.DestPort > 65535 {
		return arrivals.Dest{}, false
	}
	if d.Kind == verdict.NodePort {
		return arrivals.NodeDest(p, d.Family == corev1.IPv6Protocol, uint16(d.DestPort)), true
	}
	a, err := netip.ParseAddr(d.Address)
	if err != nil {
		return arrivals.Dest{}, false
	}
	return arrivals.Dest{Protocol: p, Addr: a.Unmap(), Port: uint16(d.DestPort)}, true
}

// destinations lists every destination of a Service in the family, as the verdict names them.
func destinations(svc kubeview.ServiceState, fam kubeview.FamilyEndpoints, each func(verdict.Destination)) {
	lbIPs, extIPs := svc.AddressesOf(fam.Family)
	for _, p := range fam.Ports {
		d := verdict.Destination{Namespace: svc.Namespace, Service: svc.Name, Port: p.Name, Protocol: p.Protocol, Family: fam.Family}
		if p.NodePort != 0 {
			d.Kind, d.Address, d.DestPort = verdict.NodePort, "", p.NodePort
			each(d)
		}
		if svc.Type == corev1.ServiceTypeLoadBalancer {
			for _, ip := range lbIPs {
				d.Kind, d.Address, d.DestPort = verdict.LoadBalancerIP, ip, p.Port
				each(d)
			}
		}
		for _, ip := range extIPs {
			d.Kind, d.Address, d.DestPort = verdict.ExternalIP, ip, p.Port
			each(d)
		}
	}
}

func healthCheckDest(svc kubeview.ServiceState, f corev1.IPFamily) (arrivals.Dest, bool) {
	if svc.Type != corev1.ServiceTypeLoadBalancer || svc.HealthCheckNodePort <= 0 || svc.HealthCheckNodePort > 65535 {
		return arrivals.Dest{}, false
	}
	return arrivals.NodeDest(arrivals.TCP, f == corev1.IPv6Protocol, uint16(svc.HealthCheckNodePort)), true
}

// arrivalsWatch is what the meter must count for this scrape's Services: every destination, every health
// check node port, on the node's NodePort addresses, leaving out the internal sources.
func arrivalsWatch(snap kubeview.Snapshot, nodePortAddrs []net.IP, internal []netip.Prefix) arrivals.Watch {
	w := arrivals.Watch{Internal: internal}
	for _, ip := range nodePortAddrs {
		if a, ok := netip.AddrFromSlice(ip); ok && !a.Unmap().IsUnspecified() {
			w.NodeAddrs = append(w.NodeAddrs, a.Unmap())
		}
	}
	for _, c := range snap.Node.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			w.Internal = append(w.Internal, p)
		}
	}
	for _, svc := range snap.Services {
		for _, fam := range svc.Families {
			destinations(svc, fam, func(d verdict.Destination) {
				if ad, ok := destOf(d); ok {
					w.Dests = append(w.Dests, ad)
				}
			})
			if hc, ok := healthCheckDest(svc, fam.Family); ok {
				w.HealthChecks = append(w.HealthChecks, hc)
			}
		}
	}
	return w
}

// observations adapts one scrape's meter snapshot to the verdict (verdict.Observed): the evidence of
// arrivals, in one place.
type observations struct {
	snap  *arrivals.Snapshot // nil: no meter
	quiet time.Duration
	now   time.Time
	// dropped is when each destination was first found dropped, scrape after scrape (arrivalTotals).
	dropped map[verdict.Destination]time.Time
}

// Observe implements verdict.Observed.
func (o *observations) Observe(d verdict.Destination) verdict.Observation {
	if o.snap == nil || o.snap.Status != arrivals.StatusOK {
		return verdict.Observation{}
	}
	ad, ok := destOf(d)
	if !ok {
		return verdict.Observation{}
	}
	c, ok := o.snap.Dest(ad)
	if !ok {
		return verdict.Observation{}
	}
	return verdict.Observation{Watched: true, Attempts: c.Attempts, ActiveSince: c.ActiveSince, LastSeen: c.LastSeen,
		Ongoing: c.Attempts > 0 && o.now.Sub(c.LastSeen) < o.quiet, DroppedSince: o.dropped[d]}
}

// nodeAddresses is the node's addresses as the verdict reads them (verdict.Addresses).
type nodeAddresses struct {
	assigned  map[netip.Addr]bool
	nodePorts map[corev1.IPFamily]bool
}

func newNodeAddresses(assigned, nodePorts []net.IP) nodeAddresses {
	n := nodeAddresses{assigned: map[netip.Addr]bool{}, nodePorts: map[corev1.IPFamily]bool{}}
	for _, ip := range assigned {
		if a, ok := netip.AddrFromSlice(ip); ok {
			n.assigned[a.Unmap()] = true
		}
	}
	for _, ip := range nodePorts {
		if ip.To4() != nil {
			n.nodePorts[corev1.IPv4Protocol] = true
		} else {
			n.nodePorts[corev1.IPv6Protocol] = true
		}
	}
	return n
}

func (n nodeAddresses) Assigned(addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && n.assigned[a.Unmap()]
}

func (n nodeAddresses) NodePorts(f corev1.IPFamily) bool { return n.nodePorts[f] }

// arrivalTotals makes the node-wide arrival counts monotonic: a destination's count restarts when it stops
// being watched (its Service deleted) and is watched again, and the sum over destinations would fall with
// every deleted Service. The exporter owns one; concurrent scrapes share it.
type arrivalTotals struct {
	mu    sync.Mutex
	last  map[arrivals.Dest]uint64
	total map[arrivalKey]uint64
	// dropped is when each destination was first found dropped (verdict.Observation.DroppedSince).
	dropped map[verdict.Destination]time.Time
}

type arrivalKey struct {
	kind   verdict.Kind // an entry's, or kindHealthCheck
	family string
}

func newArrivalTotals() *arrivalTotals {
	return &arrivalTotals{last: map[arrivals.Dest]uint64{}, total: map[arrivalKey]uint64{},
		dropped: map[verdict.Destination]time.Time{}}
}

// add folds one snapshot's counts into the totals and returns a copy of them. kinds says which kind each
// watched destination is (a destination of two Services counts once, as the first one's).
func (t *arrivalTotals) add(s *arrivals.Snapshot, kinds map[arrivals.Dest]verdict.Kind) map[arrivalKey]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[arrivals.Dest]bool, len(s.Dests)+len(s.HealthChecks))
	fold := func(d arrivals.Dest, n, restored uint64, kind verdict.Kind) {
		seen[d] = true
		last, ok := t.last[d]
		switch {
		case !ok:
			// First seen by this exporter's totals: everything it counted since it was watched is new, but for
			// the attempts an earlier exporter counted (carried over by the state file).
			t.total[arrivalKey{kind, familyName(d)}] += n - min(restored, n)
		case n >= last:
			t.total[arrivalKey{kind, familyName(d)}] += n - last
		default:
			t.total[arrivalKey{kind, familyName(d)}] += n // watched anew: counted from zero again
		}
		t.last[d] = n
	}
	for _, d := range s.Dests {
		fold(d.Dest, d.Attempts, d.Restored, kinds[d.Dest])
	}
	for _, h := range s.HealthChecks {
		fold(h.Dest, h.Probes, 0, kindHealthCheck)
	}
	for d := range t.last {
		if !seen[d] {
			delete(t.last, d)
		}
	}
	out := make(map[arrivalKey]uint64, len(t.total))
	for k, v := range t.total {
		out[k] = v
	}
	return out
}

// droppedSince returns when each destination was first found dropped.
func (t *arrivalTotals) droppedSince() map[verdict.Destination]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[verdict.Destination]time.Time, len(t.dropped))
	for k, v := range t.dropped {
		out[k] = v
	}
	return out
}

// recordDropped remembers, from one scrape's verdicts taken at now, since when each destination is dropped;
// one not dropped (or gone) is forgotten.
func (t *arrivalTotals) recordDropped(results []ServiceResult, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[verdict.Destination]bool{}
	for _, r := range results {
		for _, fv := range r.Verdict.Families {
			for _, e := range fv.Entries {
				if !e.Dropped {
					continue
				}
				seen[e.Destination] = true
				if _, ok := t.dropped[e.Destination]; !ok {
					t.dropped[e.Destination] = now
				}
			}
		}
	}
	deleteUnseen(t.dropped, seen)
}

func familyName(d arrivals.Dest) string {
	if d.IPv6() {
		return string(corev1.IPv6Protocol)
	}
	return string(corev1.IPv4Protocol)
}

// ArrivalsState is one scrape's view of the arrivals meter.
type ArrivalsState struct {
	// Enabled: the exporter runs a meter (--arrivals.enabled).
	Enabled bool
	// Snapshot is the meter's counts; nil when disabled.
	Snapshot *arrivals.Snapshot
	// WatchErr is why the meter refused this scrape's Watch (it keeps counting the last one).
	WatchErr error
	// Totals are the node's arrivals per kind and family, monotonic.
	Totals map[arrivalKey]uint64
}

var (
	arrivalsTotal = newMetric("arrivals_total", prometheus.CounterValue,
		"New external connection attempts (TCP SYN, SCTP INIT; UDP datagrams) that reached this node for Local Services' destinations, by kind (node_port, load_balancer_ip, external_ip) and IP family, from the arrivals meter; health_check counts probes of health check node ports from outside the node. Counts start when the exporter starts.",
		"kind", "ip_family")
	healthCheckLastProbe = newMetric("health_check_last_probe_timestamp_seconds", prometheus.GaugeValue,
		"When a probe from outside the node last reached one of its health check node ports (a load balancer checking it); absent when none has since the exporter started.")
	arrivalsMeterState = newMetric("arrivals_meter_state", prometheus.GaugeValue,
		"The arrivals meter's state, one-hot over ok, permission_denied (no CAP_NET_RAW), failed, closed and disabled: anything but ok means arrivals are not observed, never that none arrive.",
		"state")
	arrivalsMeterStart = newMetric("arrivals_meter_start_time_seconds", prometheus.GaugeValue,
		"When the arrivals meter started counting (Unix time).")
	arrivalsMissed = newMetric("arrivals_missed_total", prometheus.CounterValue,
		"Packets the arrivals meter could not count, by IP family and cause: ring_full (the kernel dropped them) or rate_limit (over the meter's packet budget). Above zero, every arrival count is a lower bound (the meter is overloaded).",
		"ip_family", "cause")
	serviceArrivals = newMetric("service_arrivals_total", prometheus.CounterValue,
		"New external connection attempts that reached this node for the Service, by destination kind and IP family (arrivals meter; counted since the destination was first watched, carried over an exporter restart while its run is in the state file).",
		"namespace", "service", "kind", "ip_family")
)

// Arrivals exports, per node, what the arrivals meter observes: where external traffic really goes, who
// health-checks the node, and whether the meter sees at all. Per-Service counts are the service_arrivals
// collector's (off by default: the series budget).
type Arrivals struct{}

// NewArrivals returns the arrivals collector.
func NewArrivals() *Arrivals { return &Arrivals{} }

func (*Arrivals) Name() string { return "arrivals" }

func (*Arrivals) Metrics() []*Metric {
	return []*Metric{arrivalsTotal, healthCheckLastProbe, arrivalsMeterState, arrivalsMeterStart, arrivalsMissed}
}

func (*Arrivals) Inputs() []Input { return []Input{InputArrivals} }

func (*Arrivals) Update(st *State, out *Sink) error {
	a := st.Arrivals
	state := meterDisabled
	if a.Snapshot != nil {
		state = a.Snapshot.Status.String()
	}
	for _, s := range meterStates {
		out.send(arrivalsMeterState, boolFloat(s == state), s)
	}
	if a.Snapshot == nil {
		return nil
	}
	snap := a.Snapshot
	out.send(arrivalsMeterStart, float64(snap.Since.UnixNano())/1e9)
	for _, f := range snap.Families {
		out.send(arrivalsMissed, float64(f.Dropped), f.Family, string(missedRingFull))
		out.send(arrivalsMissed, float64(f.Shed), f.Family, string(missedRateLimit))
	}
	if snap.Status != arrivals.StatusOK {
		return errors.Join(snap.Err, a.WatchErr)
	}
	for _, kind := range []verdict.Kind{verdict.NodePort, verdict.LoadBalancerIP, verdict.ExternalIP, kindHealthCheck} {
		for _, fam := range []string{string(corev1.IPv4Protocol), string(corev1.IPv6Protocol)} {
			out.send(arrivalsTotal, float64(a.Totals[arrivalKey{kind, fam}]), string(kind), fam)
		}
	}
	var last time.Time
	for _, h := range snap.HealthChecks {
		if h.LastSeen.After(last) {
			last = h.LastSeen
		}
	}
	if !last.IsZero() {
		out.send(healthCheckLastProbe, float64(last.UnixNano())/1e9)
	}
	return a.WatchErr
}

// ServiceArrivals exports each Local Service's arrivals by destination kind and family.
type ServiceArrivals struct{}

// NewServiceArrivals returns the service_arrivals collector.
func NewServiceArrivals() *ServiceArrivals { return &ServiceArrivals{} }

func (*ServiceArrivals) Name() string { return "service_arrivals" }

func (*ServiceArrivals) Metrics() []*Metric { return []*Metric{serviceArrivals} }

func (*ServiceArrivals) Inputs() []Input { return []Input{InputAPI, InputArrivals} }

func (*ServiceArrivals) Update(st *State, out *Sink) error {
	if st.APIErr != nil {
		return st.APIErr
	}
	snap := st.Arrivals.Snapshot
	if snap == nil || snap.Status != arrivals.StatusOK {
		return nil // arrivals_meter_state says why
	}
	type key struct{ kind, family string }
	for _, r := range st.Services {
		sums := map[key]uint64{}
		for _, fam := range r.Service.Families {
			destinations(r.Service, fam, func(d verdict.Destination) {
				ad, ok := destOf(d)
				if !ok {
					return
				}
				k := key{string(d.Kind), string(d.Family)}
				c, _ := snap.Dest(ad)
				sums[k] += c.Attempts
			})
		}
		for k, n := range sums {
			out.send(serviceArrivals, float64(n), r.Service.Namespace, r.Service.Name, k.kind, k.family)
		}
	}
	return nil
}
