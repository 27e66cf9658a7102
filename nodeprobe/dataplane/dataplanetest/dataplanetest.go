// Package dataplanetest is the dataplane seam's fixture table, for the tests of every dataplane reader: one
// set of Service states (a world: one node's Services, their external destinations and their endpoints, per
// IP family) and what the seam must say of each (Table), in words any reader's read can be put in (Says).
// Each reader's test renders the worlds in its own input format — kube-proxy's iptables-save text and nft
// JSON (nodeprobe/kernelrules), Cilium's /v1/service answer (nodeprobe/ciliumsvc) — reads them through the
// seam and runs the table (RunTable), so that readers that pass give the node model the same verdict inputs
// for the same Services. Tests only: no production package imports it.
package dataplanetest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// The worlds.
const (
	// WorldScenario: one node's Services in every state the seam tells apart.
	WorldScenario = "scenario"
	// WorldDual: a dual-stack node whose two families disagree, as they do when a Service's IPv4 and IPv6
	// EndpointSlices list different pods on this node.
	WorldDual = "dual-stack"
)

// Worlds lists the worlds, in the table's order.
func Worlds() []string { return []string{WorldScenario, WorldDual} }

// Service is one Service port of a world in one family, as the API gives it.
type Service struct {
	Namespace, Name string
	PortName        string // "" when unnamed
	Protocol        string // TCP, UDP or SCTP, as the API spells it
	ClusterIP       string
	// Port is the Service port, NodePort its NodePort (0: none), HealthCheckNodePort kube-proxy's (or its
	// replacement's) health check node port (0: none).
	Port, NodePort, HealthCheckNodePort int
	LoadBalancerIPs, ExternalIPs        []string
	// ExternalLocal and InternalLocal: externalTrafficPolicy and internalTrafficPolicy Local.
	ExternalLocal, InternalLocal bool
	// Affinity: sessionAffinity ClientIP.
	Affinity  bool
	Endpoints []Endpoint
}

// Endpoint is one endpoint of a Service port: its address, target port, and whether its pod runs on this node.
type Endpoint struct {
	IP    string
	Port  int
	Local bool
}

// ServicePort is the seam's name of the Service port.
func (s Service) ServicePort() dataplane.ServicePort {
	return dataplane.ServicePort{Namespace: s.Namespace, Name: s.Name, Port: s.PortName, Protocol: s.Protocol}
}

// Services are a world's Service ports in one family (IPv6 when v6), in a fixed order (fixtures are rendered
// from it).
func Services(world string, v6 bool) []Service {
	a := func(v4, v6addr string) string {
		if v6 {
			return v6addr
		}
		return v4
	}
	if world == WorldDual {
		lbLocal, npLocal := !v6, v6
		return []Service{
			{ // LoadBalancer: a local IPv4 endpoint, none in IPv6: IPv6 drops its NodePort and LB IP, IPv4 forwards.
				Namespace: "kubelings", Name: "dual-lb", PortName: "http", Protocol: "TCP",
				ClusterIP: a("10.96.0.40", "fd00:10:96::40"), Port: 80, NodePort: 30140, HealthCheckNodePort: 31140,
				LoadBalancerIPs: []string{a("192.0.2.40", "2001:db8::40")}, ExternalLocal: true,
				Endpoints: []Endpoint{{IP: a("10.244.1.40", "fd00:10:244:1::40"), Port: 8080, Local: lbLocal}, {IP: a("10.244.2.40", "fd00:10:244:2::40"), Port: 8080}},
			},
			{ // NodePort: no local IPv4 endpoint (IPv4 drops the NodePort), a local IPv6 one.
				Namespace: "kubelings", Name: "dual-np", PortName: "http", Protocol: "TCP",
				ClusterIP: a("10.96.0.41", "fd00:10:96::41"), Port: 80, NodePort: 30141, ExternalLocal: true,
				Endpoints: []Endpoint{{IP: a("10.244.1.41", "fd00:10:244:1::41"), Port: 8080, Local: npLocal}, {IP: a("10.244.2.41", "fd00:10:244:2::41"), Port: 8080}},
			},
		}
	}
	return []Service{
		{ // LoadBalancer, Local, endpoints only on other nodes: the blackhole.
			Namespace: "kubelings", Name: "checkout", PortName: "http", Protocol: "TCP",
			ClusterIP: a("10.96.0.10", "fd00:10:96::a"), Port: 80, NodePort: 30090, HealthCheckNodePort: 31090,
			LoadBalancerIPs: []string{a("192.0.2.10", "2001:db8::10")}, ExternalIPs: []string{a("192.0.2.20", "2001:db8::20")},
			ExternalLocal: true,
			Endpoints:     []Endpoint{{IP: a("10.244.2.5", "fd00:10:244:2::5"), Port: 8080}},
		},
		{ // NodePort, Local, two local endpoints and a remote one.
			Namespace: "kubelings", Name: "web", PortName: "http", Protocol: "TCP",
			ClusterIP: a("10.96.0.11", "fd00:10:96::b"), Port: 80, NodePort: 30091, ExternalLocal: true,
			Endpoints: []Endpoint{
				{IP: a("10.244.1.5", "fd00:10:244:1::5"), Port: 8080, Local: true},
				{IP: a("10.244.1.6", "fd00:10:244:1::6"), Port: 8080, Local: true},
				{IP: a("10.244.2.6", "fd00:10:244:2::6"), Port: 8080},
			},
		},
		{ // Unnamed port, no endpoints anywhere: rejected.
			Namespace: "kubelings", Name: "gone", Protocol: "TCP",
			ClusterIP: a("10.96.0.12", "fd00:10:96::c"), Port: 80, NodePort: 30092, ExternalLocal: true,
		},
		{ // UDP, Cluster policy.
			Namespace: "kube-system", Name: "kube-dns", PortName: "dns", Protocol: "UDP",
			ClusterIP: a("10.96.0.53", "fd00:10:96::35"), Port: 53,
			Endpoints: []Endpoint{{IP: a("10.244.1.7", "fd00:10:244:1::7"), Port: 53, Local: true}, {IP: a("10.244.2.7", "fd00:10:244:2::7"), Port: 53}},
		},
		{ // Session affinity, one local endpoint.
			Namespace: "kubelings", Name: "sticky", PortName: "https", Protocol: "TCP",
			ClusterIP: a("10.96.0.13", "fd00:10:96::d"), Port: 443, NodePort: 30093, HealthCheckNodePort: 31093,
			LoadBalancerIPs: []string{a("192.0.2.13", "2001:db8::13")}, ExternalLocal: true, Affinity: true,
			Endpoints: []Endpoint{{IP: a("10.244.1.8", "fd00:10:244:1::8"), Port: 8443, Local: true}, {IP: a("10.244.2.8", "fd00:10:244:2::8"), Port: 8443}},
		},
		{ // internalTrafficPolicy Local without local endpoints: internal traffic dropped, external not.
			Namespace: "kubelings", Name: "internal", PortName: "http", Protocol: "TCP",
			ClusterIP: a("10.96.0.14", "fd00:10:96::e"), Port: 80, NodePort: 30094, InternalLocal: true,
			Endpoints: []Endpoint{{IP: a("10.244.2.9", "fd00:10:244:2::9"), Port: 8080}},
		},
		{ // SCTP, Local, one local endpoint.
			Namespace: "telco", Name: "sig", PortName: "sctp", Protocol: "SCTP",
			ClusterIP: a("10.96.0.15", "fd00:10:96::f"), Port: 3868, NodePort: 30095, ExternalLocal: true,
			Endpoints: []Endpoint{{IP: a("10.244.1.10", "fd00:10:244:1::a"), Port: 3868, Local: true}},
		},
	}
}

// Row is one Service state of the table: what the seam must say of a Service port of a world, per family.
type Row struct {
	State string
	World string
	Port  dataplane.ServicePort
	Want  map[string]string // family -> Says
}

// Table is the Service states every reader must tell the same, per family.
func Table() []Row {
	v4, v6 := dataplane.FamilyIPv4, dataplane.FamilyIPv6
	sp := func(ns, name, port, proto string) dataplane.ServicePort {
		return dataplane.ServicePort{Namespace: ns, Name: name, Port: port, Protocol: proto}
	}
	both := func(s string) map[string]string { return map[string]string{v4: s, v6: s} }
	return []Row{
		{"forwarding to local endpoints", WorldScenario, sp("kubelings", "web", "http", "TCP"), map[string]string{
			v4: "forward to 2 local [10.244.1.5:8080 10.244.1.6:8080]",
			v6: "forward to 2 local [[fd00:10:244:1::5]:8080 [fd00:10:244:1::6]:8080]",
		}},
		{"no local endpoint: every destination dropped", WorldScenario, sp("kubelings", "checkout", "http", "TCP"), map[string]string{
			v4: "drop NodePort 30090, 192.0.2.10:80, 192.0.2.20:80",
			v6: "drop NodePort 30090, [2001:db8::10]:80, [2001:db8::20]:80",
		}},
		{"no endpoint anywhere: rejected (unnamed port)", WorldScenario, sp("kubelings", "gone", "", "TCP"), both("reject")},
		{"session affinity, one local endpoint", WorldScenario, sp("kubelings", "sticky", "https", "TCP"), map[string]string{
			v4: "forward to 1 local [10.244.1.8:8443]",
			v6: "forward to 1 local [[fd00:10:244:1::8]:8443]",
		}},
		{"SCTP, one local endpoint", WorldScenario, sp("telco", "sig", "sctp", "SCTP"), map[string]string{
			v4: "forward to 1 local [10.244.1.10:3868]",
			v6: "forward to 1 local [[fd00:10:244:1::a]:3868]",
		}},
		{"Cluster policy: programmed, nothing local counted", WorldScenario, sp("kube-system", "kube-dns", "dns", "UDP"), both("forward to 0 local []")},
		{"internalTrafficPolicy Local without local endpoints: external traffic not dropped", WorldScenario, sp("kubelings", "internal", "http", "TCP"), both("forward to 0 local []")},
		{"not programmed: absent", WorldScenario, sp("kubelings", "nothere", "http", "TCP"), both("absent")},
		{"not programmed under that protocol: absent", WorldScenario, sp("kubelings", "web", "http", "UDP"), both("absent")},
		{"dual-stack: IPv4 forwards, IPv6 drops", WorldDual, sp("kubelings", "dual-lb", "http", "TCP"), map[string]string{
			v4: "forward to 1 local [10.244.1.40:8080]",
			v6: "drop NodePort 30140, [2001:db8::40]:80",
		}},
		{"dual-stack: IPv4 drops, IPv6 forwards", WorldDual, sp("kubelings", "dual-np", "http", "TCP"), map[string]string{
			v4: "drop NodePort 30141",
			v6: "forward to 1 local [[fd00:10:244:1::41]:8080]",
		}},
	}
}

// Dest is one external destination of a Service port: the NodePort (Address ""), or a load balancer IP or
// externalIP with the Service port.
type Dest struct {
	Address string
	Port    int32
}

func (d Dest) String() string {
	if d.Address == "" {
		return fmt.Sprintf("NodePort %d", d.Port)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(d.Address), uint16(d.Port)).String()
}

// Destinations are a Service's external destinations: its NodePort, then its load balancer IPs and
// externalIPs with its port.
func (s Service) Destinations() []Dest {
	var out []Dest
	if s.NodePort != 0 {
		out = append(out, Dest{Port: int32(s.NodePort)})
	}
	for _, a := range slices.Concat(s.LoadBalancerIPs, s.ExternalIPs) {
		out = append(out, Dest{Address: a, Port: int32(s.Port)})
	}
	return out
}

// Destinations are sp's external destinations in one family of world (none for a Service the world lacks).
func Destinations(world string, sp dataplane.ServicePort, v6 bool) []Dest {
	for _, s := range Services(world, v6) {
		if s.ServicePort() == sp {
			return s.Destinations()
		}
	}
	return nil
}

// Says is what a port's state says its destinations get: "absent" (nothing programmed), "reject", "drop"
// and the destinations dropped, or "forward" to its local endpoints (how many, and which) — the verdict's
// inputs, in words.
func Says(st dataplane.PortState, dests []Dest) string {
	if !st.Programmed {
		return "absent"
	}
	var says []string
	if st.Reject {
		says = append(says, "reject")
	}
	var dropped []string
	for _, d := range dests {
		if st.DropsTo(d.Address, d.Port) {
			dropped = append(dropped, d.String())
		}
	}
	if st.Drop || len(dropped) > 0 {
		says = append(says, "drop "+strings.Join(dropped, ", "))
	}
	if st.LocalEndpoints > 0 || len(says) == 0 {
		eps := make([]string, len(st.Endpoints))
		for i, e := range st.Endpoints {
			eps[i] = e.String()
		}
		says = append(says, fmt.Sprintf("forward to %d local [%s]", st.LocalEndpoints, strings.Join(eps, " ")))
	}
	return strings.Join(says, "; ")
}

// Read is one reader's read of one world.
type Read struct {
	Reader string // the reader, as the test names it
	World  string
	Rules  dataplane.Rules
}

// RunTable runs the table through reads: for every row, each read of the row's world must say what the row
// wants in both families, and every world must have a read. Every Service of each world must have a row.
func RunTable(t *testing.T, reads []Read) {
	t.Helper()
	byWorld := map[string]int{}
	for _, r := range reads {
		byWorld[r.World]++
		for _, f := range []string{dataplane.FamilyIPv4, dataplane.FamilyIPv6} {
			if !r.Rules.HasFamily(f) {
				t.Errorf("%s, %s: %s not read", r.World, r.Reader, f)
			}
		}
	}
	rows := map[string]bool{}
	for _, row := range Table() {
		rows[row.World+"/"+row.Port.String()+"/"+row.Port.Protocol] = true
		if byWorld[row.World] == 0 {
			t.Errorf("%s: no read of the world", row.World)
		}
		t.Run(row.State, func(t *testing.T) {
			for _, r := range reads {
				if r.World != row.World {
					continue
				}
				for _, f := range []string{dataplane.FamilyIPv4, dataplane.FamilyIPv6} {
					got := Says(r.Rules.Family(row.Port, f), Destinations(row.World, row.Port, f == dataplane.FamilyIPv6))
					if got != row.Want[f] {
						t.Errorf("%s, %s: %v: %q, want %q", r.Reader, f, row.Port, got, row.Want[f])
					}
				}
			}
		})
	}
	for _, world := range Worlds() {
		for _, s := range Services(world, false) {
			sp := s.ServicePort()
			if !rows[world+"/"+sp.String()+"/"+sp.Protocol] {
				t.Errorf("%s: %v has no row", world, sp)
			}
		}
	}
}
