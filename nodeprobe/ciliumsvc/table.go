package ciliumsvc

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// portKey names what the reader can tell apart of a Service port: Cilium's model names the Service
// (namespace and name) and the frontend's protocol, not the Service port's name. Every port of one
// protocol of a Service shares one PortState (see merge in buildTable).
type portKey struct {
	namespace, name, protocol, family string
}

// table is one read of the service table: per Service, protocol and family, what its external destinations
// do. Immutable once built.
type table struct {
	ports    map[portKey]dataplane.PortState
	families []string
	info     dataplane.Info
}

func (t *table) HasFamily(family string) bool { return slices.Contains(t.families, family) }

// Family answers for every port of sp's protocol alike: the model gives no port name (see buildTable).
func (t *table) Family(sp dataplane.ServicePort, family string) dataplane.PortState {
	return t.ports[portKey{namespace: sp.Namespace, name: sp.Name, protocol: strings.ToUpper(sp.Protocol), family: family}]
}

func (t *table) Info() dataplane.Info { return t.info }

// group is one Service's frontends of one protocol and family, as read.
type group struct {
	local bool // externalTrafficPolicy Local
	// servicePorts are the ports of its ClusterIP frontends: how many Service ports share the protocol.
	servicePorts map[uint16]bool
	// anyUsable: some frontend, of any type and scope, has a backend the datapath would use — the Service has
	// an endpoint somewhere.
	anyUsable bool
	// external are its external destinations (NodePort, load balancer IPs, externalIPs) in the external scope.
	external []destination
}

// destination is one external destination and the backends the datapath would send its new connections to.
type destination struct {
	address string // "" for the NodePort, else the IP in canonical form
	port    uint16
	usable  []netip.AddrPort
}

// buildTable turns the agent's answer into the seam's values.
//
// The mapping to dataplane.ServicePort: Cilium's model carries the Service's namespace and name and the
// frontend's protocol, not the Service port's name, and the reader has no API view to look the name up by
// port number. So one PortState answers for every port of a Service with that protocol:
//   - drops are per destination and each names its own port (the NodePort, or a load balancer IP or
//     externalIP with its Service port), so DropsTo stays exact for every port of the Service;
//   - with one Service port of that protocol (nearly every Service), the local endpoints are the backends as
//     Cilium lists them, address and port;
//   - with several, the local endpoints are counted by address (Endpoint.Addr with port 0): one per pod,
//     which is each port's count when every pod serves every port; Reject (no endpoint anywhere) holds only
//     when no port of that protocol has one.
func buildTable(svcs []service) (map[portKey]dataplane.PortState, []string, error) {
	groups := map[portKey]*group{}
	for i, s := range svcs {
		spec := s.Spec
		if spec == nil || spec.FrontendAddress == nil {
			return nil, nil, fmt.Errorf("service entry %d has no frontend", i)
		}
		fe := spec.FrontendAddress
		flags := spec.Flags
		if flags == nil || flags.Name == "" {
			continue // not a Service's frontend (a local redirect's, say): no Service port to speak for
		}
		addr, err := netip.ParseAddr(fe.IP)
		if err != nil {
			return nil, nil, fmt.Errorf("service %s/%s: frontend address %q: %w", flags.Namespace, flags.Name, fe.IP, err)
		}
		addr = addr.Unmap()
		family := dataplane.FamilyIPv4
		if addr.Is6() {
			family = dataplane.FamilyIPv6
		}
		k := portKey{namespace: flags.Namespace, name: flags.Name, protocol: strings.ToUpper(fe.Protocol), family: family}
		g := groups[k]
		if g == nil {
			g = &group{servicePorts: map[uint16]bool{}}
			groups[k] = g
		}
		policy := cmp.Or(flags.ExtTrafficPolicy, flags.TrafficPolicy)
		g.local = g.local || policy == policyLocal
		usable, err := usableBackends(spec.BackendAddresses)
		if err != nil {
			return nil, nil, fmt.Errorf("service %s/%s, frontend %s: %w", flags.Namespace, flags.Name,
				netip.AddrPortFrom(addr, fe.Port), err)
		}
		g.anyUsable = g.anyUsable || len(usable) > 0
		if fe.Scope == scopeInternal {
			continue // what traffic from inside the cluster gets
		}
		switch flags.Type {
		case typeClusterIP:
			g.servicePorts[fe.Port] = true
		case typeNodePort:
			g.external = append(g.external, destination{port: fe.Port, usable: usable})
		case typeLoadBalancer, typeExternalIPs:
			g.external = append(g.external, destination{address: addr.String(), port: fe.Port, usable: usable})
		}
	}
	ports := make(map[portKey]dataplane.PortState, len(groups))
	var v4, v6 bool
	for k, g := range groups {
		ports[k] = g.portState()
		v4 = v4 || k.family == dataplane.FamilyIPv4
		v6 = v6 || k.family == dataplane.FamilyIPv6
	}
	var families []string
	if v4 {
		families = append(families, dataplane.FamilyIPv4)
	}
	if v6 {
		families = append(families, dataplane.FamilyIPv6)
	}
	return ports, families, nil
}

// usableBackends are the backends the datapath sends new connections to: the active ones, or the terminating
// ones when none is active; never the quarantined ones nor those in maintenance.
func usableBackends(bes []*backendAddress) ([]netip.AddrPort, error) {
	var active, terminating []netip.AddrPort
	for _, be := range bes {
		if be == nil || be.IP == nil {
			return nil, fmt.Errorf("backend without an address")
		}
		ip, _, _ := strings.Cut(*be.IP, "@") // a mesh's cluster id
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("backend address %q: %w", *be.IP, err)
		}
		ap := netip.AddrPortFrom(a.Unmap(), be.Port)
		switch be.State {
		case stateActive, "": // no state: an agent that does not track it serves every backend
			active = append(active, ap)
		case stateTerminating:
			terminating = append(terminating, ap)
		}
	}
	if len(active) > 0 {
		return active, nil
	}
	return terminating, nil
}

// portState is what the group's external destinations do, as the seam says it.
func (g *group) portState() dataplane.PortState {
	st := dataplane.PortState{Programmed: true}
	if !g.anyUsable {
		st.Reject = true // no endpoint anywhere: Cilium's no-backend response, for every destination
		return st
	}
	if !g.local {
		return st // Cluster policy: every node forwards; as for kube-proxy, nothing local is counted
	}
	byAddr := len(g.servicePorts) > 1
	seen := map[netip.AddrPort]bool{}
	drops := map[dataplane.DropRule]bool{}
	for _, d := range g.external {
		if len(d.usable) == 0 {
			drops[dataplane.DropRule{Address: d.address, Port: int32(d.port)}] = true
			continue
		}
		for _, ap := range d.usable {
			if byAddr {
				ap = netip.AddrPortFrom(ap.Addr(), 0)
			}
			if !seen[ap] {
				seen[ap] = true
				st.Endpoints = append(st.Endpoints, dataplane.Endpoint{Addr: ap})
			}
		}
	}
	slices.SortFunc(st.Endpoints, func(a, b dataplane.Endpoint) int { return a.Addr.Compare(b.Addr) })
	st.LocalEndpoints = len(st.Endpoints)
	for d := range drops {
		st.Drops = append(st.Drops, d)
	}
	// The seam's order: the NodePort's first, then by address and port.
	slices.SortFunc(st.Drops, func(a, b dataplane.DropRule) int {
		switch {
		case a.Address == "" && b.Address != "":
			return -1
		case a.Address != "" && b.Address == "":
			return 1
		case a.Address != b.Address:
			return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
		}
		return cmp.Compare(a.Port, b.Port)
	})
	st.Drop = len(st.Drops) > 0
	return st
}
