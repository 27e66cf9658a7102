package collector

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/rules"
)

// Verdict sources, as exported in localtraffic_blackhole_source.
const (
	SourceRules = "rules"
	SourceAPI   = "api"
)

// FamilyRules is what the verdict reads of kube-proxy's rules: per family, per Service port. *rules.Snapshot
// implements it.
type FamilyRules interface {
	// HasFamily reports whether that family's kube-proxy rules were found and read.
	HasFamily(family string) bool
	// Family returns what kube-proxy programmed for sp in one family; the zero PortState means no rule.
	Family(sp rules.ServicePort, family string) rules.PortState
}

// Evidence says whether an externalIP's traffic reaches this node.
type Evidence interface {
	// Assigned: the address is configured on one of this node's interfaces.
	Assigned(ip string) bool
	// Arriving: the drop rule for (address, port) of sp in family grew within the evidence window.
	Arriving(sp rules.ServicePort, family corev1.IPFamily, address string, port int32) bool
}

// EntryKind is how external traffic enters the node for a Service.
type EntryKind string

// Entry kinds.
const (
	EntryNodePort       EntryKind = "node_port"        // a NodePort on any of the node's addresses
	EntryLoadBalancerIP EntryKind = "load_balancer_ip" // a status.loadBalancer.ingress IP kube-proxy programs
	EntryExternalIP     EntryKind = "external_ip"      // a spec.externalIPs address
)

// Entry is one way external traffic of one family reaches the node for one Service port, and what the
// exporter decided about it.
type Entry struct {
	Kind     EntryKind
	PortName string // the Service port's label (name, or number when unnamed)
	Protocol corev1.Protocol
	Address  string // "" for a NodePort
	Port     int32  // the NodePort, or the Service port for an address
	// InRotation: traffic is sent here; Why says which rule decided.
	InRotation bool
	Why        string
	// Dropped: kube-proxy drops this entry's traffic for lack of a local endpoint (rules, or the API view).
	Dropped bool
}

// FamilyVerdict is the verdict of one IP family of a Service.
type FamilyVerdict struct {
	Family corev1.IPFamily
	// Source is what decided Dropped: SourceRules when this family's rules were read, else SourceAPI.
	Source     string
	Entries    []Entry
	InRotation bool // some entry is in rotation
	Drops      bool // some entry is dropped
	Blackhole  bool // some entry is both
}

// Verdict is the exporter's answer for one node and one Service. The rule is documented in docs/metrics.md
// ("The blackhole verdict"); keep the two in step.
type Verdict struct {
	// InRotation: external traffic for the Service is sent to this node, in some family.
	InRotation bool
	// Drops: this node drops some of the Service's external traffic for lack of a local endpoint.
	Drops bool
	// Blackhole: some family has an entry that is in rotation and dropped. Traffic arrives and vanishes
	// without a reset.
	Blackhole bool
	Source    string
	Families  []FamilyVerdict
}

// DecideInput is everything the verdict of one Service reads.
type DecideInput struct {
	Service kubeview.ServiceState
	Node    kubeview.NodeState
	// Checks is the health check node port's answer per family; absent for a family not probed.
	Checks map[corev1.IPFamily]*nodeprobe.HealthCheck
	// Rules is kube-proxy's programmed state; nil when it could not be read (the API view decides).
	Rules    FamilyRules
	Evidence Evidence
}

// Decide computes the verdict, family by family.
func Decide(in DecideInput) Verdict {
	v := Verdict{Source: SourceAPI}
	if in.Rules != nil {
		v.Source = SourceRules
	}
	for _, fam := range in.Service.Families {
		fv := decideFamily(in, fam)
		v.InRotation = v.InRotation || fv.InRotation
		v.Drops = v.Drops || fv.Drops
		v.Blackhole = v.Blackhole || fv.Blackhole
		v.Families = append(v.Families, fv)
	}
	return v
}

func decideFamily(in DecideInput, fam kubeview.FamilyEndpoints) FamilyVerdict {
	svc, family := in.Service, fam.Family
	fv := FamilyVerdict{Family: family, Source: SourceAPI}
	if in.Rules != nil && in.Rules.HasFamily(string(family)) {
		fv.Source = SourceRules
	}
	lbIPs, extIPs := svc.AddressesOf(family)
	lbRotation, lbWhy := loadBalancerRotation(svc, in.Node, in.Checks[family])
	npRotation, npWhy := lbRotation, lbWhy
	if svc.Type != corev1.ServiceTypeLoadBalancer || svc.HealthCheckNodePort == 0 {
		// Without a health check node port nothing drains the node but its eligibility.
		npRotation, npWhy = in.Node.NodePortEligible(), nodePortWhy(in.Node)
		lbRotation, lbWhy = in.Node.LoadBalancerEligible(), loadBalancerEligibleWhy(in.Node)
	}
	for _, p := range fam.Ports {
		sp := rules.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Name, Protocol: string(p.Protocol)}
		var st rules.PortState
		if fv.Source == SourceRules {
			st = in.Rules.Family(sp, string(family))
		}
		add := func(kind EntryKind, addr string, port int32, rot bool, why string) {
			e := Entry{Kind: kind, PortName: portLabel(p), Protocol: p.Protocol, Address: addr, Port: port, InRotation: rot, Why: why}
			if fv.Source == SourceRules {
				e.Dropped = ruleDrops(st, addr, port)
			} else {
				// A port with no endpoint anywhere is rejected on every node: an outage, not this node's blackhole.
				e.Dropped = p.ClusterWide && p.Local == 0
			}
			fv.Entries = append(fv.Entries, e)
			fv.InRotation = fv.InRotation || e.InRotation
			fv.Drops = fv.Drops || e.Dropped
			fv.Blackhole = fv.Blackhole || e.InRotation && e.Dropped
		}
		if p.NodePort != 0 {
			add(EntryNodePort, "", p.NodePort, npRotation, npWhy)
		}
		if svc.Type == corev1.ServiceTypeLoadBalancer {
			for _, ip := range lbIPs {
				add(EntryLoadBalancerIP, ip, p.Port, lbRotation, lbWhy)
			}
		}
		for _, ip := range extIPs {
			// kube-proxy writes the address's drop on every node without a local endpoint, but the network
			// routes it to some nodes only: in rotation only with evidence that its traffic arrives here.
			rot, why := false, "no evidence the address is routed here"
			switch {
			case in.Evidence == nil:
			case in.Evidence.Assigned(ip):
				rot, why = true, "address assigned to this node"
			case in.Evidence.Arriving(sp, family, ip, p.Port):
				rot, why = true, "drop counter grew within the evidence window"
			}
			add(EntryExternalIP, ip, p.Port, rot, why)
		}
	}
	return fv
}

// loadBalancerRotation: a load balancer that checks the health check node port keeps the node for the family
// only while that family's check answers 200; a refusal, a timeout, a 503 or any other status drains it
// (kube-proxy.md §5). The cloud service controller also takes a node that is not LoadBalancerEligible out of
// the target set.
func loadBalancerRotation(svc kubeview.ServiceState, node kubeview.NodeState, hc *nodeprobe.HealthCheck) (bool, string) {
	if !node.LoadBalancerEligible() {
		return false, loadBalancerEligibleWhy(node)
	}
	switch {
	case hc == nil:
		return false, "health check not probed"
	case hc.StatusCode == http.StatusOK:
		return true, "health check answered 200"
	case hc.Result == nodeprobe.ResultNoAddress:
		return false, "no address to probe the health check on"
	case hc.StatusCode != 0:
		return false, fmt.Sprintf("health check answered %d", hc.StatusCode)
	}
	return false, "health check " + string(hc.Result)
}

func loadBalancerEligibleWhy(n kubeview.NodeState) string {
	switch {
	case !n.Found:
		return "Node object missing"
	case n.Excluded:
		return "node excluded from external load balancers"
	case n.Draining():
		return "node being deleted"
	}
	return "node eligible for load balancers"
}

func nodePortWhy(n kubeview.NodeState) string {
	switch {
	case n.Excluded:
		return "node excluded from external load balancers"
	case n.Draining():
		return "node being deleted"
	}
	return "NodePort reaches every node"
}

// ruleDrops: one of st's drop rules drops the destination (address "" for the NodePort).
func ruleDrops(st rules.PortState, addr string, port int32) bool {
	if st.Drop && len(st.Drops) == 0 {
		return true // a state that says it drops without saying where: every destination
	}
	for _, d := range st.Drops {
		if d.AllDestinations || d.Address == addr && d.Port == port {
			return true
		}
	}
	return false
}
