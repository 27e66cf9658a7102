package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	nodeFound = newMetric("node_found", prometheus.GaugeValue,
		"1 when the exporter's Node object exists in the API.")
	nodeDraining = stable(newMetric("node_draining", prometheus.GaugeValue,
		"1 when the Node is going away: it has a deletionTimestamp or the ToBeDeletedByClusterAutoscaler taint."))
	nodeExcluded = stable(detailed(newMetric("node_excluded", prometheus.GaugeValue,
		"1 when the Node carries the label node.kubernetes.io/exclude-from-external-load-balancers."),
		"1 when the Node is labelled node.kubernetes.io/exclude-from-external-load-balancers with a value that does not parse as false."))
)

// Node exports the state of the exporter's own Node object that decides whether it is in rotation.
type Node struct{}

// NewNode returns the Node collector.
func NewNode() *Node { return &Node{} }

func (*Node) Name() string { return "node" }

func (*Node) Metrics() []*Metric { return []*Metric{nodeFound, nodeDraining, nodeExcluded} }

func (*Node) Inputs() []scrape.Input { return []scrape.Input{scrape.InputNode} }

func (*Node) Update(st *scrape.State, out *Sink) error {
	if st.NodeErr != nil {
		return st.NodeErr
	}
	out.send(nodeFound, boolFloat(st.Node.Found))
	out.send(nodeDraining, boolFloat(st.Node.Draining()))
	out.send(nodeExcluded, boolFloat(st.Node.Excluded))
	return nil
}
