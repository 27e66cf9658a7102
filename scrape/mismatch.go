package scrape

import (
	"net/netip"
	"slices"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// The comparison of kube-proxy's rules with the API view, port by port, that the gatherer decides once per scrape
// (PortResult.Mismatch, GoneEndpoints) and the rules collector renders (localtraffic_rules_mismatch).

// endpointMatch compares the local endpoints kube-proxy's rules send one Service port's external traffic to, in
// one family, with the API's, endpoint by endpoint (IP and target port), not by count: with kube-proxy stopped
// or stuck, a pod replaced on the same node leaves rules that DNAT to the deleted pod's address while the count
// still agrees.
type endpointMatch struct {
	// named: the rules name every endpoint they count (dataplane.PortState.Endpoints), so identities were compared.
	// A state that only counts (a snapshot built from counts) is compared by count alone.
	named bool
	// stale: rule endpoints that are not among the API's Local endpoints of the port (LocalAddrs).
	stale int
	// gone: of those, the ones whose address the API no longer lists on this node at all (LocalAddrs and
	// LocalUnused): a deleted pod. Traffic kube-proxy sends there is lost.
	gone int
}

// matchEndpoints compares st's endpoints with the API's for sp.
func matchEndpoints(sp dataplane.ServicePort, p kubeview.PortEndpoints, st dataplane.PortState) endpointMatch {
	m := endpointMatch{named: len(st.Endpoints) == st.LocalEndpoints}
	if !m.named {
		return m
	}
	is := func(e dataplane.Endpoint, addrs []netip.AddrPort) bool {
		for _, a := range addrs {
			if e.Is(sp, a) {
				return true
			}
		}
		return false
	}
	for _, e := range st.Endpoints {
		if is(e, p.LocalAddrs) {
			continue
		}
		m.stale++
		exists := is(e, p.LocalUnused)
		if e.Addr.IsValid() {
			// The pod is there as long as its address is, whatever the port: a port changed under a stale rule
			// is refused by the pod, not lost.
			for _, a := range append(slices.Clip(p.LocalAddrs), p.LocalUnused...) {
				exists = exists || a.Addr() == e.Addr.Addr()
			}
		}
		if !exists {
			m.gone++
		}
	}
	return m
}

// allGone: the rules send the port's external traffic only to endpoints that no longer exist, so this node
// drops all of it in fact, though no drop rule says so.
func (m endpointMatch) allGone(st dataplane.PortState) bool {
	return m.gone > 0 && m.gone == st.LocalEndpoints
}

// portMismatch: the API view and kube-proxy's rules disagree about a port. Only ports with an external way in
// are judged: without a NodePort or external address kube-proxy programs no drop, so there is nothing local to
// compare. Rules that send traffic to endpoints the API no longer has disagree whatever else the API says;
// otherwise only ports with an endpoint somewhere are judged (without one kube-proxy rejects everywhere), by
// the drop, and then by which local endpoints (IP and port), not only how many.
// A short disagreement is normal (kube-proxy syncs at most once a second); alerts wait with `for:`.
func portMismatch(p kubeview.PortEndpoints, st dataplane.PortState, m endpointMatch, reachable bool) bool {
	switch {
	case !reachable:
		return false
	case m.gone > 0:
		return true
	case !p.ClusterWide:
		return false
	}
	apiDrops := p.Local == 0
	if apiDrops != st.Drop {
		return true
	}
	return !apiDrops && (st.LocalEndpoints != p.Local || m.named && m.stale > 0)
}
