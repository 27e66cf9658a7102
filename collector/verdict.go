package collector

import (
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// RuleView answers, for one Service port, what kube-proxy's rules do with its external traffic on this node.
type RuleView interface {
	// PortDrop reports whether the rules drop the port's external traffic for lack of a local endpoint, and
	// whether any rule for the port exists at all.
	PortDrop(namespace, name, port string, protocol corev1.Protocol) (drop, programmed bool)
}

// Verdict sources, as exported in localtraffic_blackhole_source.
const (
	SourceRules = "rules"
	SourceAPI   = "api"
)

// Verdict is the exporter's answer for one node and one Service. The rule is documented in docs/metrics.md
// ("The blackhole verdict"); keep the two in step.
type Verdict struct {
	// InRotation: external traffic for the Service is sent to this node.
	InRotation bool
	// Drops: this node drops that traffic for lack of a local endpoint.
	Drops bool
	// Blackhole: both. Traffic arrives and vanishes without a reset.
	Blackhole bool
	Source    string
}

// Decide computes the verdict. hc is the health check node port's answer (nil when the Service has none);
// rules is kube-proxy's programmed state (nil when it could not be read: the API view decides instead).
func Decide(svc kubeview.ServiceState, node kubeview.NodeState, hc *nodeprobe.HealthCheck, rules RuleView) Verdict {
	v := Verdict{InRotation: inRotation(svc, node, hc)}
	fam := primaryFamily(svc)
	if rules != nil {
		v.Source = SourceRules
		for _, p := range fam.Ports {
			if drop, _ := rules.PortDrop(svc.Namespace, svc.Name, p.Name, p.Protocol); drop {
				v.Drops = true
			}
		}
	} else {
		v.Source = SourceAPI
		for _, p := range fam.Ports {
			// A port with no endpoint anywhere is rejected on every node: an outage, not this node's blackhole.
			// A port no external traffic can reach has nothing to drop.
			if p.ClusterWide && p.Local == 0 && svc.ExternallyReachable(fam.Family, p) {
				v.Drops = true
			}
		}
	}
	v.Blackhole = v.InRotation && v.Drops
	return v
}

// primaryFamily is the Service's first family: the verdict is still judged in one family (the per-family
// verdict replaces this).
func primaryFamily(svc kubeview.ServiceState) kubeview.FamilyEndpoints {
	if len(svc.Families) == 0 {
		return kubeview.FamilyEndpoints{}
	}
	return svc.Families[0]
}

// inRotation: does external traffic for the Service reach this node?
//   - A node labelled exclude-from-external-load-balancers is taken out of every load balancer.
//   - LoadBalancer with a health check node port: a load balancer that checks the port drains the node when it
//     answers anything but 200. An answer of 200, or none at all (the checker cannot see the node either, or
//     it is not checking the port), keeps it in: if the node then drops, that is a blackhole.
//   - NodePort and externalIPs: every node receives traffic, unless it is being deleted (deletionTimestamp or
//     the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint), when clients are expected to move off it.
func inRotation(svc kubeview.ServiceState, node kubeview.NodeState, hc *nodeprobe.HealthCheck) bool {
	if node.Excluded {
		return false
	}
	if svc.Type == corev1.ServiceTypeLoadBalancer && svc.HealthCheckNodePort != 0 {
		return hc == nil || !hc.Answered() || hc.StatusCode == http.StatusOK
	}
	return !node.Draining()
}
