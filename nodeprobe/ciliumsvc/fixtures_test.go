package ciliumsvc

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the worlds below")

// The fixtures are the agent's answers to GET /v1/service for small clusters seen from one node ("node-a"),
// written as Cilium v1.18 serializes its models (testdata/README.md): every frontend of a Service in both
// families, each with the backends Cilium selects for it (model.go). The worlds mirror the Services of the
// kube-proxy readers' fixture table (nodeprobe/kernelrules, TestSeamFixtureTable), plus the backend states
// only Cilium reports.

const thisNode = "node-a"

// ciliumService is one Service port of a world, with its endpoints in one family.
type ciliumService struct {
	ns, name, proto         string // proto as the API spells it (TCP, UDP, SCTP)
	clusterIP               string
	svcPort, nodePort, hcNP uint16
	lbIPs, externalIPs      []string
	etpLocal, itpLocal      bool
	eps                     []ciliumEndpoint
}

type ciliumEndpoint struct {
	ip    string
	port  uint16
	local bool
	state string // "" is active
}

// fam picks a world's address by family.
func fam(v6 bool, v4addr, v6addr string) string {
	if v6 {
		return v6addr
	}
	return v4addr
}

// scenarioWorld is nodeprobe/kernelrules' scenario: the same Services, endpoints and destinations.
func scenarioWorld(v6 bool) []ciliumService {
	a := func(v4, v6addr string) string { return fam(v6, v4, v6addr) }
	return []ciliumService{
		{ns: "kubelings", name: "checkout", proto: "TCP", clusterIP: a("10.96.0.10", "fd00:10:96::a"), svcPort: 80, nodePort: 30090,
			hcNP: 31090, lbIPs: []string{a("192.0.2.10", "2001:db8::10")}, externalIPs: []string{a("192.0.2.20", "2001:db8::20")}, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.2.5", "fd00:10:244:2::5"), port: 8080}}},
		{ns: "kubelings", name: "web", proto: "TCP", clusterIP: a("10.96.0.11", "fd00:10:96::b"), svcPort: 80, nodePort: 30091, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.5", "fd00:10:244:1::5"), port: 8080, local: true},
				{ip: a("10.244.1.6", "fd00:10:244:1::6"), port: 8080, local: true}, {ip: a("10.244.2.6", "fd00:10:244:2::6"), port: 8080}}},
		{ns: "kubelings", name: "gone", proto: "TCP", clusterIP: a("10.96.0.12", "fd00:10:96::c"), svcPort: 80, nodePort: 30092, etpLocal: true},
		{ns: "kube-system", name: "kube-dns", proto: "UDP", clusterIP: a("10.96.0.53", "fd00:10:96::35"), svcPort: 53,
			eps: []ciliumEndpoint{{ip: a("10.244.1.7", "fd00:10:244:1::7"), port: 53, local: true}, {ip: a("10.244.2.7", "fd00:10:244:2::7"), port: 53}}},
		{ns: "kubelings", name: "sticky", proto: "TCP", clusterIP: a("10.96.0.13", "fd00:10:96::d"), svcPort: 443, nodePort: 30093, hcNP: 31093,
			lbIPs: []string{a("192.0.2.13", "2001:db8::13")}, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.8", "fd00:10:244:1::8"), port: 8443, local: true}, {ip: a("10.244.2.8", "fd00:10:244:2::8"), port: 8443}}},
		{ns: "kubelings", name: "internal", proto: "TCP", clusterIP: a("10.96.0.14", "fd00:10:96::e"), svcPort: 80, nodePort: 30094, itpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.2.9", "fd00:10:244:2::9"), port: 8080}}},
		{ns: "telco", name: "sig", proto: "SCTP", clusterIP: a("10.96.0.15", "fd00:10:96::f"), svcPort: 3868, nodePort: 30095, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.10", "fd00:10:244:1::a"), port: 3868, local: true}}},
	}
}

// dualWorld is nodeprobe/kernelrules' dual-stack node, whose families disagree.
func dualWorld(v6 bool) []ciliumService {
	a := func(v4, v6addr string) string { return fam(v6, v4, v6addr) }
	lbLocal, npLocal := !v6, v6
	return []ciliumService{
		{ns: "kubelings", name: "dual-lb", proto: "TCP", clusterIP: a("10.96.0.40", "fd00:10:96::40"), svcPort: 80, nodePort: 30140, hcNP: 31140,
			lbIPs: []string{a("192.0.2.40", "2001:db8::40")}, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.40", "fd00:10:244:1::40"), port: 8080, local: lbLocal}, {ip: a("10.244.2.40", "fd00:10:244:2::40"), port: 8080}}},
		{ns: "kubelings", name: "dual-np", proto: "TCP", clusterIP: a("10.96.0.41", "fd00:10:96::41"), svcPort: 80, nodePort: 30141, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.41", "fd00:10:244:1::41"), port: 8080, local: npLocal}, {ip: a("10.244.2.41", "fd00:10:244:2::41"), port: 8080}}},
	}
}

// statesWorld holds what only Cilium's model says: backend states, and a Service with two ports of one
// protocol (which the model cannot name apart).
func statesWorld(v6 bool) []ciliumService {
	a := func(v4, v6addr string) string { return fam(v6, v4, v6addr) }
	multi := func(port, nodePort, target uint16) ciliumService {
		return ciliumService{ns: "kubelings", name: "multi", proto: "TCP", clusterIP: a("10.96.0.60", "fd00:10:96::60"), svcPort: port,
			nodePort: nodePort, etpLocal: true, eps: []ciliumEndpoint{
				{ip: a("10.244.1.60", "fd00:10:244:1::60"), port: target, local: true},
				{ip: a("10.244.1.61", "fd00:10:244:1::61"), port: target, local: true},
				{ip: a("10.244.2.60", "fd00:10:244:2::60"), port: target}}}
	}
	return []ciliumService{
		{ // The only local endpoint is terminating: Cilium falls back to it, as kube-proxy does.
			ns: "kubelings", name: "draining", proto: "TCP", clusterIP: a("10.96.0.50", "fd00:10:96::50"), svcPort: 80, nodePort: 30150, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.50", "fd00:10:244:1::50"), port: 8080, local: true, state: "terminating"},
				{ip: a("10.244.2.50", "fd00:10:244:2::50"), port: 8080}}},
		{ // The local endpoint failed Cilium's health check: quarantined, not used; the LB IP and NodePort drop.
			ns: "kubelings", name: "sick", proto: "TCP", clusterIP: a("10.96.0.51", "fd00:10:96::51"), svcPort: 80, nodePort: 30151, hcNP: 31151,
			lbIPs: []string{a("192.0.2.51", "2001:db8::51")}, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.1.51", "fd00:10:244:1::51"), port: 8080, local: true, state: "quarantined"},
				{ip: a("10.244.2.51", "fd00:10:244:2::51"), port: 8080}}},
		{ // The local endpoint is in maintenance: left out of the datapath.
			ns: "kubelings", name: "maint", proto: "TCP", clusterIP: a("10.96.0.52", "fd00:10:96::52"), svcPort: 80, nodePort: 30152, etpLocal: true,
			externalIPs: []string{a("192.0.2.52", "2001:db8::52")},
			eps: []ciliumEndpoint{{ip: a("10.244.1.52", "fd00:10:244:1::52"), port: 8080, local: true, state: "maintenance"},
				{ip: a("10.244.2.52", "fd00:10:244:2::52"), port: 8080}}},
		{ // Only terminating endpoints, none local: dropped, not rejected (the Service has endpoints).
			ns: "kubelings", name: "leaving", proto: "TCP", clusterIP: a("10.96.0.53", "fd00:10:96::53"), svcPort: 80, nodePort: 30153, etpLocal: true,
			eps: []ciliumEndpoint{{ip: a("10.244.2.53", "fd00:10:244:2::53"), port: 8080, state: "terminating"}}},
		multi(80, 30160, 8080),
		multi(9090, 30161, 9090),
	}
}

// worlds are the fixtures: a file per world.
var worlds = map[string]func(v6 bool) []ciliumService{
	"scenario":   scenarioWorld,
	"dual-stack": dualWorld,
	"states":     statesWorld,
}

func fixturePath(world string) string {
	return filepath.Join("testdata", "service-list-"+world+".json")
}

// answer is the agent's answer for a world: both families, in the order Cilium's table lists them does not
// matter to the reader.
func answer(world string) []service {
	var out []service
	id := int64(1)
	for _, v6 := range []bool{false, true} {
		for _, s := range worlds[world](v6) {
			for _, spec := range s.frontends(v6) {
				spec.ID = id
				id++
				out = append(out, service{Spec: spec, Status: &serviceStatus{Realized: spec}})
			}
		}
	}
	return out
}

// frontends are the Service port's frontends in one family, as Cilium's writer selects their backends.
func (s ciliumService) frontends(v6 bool) []*serviceSpec {
	policy := func(local bool) string {
		if local {
			return policyLocal
		}
		return "Cluster"
	}
	flags := func(typ string) *serviceSpecFlags {
		return &serviceSpecFlags{Type: typ, TrafficPolicy: policy(s.etpLocal), ExtTrafficPolicy: policy(s.etpLocal),
			IntTrafficPolicy: policy(s.itpLocal), HealthCheckNodePort: s.hcNP, Name: s.name, Namespace: s.ns}
	}
	backends := func(onlyLocal bool) []*backendAddress {
		var out []*backendAddress
		for _, ep := range s.eps {
			if onlyLocal && !ep.local {
				continue
			}
			node := "node-b"
			if ep.local {
				node = thisNode
			}
			ip, weight := ep.ip, uint16(100)
			state := ep.state
			if state == "" {
				state = stateActive
			}
			out = append(out, &backendAddress{IP: &ip, NodeName: node, Port: ep.port, Preferred: true, Protocol: s.proto,
				State: state, Weight: &weight})
		}
		return out
	}
	fe := func(typ, ip string, port uint16, scope string, onlyLocal bool) *serviceSpec {
		return &serviceSpec{FrontendAddress: &frontendAddress{IP: ip, Port: port, Protocol: s.proto, Scope: scope},
			Flags: flags(typ), BackendAddresses: backends(onlyLocal)}
	}
	twoScopes := s.etpLocal != s.itpLocal
	out := []*serviceSpec{fe(typeClusterIP, s.clusterIP, s.svcPort, "external", s.itpLocal)}
	external := func(typ, ip string, port uint16) {
		out = append(out, fe(typ, ip, port, "external", s.etpLocal))
		if twoScopes {
			out = append(out, fe(typ, ip, port, scopeInternal, s.itpLocal))
		}
	}
	if s.nodePort != 0 {
		external(typeNodePort, fam(v6, "0.0.0.0", "::"), s.nodePort)
	}
	for _, ip := range s.lbIPs {
		external(typeLoadBalancer, ip, s.svcPort)
	}
	for _, ip := range s.externalIPs {
		external(typeExternalIPs, ip, s.svcPort)
	}
	return out
}

// TestFixturesUpToDate: the fixtures are the worlds' answers; -update rewrites them.
func TestFixturesUpToDate(t *testing.T) {
	for world := range worlds {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(answer(world)); err != nil {
			t.Fatal(err)
		}
		path := fixturePath(world)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, b.Bytes()) {
			t.Errorf("%s differs from its world; go test ./nodeprobe/ciliumsvc -run TestFixturesUpToDate -update", path)
		}
	}
}
