package collector

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	nodeFound = newMetric("node_found", prometheus.GaugeValue,
		"1 when the exporter's Node object exists in the API.")
	nodeDraining = stable(newMetric("node_draining", prometheus.GaugeValue,
		"1 when the Node is going away: it has a deletionTimestamp or the ToBeDeletedByClusterAutoscaler taint."))
	nodeExcluded = stable(newMetric("node_excluded", prometheus.GaugeValue,
		"1 when the Node is labelled node.kubernetes.io/exclude-from-external-load-balancers."))
)

// Node exports the state of the exporter's own Node object that decides whether it is in rotation.
type Node struct{ view APIView }

// NewNode returns the Node collector.
func NewNode(view APIView) *Node { return &Node{view: view} }

func (*Node) Name() string { return "node" }

func (*Node) Metrics() []*Metric { return []*Metric{nodeFound, nodeDraining, nodeExcluded} }

func (n *Node) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	node, err := n.view.Node()
	if err != nil {
		return fmt.Errorf("reading the API view: %w", err)
	}
	ch <- nodeFound.must(boolFloat(node.Found))
	ch <- nodeDraining.must(boolFloat(node.Draining()))
	ch <- nodeExcluded.must(boolFloat(node.Excluded))
	return nil
}
