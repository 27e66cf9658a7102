package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// NodeStatus is one node's part of one Service's external traffic, as far as the API shows it.
type NodeStatus struct {
	Node string `json:"node"`
	// Receives: the node is a target of the Service's external traffic (kubeview's node rules).
	Receives bool `json:"receives"`
	// InRotation: it receives, and for a Service with a health check node port that check would answer 200
	// (a ready local endpoint): a load balancer that checks it keeps sending.
	InRotation bool `json:"inRotation"`
	// LocalEndpoints and LocalReadyEndpoints are the exporter's counts for this node.
	LocalEndpoints      int  `json:"localEndpoints"`
	LocalReadyEndpoints int  `json:"localReadyEndpoints"`
	Serves              bool `json:"serves"`
	Blackhole           bool `json:"blackhole"`
	// Drops names what kube-proxy drops on this node for lack of a local endpoint, e.g. "NodePort 30090/TCP".
	Drops []string `json:"drops,omitempty"`
}

// ServiceStatus is one Local Service across the cluster's nodes.
type ServiceStatus struct {
	Namespace           string             `json:"namespace"`
	Name                string             `json:"name"`
	Type                corev1.ServiceType `json:"type"`
	HealthCheckNodePort int32              `json:"healthCheckNodePort,omitempty"`
	// Outage: a port has no usable endpoint anywhere, so kube-proxy rejects it on every node (not a per-node
	// blackhole; the exporter does not count it as one either).
	Outage    bool         `json:"outage,omitempty"`
	Receiving int          `json:"receiving"` // nodes that receive its external traffic
	Serving   int          `json:"serving"`   // of those, the nodes that serve it
	Nodes     []NodeStatus `json:"nodes"`     // every node, by name
	Summary   string       `json:"summary"`
}

// Blackholes lists the nodes that blackhole the Service now.
func (s ServiceStatus) Blackholes() []string {
	var out []string
	for _, n := range s.Nodes {
		if n.Blackhole {
			out = append(out, n.Node)
		}
	}
	return out
}

// Status computes, for every Local Service, every node's verdict from EndpointSlices and Nodes alone: what the
// exporter on each node would decide from the API, minus what only a node can see (its health check's actual
// answer, the rules kube-proxy programmed). Services are sorted by namespace and name.
func Status(c *Cluster) []ServiceStatus {
	slices := slicesByService(c.EndpointSlices)
	nodes := sortedNodes(c.Nodes)
	nodeStates := make([]kubeview.NodeState, len(nodes))
	for i, n := range nodes {
		nodeStates[i] = kubeview.NodeStateOf(n)
	}
	var out []ServiceStatus
	for _, svc := range c.Services {
		if !kubeview.IsExternalLocal(svc) {
			continue
		}
		out = append(out, serviceStatus(svc, slices[svc.Namespace+"/"+svc.Name], nodes, nodeStates))
	}
	sortStatuses(out)
	return out
}

func sortStatuses(s []ServiceStatus) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Namespace != s[j].Namespace {
			return s[i].Namespace < s[j].Namespace
		}
		return s[i].Name < s[j].Name
	})
}

// slicesByService indexes the slices kube-proxy reads by "namespace/service".
func slicesByService(all []*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range all {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		if !kubeview.UsableSlice(s) {
			continue // the exporter's own filter: kube-proxy's slice informer drops these
		}
		key := s.Namespace + "/" + svc
		out[key] = append(out[key], s)
	}
	return out
}

// noNode is a node name no endpoint carries (node names are DNS subdomains): the state of every node that
// hosts none of the Service's endpoints.
const noNode = "\x00"

// perNodeStates counts the Service's endpoints once per node that hosts one, and once for all other nodes,
// with the exporter's own transform and counting: each node's exporter sees exactly these slices.
func perNodeStates(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) (map[string]kubeview.ServiceState, kubeview.ServiceState) {
	hosts := map[string]struct{}{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil {
				hosts[*ep.NodeName] = struct{}{}
			}
		}
	}
	stateOn := func(node string) kubeview.ServiceState {
		transform := kubeview.TransformEndpointSlice(node)
		local := make([]*discoveryv1.EndpointSlice, 0, len(slices))
		for _, s := range slices {
			t, _ := transform(s) // never fails for an EndpointSlice
			local = append(local, t.(*discoveryv1.EndpointSlice))
		}
		return kubeview.ServiceStateOf(svc, local)
	}
	states := make(map[string]kubeview.ServiceState, len(hosts))
	for h := range hosts {
		states[h] = stateOn(h)
	}
	return states, stateOn(noNode)
}

func serviceStatus(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, nodes []*corev1.Node, nodeStates []kubeview.NodeState) ServiceStatus {
	states, elsewhere := perNodeStates(svc, slices)
	st := ServiceStatus{Namespace: svc.Namespace, Name: svc.Name, Type: svc.Spec.Type,
		HealthCheckNodePort: svc.Spec.HealthCheckNodePort}
	st.Outage = outage(elsewhere)
	for i, n := range nodes {
		ss, ok := states[n.Name]
		if !ok {
			ss = elsewhere
		}
		v := verdictOn(ss, nodeStates[i])
		st.Nodes = append(st.Nodes, v)
		if v.Receives {
			st.Receiving++
		}
		if v.Serves {
			st.Serving++
		}
	}
	st.Summary = summary(st)
	return st
}

// outage: some port of some family has no usable endpoint anywhere (ClusterWide false), which kube-proxy rejects
// on every node.
func outage(ss kubeview.ServiceState) bool {
	for _, fe := range ss.Families {
		for _, p := range fe.Ports {
			if !p.ClusterWide {
				return true
			}
		}
	}
	return false
}

// verdictOn is the exporter's verdict for one node from the API, family by family as kube-proxy's per-family
// proxiers decide: in rotation (the node receives; for a health-checked LoadBalancer Service its family's health
// check also answers 200, i.e. a ready local endpoint) and dropping (a port with an endpoint somewhere, none
// here, and a way in from outside in that family).
func verdictOn(ss kubeview.ServiceState, ns kubeview.NodeState) NodeStatus {
	v := NodeStatus{Node: ns.Name, LocalEndpoints: ss.LocalEndpoints(), LocalReadyEndpoints: -1}
	healthChecked := ss.Type == corev1.ServiceTypeLoadBalancer && ss.HealthCheckNodePort != 0
	if healthChecked {
		v.Receives = ns.LoadBalancerEligible()
	} else {
		v.Receives = ns.NodePortEligible()
	}
	dual := len(ss.Families) > 1
	for _, fe := range ss.Families {
		if v.LocalReadyEndpoints < 0 || fe.LocalReadyEndpoints < v.LocalReadyEndpoints {
			v.LocalReadyEndpoints = fe.LocalReadyEndpoints
		}
		inRotation := v.Receives && (!healthChecked || fe.LocalReadyEndpoints > 0)
		v.InRotation = v.InRotation || inRotation
		for _, p := range fe.Ports {
			if !p.ClusterWide || p.Local > 0 || !ss.ExternallyReachable(fe.Family, p) {
				continue
			}
			d := dropName(p)
			if dual {
				d += " (" + string(fe.Family) + ")"
			}
			v.Drops = append(v.Drops, d)
			if inRotation {
				v.Blackhole = true
			}
		}
	}
	v.LocalReadyEndpoints = max(v.LocalReadyEndpoints, 0)
	v.Serves = v.InRotation && !v.Blackhole
	return v
}

func dropName(p kubeview.PortEndpoints) string {
	if p.NodePort != 0 {
		return fmt.Sprintf("NodePort %d/%s", p.NodePort, p.Protocol)
	}
	return fmt.Sprintf("port %d/%s", p.Port, p.Protocol)
}

// summary is the one line a person reads: "2 of 5 nodes serve; node-c, node-d, node-e drop NodePort 30090/TCP".
func summary(st ServiceStatus) string {
	if st.Outage {
		return fmt.Sprintf("no endpoint anywhere for some port: rejected on every node (an outage, not a per-node blackhole); %d of %d nodes serve",
			st.Serving, st.Receiving)
	}
	s := fmt.Sprintf("%d of %d nodes serve", st.Serving, st.Receiving)
	byDrop := map[string][]string{}
	var drops []string
	for _, n := range st.Nodes {
		if !n.Blackhole {
			continue
		}
		d := strings.Join(n.Drops, ", ")
		if _, seen := byDrop[d]; !seen {
			drops = append(drops, d)
		}
		byDrop[d] = append(byDrop[d], n.Node)
	}
	for _, d := range drops {
		s += fmt.Sprintf("; %s drop %s", strings.Join(byDrop[d], ", "), d)
	}
	drained := 0
	for _, n := range st.Nodes {
		if n.Receives && !n.InRotation {
			drained++
		}
	}
	if drained > 0 {
		s += fmt.Sprintf("; %d drained by the health check (no ready local endpoint, answers 503)", drained)
	}
	return s
}
