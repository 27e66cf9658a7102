package scrape

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/verdict"
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
	DefaultQuiet = arrivals.DefaultQuietPeriod
)

// KindHealthCheck is the arrivals' kind of a health check node port's probes: arrivals_total counts them beside
// the entry kinds (verdict.NodePort ...), though they are no way in for a Service's traffic.
const KindHealthCheck verdict.Kind = "health_check"

// MeterDest is the meter's destination for a verdict destination; ok is false for a protocol or address it
// cannot count.
func MeterDest(d verdict.Destination) (arrivals.Dest, bool) {
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
func Destinations(svc kubeview.ServiceState, fam kubeview.FamilyEndpoints, each func(verdict.Destination)) {
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
// check node port, on the node's NodePort addresses, leaving out the sources kube-proxy calls local
// (internalSources).
func arrivalsWatch(services []kubeview.ServiceState, nodePortAddrs []net.IP, internal []netip.Prefix, internalLinks []arrivals.LinkMatch) arrivals.Watch {
	w := arrivals.Watch{Internal: internal, InternalLinks: internalLinks}
	for _, ip := range nodePortAddrs {
		if a, ok := netip.AddrFromSlice(ip); ok && !a.Unmap().IsUnspecified() {
			w.NodeAddrs = append(w.NodeAddrs, a.Unmap())
		}
	}
	// Each destination's owners, by UID: what the meter learnt at a destination dies with the Service whose
	// traffic it was (a NodePort freed by a deleted Service and given to a new one starts afresh).
	owners := map[arrivals.Dest][]string{}
	own := func(d arrivals.Dest, svc kubeview.ServiceState) {
		if svc.UID != "" && !slices.Contains(owners[d], string(svc.UID)) {
			owners[d] = append(owners[d], string(svc.UID))
		}
	}
	for _, svc := range services {
		for _, fam := range svc.Families {
			Destinations(svc, fam, func(d verdict.Destination) {
				if ad, ok := MeterDest(d); ok {
					w.Dests = append(w.Dests, ad)
					own(ad, svc)
				}
			})
			if hc, ok := healthCheckDest(svc, fam.Family); ok {
				w.HealthChecks = append(w.HealthChecks, hc)
				own(hc, svc)
				// Some load balancers address their checks to the load balancer IP (GCE's L4 checks arrive
				// with it as destination): probes of the health check node port there are probes too.
				lbIPs, _ := svc.AddressesOf(fam.Family)
				for _, ip := range lbIPs {
					if a, err := netip.ParseAddr(ip); err == nil {
						h := arrivals.Dest{Protocol: arrivals.TCP, Addr: a.Unmap(), Port: hc.Port}
						w.HealthChecks = append(w.HealthChecks, h)
						own(h, svc)
					}
				}
			}
		}
	}
	if len(owners) > 0 {
		w.Owners = make(map[arrivals.Dest]string, len(owners))
		for d, uids := range owners {
			slices.Sort(uids) // the same Services, however listed
			w.Owners[d] = strings.Join(uids, ",")
		}
	}
	// A load balancer IP whose Service port is another Service's health check node port: a destination, not a
	// probe (the Watch takes no address and port as both).
	dests := make(map[arrivals.Dest]bool, len(w.Dests))
	for _, d := range w.Dests {
		dests[d] = true
	}
	w.HealthChecks = slices.DeleteFunc(w.HealthChecks, func(h arrivals.Dest) bool { return !h.IsNode() && dests[h] })
	return w
}

// internalSources are the arrivals kube-proxy sends to every endpoint of a Local Service, so that none of them
// is lost for lack of a local one (its KUBE-EXT / external-* chains, before the policy): what its local detector
// calls pod traffic (det, from /configz: the first CIDR of each family in ClusterCIDR and NodeCIDR mode, the
// arrival interface in BridgeInterface and InterfaceNamePrefix mode), and in every mode traffic from the node's
// own addresses (`--src-type LOCAL`, nftables' `fib saddr type local`). A family without a detector has no pod
// traffic: a pod's attempt at a destination the node drops is lost like a client's, and counts. With det nil
// (kube-proxy's configuration unread) this node's pod CIDRs stand in for it. extra is
// --arrivals.internal-cidrs, always internal.
func internalSources(det *nodeprobe.LocalDetector, podCIDRs []string, local []net.IP, extra []netip.Prefix) ([]netip.Prefix, []arrivals.LinkMatch) {
	out := slices.Clone(extra)
	add := func(cidr string) {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			out = append(out, p)
		}
	}
	for _, ip := range local {
		// Link-local and loopback sources reach no Service destination the meter watches from outside.
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap().IsGlobalUnicast() {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	if det == nil {
		for _, c := range podCIDRs {
			add(c)
		}
		return out, nil
	}
	var links []arrivals.LinkMatch
	switch det.Mode {
	case nodeprobe.LocalModeBridgeInterface:
		if det.BridgeInterface != "" {
			links = append(links, arrivals.LinkMatch{Name: det.BridgeInterface})
		}
	case nodeprobe.LocalModeInterfaceNamePrefix:
		if det.InterfaceNamePrefix != "" {
			links = append(links, arrivals.LinkMatch{Name: det.InterfaceNamePrefix, Prefix: true})
		}
	default:
		for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
			if c := det.FamilyCIDR(string(f), podCIDRs); c != "" {
				add(c)
			}
		}
	}
	return out, links
}

// observations adapts one scrape's meter snapshot to the verdict (verdict.Observed): the evidence of
// arrivals, in one place.
type observations struct {
	snap  *arrivals.Snapshot // nil: no meter
	quiet time.Duration
	now   time.Time
	// dropped is when each destination was first found dropped, decision after decision (arrivalTotals), for
	// the Service owner (its UID).
	dropped func(d verdict.Destination, owner types.UID) time.Time
	// owner is the UID of the Service being decided: a destination's dropped-since time recorded for another
	// Service of its name (deleted and created again while the exporter was down) is not this one's.
	owner types.UID
	// overloaded: the meter missed packets (ring full, rate budget) within the quiet period. Its silence then
	// says nothing: a destination without attempts counted is not observed, rather than observed quiet.
	overloaded bool
}

// Observe implements verdict.Observed.
func (o *observations) Observe(d verdict.Destination) verdict.Observation {
	if o.snap == nil || o.snap.Status != arrivals.StatusOK {
		return verdict.Observation{}
	}
	ad, ok := MeterDest(d)
	if !ok {
		return verdict.Observation{}
	}
	c, ok := o.snap.Dest(ad)
	if !ok {
		return verdict.Observation{}
	}
	ongoing := c.Attempts > 0 && o.now.Sub(c.LastSeen) < o.quiet
	if o.overloaded && !ongoing {
		return verdict.Observation{} // the attempts it missed may have been this destination's
	}
	// Repeated arrivals (sources.go in the meter): a port scan's single SYNs are counted, but neither lose
	// traffic nor break the silence of a destination nothing else reaches.
	rep := o.repeated(c.Repeated)
	obs := verdict.Observation{Watched: true, Attempts: c.Attempts, ActiveSince: c.ActiveSince, LastSeen: c.LastSeen,
		Ongoing: ongoing, Silent: !rep.Ongoing && o.now.Sub(c.WatchedSince) >= o.quiet, DroppedSince: o.dropped(d, o.owner),
		LastNewFlow: c.LastNewFlow, Repeats: true, Repeated: rep}
	o.addSources(&obs, c)
	return obs
}

// repeated is the meter's count of repeated arrivals as the verdict reads it.
func (o *observations) repeated(r arrivals.RepeatCount) verdict.Repeated {
	return verdict.Repeated{Attempts: r.Attempts, ActiveSince: r.ActiveSince, LastSeen: r.LastSeen,
		Ongoing: r.Attempts > 0 && o.now.Sub(r.LastSeen) < o.quiet}
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
	total map[ArrivalKey]uint64
	// dropped is when each destination was first found dropped (verdict.Observation.DroppedSince).
	dropped map[verdict.Destination]dropMark
	// folded is the Taken time of the last snapshot folded into total; recorded, of the last scrape that
	// recorded dropped destinations.
	folded, recorded time.Time
	// missed is the meter's missed packets (ring full, shed) as last folded; missedGrew, when they last grew.
	missed     uint64
	missedGrew time.Time
}

// dropMark is when a destination was first found dropped, and for which Service: its UID ("" where unknown: a
// state file from an exporter that did not write it, a Service without one in tests). A Service deleted and
// created again under its name while the exporter was down is another Service, whose drop begins anew.
type dropMark struct {
	since time.Time
	owner types.UID
}

// of is the mark's time for the Service owner: zero when the mark is another Service's.
func (m dropMark) of(owner types.UID) time.Time {
	if m.owner != "" && owner != "" && m.owner != owner {
		return time.Time{}
	}
	return m.since
}

// ArrivalKey is one of ArrivalsState.Totals: an arrivals kind in one IP family.
type ArrivalKey struct {
	Kind   verdict.Kind // an entry's, or KindHealthCheck
	Family string
}

func newArrivalTotals() *arrivalTotals {
	return &arrivalTotals{last: map[arrivals.Dest]uint64{}, total: map[ArrivalKey]uint64{},
		dropped: map[verdict.Destination]dropMark{}}
}

// add folds one snapshot's counts into the totals and returns a copy of them. kinds says which kind each
// watched destination is (a destination of two Services counts once, as the first one's).
func (t *arrivalTotals) add(s *arrivals.Snapshot, kinds map[arrivals.Dest]verdict.Kind) map[ArrivalKey]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.folded.IsZero() && !s.Taken.After(t.folded) {
		// Two scrapes at once: the older snapshot came second. Its counts are behind the ones folded already;
		// folded again they would read as a restart of each count and add it whole a second time.
		return maps.Clone(t.total)
	}
	t.folded = s.Taken
	var missed uint64
	sampling := false
	for _, f := range s.Families {
		missed += f.Dropped + f.Shed + f.Sampled
		// The filter's sample is of sources: while it samples, a source out of it is not seen at all, and the
		// estimate of what it left out stands still when every source counted is in it.
		sampling = sampling || f.Sampling > 1
	}
	if missed > t.missed || sampling {
		t.missedGrew = s.Taken
	}
	t.missed = missed
	seen := make(map[arrivals.Dest]bool, len(s.Dests)+len(s.HealthChecks))
	fold := func(d arrivals.Dest, n, restored uint64, kind verdict.Kind) {
		seen[d] = true
		last, ok := t.last[d]
		switch {
		case !ok:
			// First seen by this exporter's totals: everything it counted since it was watched is new, but for
			// the attempts an earlier exporter counted (carried over by the state file).
			t.total[ArrivalKey{kind, familyName(d)}] += n - min(restored, n)
		case n >= last:
			t.total[ArrivalKey{kind, familyName(d)}] += n - last
		default:
			t.total[ArrivalKey{kind, familyName(d)}] += n // watched anew: counted from zero again
		}
		t.last[d] = n
	}
	for _, d := range s.Dests {
		fold(d.Dest, d.Attempts, d.Restored, kinds[d.Dest])
	}
	for _, h := range s.HealthChecks {
		fold(h.Dest, h.Probes, 0, KindHealthCheck)
	}
	for d := range t.last {
		if !seen[d] {
			delete(t.last, d)
		}
	}
	return maps.Clone(t.total)
}

// overloaded reports whether the meter missed packets within quiet before now.
func (t *arrivalTotals) overloaded(now time.Time, quiet time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.missedGrew.IsZero() && now.Sub(t.missedGrew) < quiet
}

// droppedSince returns when each destination was first found dropped, as of a scrape at now. After a gap
// without scrapes longer than quiet (the exporter not scraped, or stalled) it forgets them: what happened in
// the gap is unknown (the node may have served and dropped again), and an old "dropped since" would count the
// whole gap against the grace window and page at once.
func (t *arrivalTotals) droppedSince(now time.Time, quiet time.Duration) map[verdict.Destination]dropMark {
	out := map[verdict.Destination]dropMark{}
	t.eachDropped(now, quiet, func(d verdict.Destination, m dropMark) { out[d] = m })
	return out
}

// eachDropped hands fn each destination's dropped-since time as droppedSince returns them, without copying
// them: the state file keeps only the few of destinations where attempts arrived, of a thousand dropped.
func (t *arrivalTotals) eachDropped(now time.Time, quiet time.Duration, fn func(verdict.Destination, dropMark)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.recorded.IsZero() && now.Sub(t.recorded) > quiet {
		clear(t.dropped)
	}
	for k, v := range t.dropped {
		fn(k, v)
	}
}

// droppedAt is when d was first found dropped for the Service owner (zero: it is not), as of now: the node
// model decides one Service at a time and looks each destination up rather than copying them all at every step.
func (t *arrivalTotals) droppedAt(d verdict.Destination, owner types.UID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped[d].of(owner)
}

// forgetIfStalled forgets every dropped-since time when nobody looked at the drops for longer than quiet
// before now (see droppedSince).
func (t *arrivalTotals) forgetIfStalled(now time.Time, quiet time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.recorded.IsZero() && now.Sub(t.recorded) > quiet {
		clear(t.dropped)
	}
}

// prune forgets the dropped-since times of destinations no result has (a Service gone, a port removed, an
// entry the state file carried for a destination that no longer exists).
func (t *arrivalTotals) prune(results []*ServiceResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[verdict.Destination]bool{}
	for _, r := range results {
		for _, fv := range r.Verdict.Families {
			for _, e := range fv.Entries {
				seen[e.Destination] = true
			}
		}
	}
	deleteUnseen(t.dropped, seen)
}

// recordDropped remembers, from one scrape's verdicts taken at now, since when each destination is dropped;
// one not dropped (or gone) is forgotten.
func (t *arrivalTotals) recordDropped(results []*ServiceResult, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.recorded) {
		return // a scrape older than the last one recorded (two at once): it knows less
	}
	t.recorded = now
	seen := map[verdict.Destination]bool{}
	for _, r := range results {
		t.markDropped(r, now, seen)
	}
	deleteUnseen(t.dropped, seen)
}

// markDropped records now for each destination r drops that has no dropped-since time yet for r's Service, and
// adds every destination r drops to seen. The caller holds t.mu.
func (t *arrivalTotals) markDropped(r *ServiceResult, now time.Time, seen map[verdict.Destination]bool) {
	for _, fv := range r.Verdict.Families {
		for _, e := range fv.Entries {
			if !e.Dropped {
				continue
			}
			seen[e.Destination] = true
			if t.dropped[e.Destination].of(r.Service.UID).IsZero() {
				t.dropped[e.Destination] = dropMark{since: now, owner: r.Service.UID}
			}
		}
	}
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
	Totals map[ArrivalKey]uint64
}

// recordService remembers, from one Service's verdict decided at now (r; nil: the Service is gone), since
// when each of its destinations is dropped; one of its destinations not dropped now, or only in its previous
// verdict (old), is forgotten. The node model decides one Service at a time: this is recordDropped for one,
// at the cost of its own destinations, not of every destination of the node.
func (t *arrivalTotals) recordService(old, r *ServiceResult, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[verdict.Destination]bool{}
	if r != nil {
		t.recorded = now
		t.markDropped(r, now, seen)
	}
	for _, res := range []*ServiceResult{old, r} {
		if res == nil {
			continue
		}
		for _, fv := range res.Verdict.Families {
			for _, e := range fv.Entries {
				if !seen[e.Destination] {
					delete(t.dropped, e.Destination)
				}
			}
		}
	}
}

// looked records that the node model looked at every destination's drop at now (it decides again every
// Service whose drop could have changed): a gap in the model's looking, unlike a gap in Prometheus' scrapes,
// means the process stalled.
func (t *arrivalTotals) looked(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.After(t.recorded) {
		t.recorded = now
	}
}

// stalled: nobody looked at the drops for longer than quiet before now (droppedSince forgets them then).
func (t *arrivalTotals) stalled(now time.Time, quiet time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.recorded.IsZero() && now.Sub(t.recorded) > quiet
}

// overloadedUntil is when overloaded turns false unless the meter misses more; zero when it never missed.
func (t *arrivalTotals) overloadedUntil(quiet time.Duration) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.missedGrew.IsZero() {
		return time.Time{}
	}
	return t.missedGrew.Add(quiet)
}
