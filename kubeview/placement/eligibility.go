package placement

import "github.com/localtraffic/localtraffic-exporter/kubeview"

// Until kubeview's per-family API lands on main (NodeState.LoadBalancerEligible, NodePortEligible), these read
// today's NodeState fields with the rule the exporter documents; they are replaced by kubeview's methods at merge.
func loadBalancerEligible(n kubeview.NodeState) bool { return n.Found && !n.Excluded && !n.Draining() }
func nodePortEligible(n kubeview.NodeState) bool     { return !n.Excluded && !n.Draining() }
