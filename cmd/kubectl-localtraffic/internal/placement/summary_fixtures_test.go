package placement_test

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// TestSummaryAgreesOnEveryFixture: on every fixture of the front ends' table, the verdict computed once per
// class of node (Summarize, what status prints) is node by node the one Status computes per node.
func TestSummaryAgreesOnEveryFixture(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			c := &placement.Cluster{Nodes: f.nodes, Services: []*corev1.Service{f.svc}, EndpointSlices: f.slices, Live: true}
			for _, p := range f.nodePortAddresses {
				c.NodePortAddresses = append(c.NodePortAddresses, netip.MustParsePrefix(p))
			}
			want, got := placement.Status(c), placement.Summarize(c)
			if len(got) != len(want) {
				t.Fatalf("%d summaries, %d statuses", len(got), len(want))
			}
			for i := range got {
				if e := got[i].Expand(); !reflect.DeepEqual(e, want[i]) {
					t.Errorf("per class\n%+v\nper node\n%+v", e, want[i])
				}
			}
		})
	}
}
