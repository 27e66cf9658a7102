package placement

import (
	"fmt"
	"net/netip"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// Cluster is everything the audit reads. Live mode fills it from the apiserver; manifest mode from files, with
// no EndpointSlices and no Pods (the workload templates are the pods-to-be) and synthetic or given Nodes.
type Cluster struct {
	Nodes          []*corev1.Node
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Pods           []*corev1.Pod
	ReplicaSets    []*appsv1.ReplicaSet
	Deployments    []*appsv1.Deployment
	StatefulSets   []*appsv1.StatefulSet
	DaemonSets     []*appsv1.DaemonSet
	HPAs           []*autoscalingv2.HorizontalPodAutoscaler
	PDBs           []*policyv1.PodDisruptionBudget
	// Live is true when EndpointSlices and Pods describe what runs now: only then can a blackhole exist "now"
	// (LT100, and the status grid).
	Live bool
	// Sources maps "Kind/namespace/name" to where an object came from (manifest mode), for the findings.
	Sources map[string]Source
	// NodePortAddresses is kube-proxy's nodePortAddresses as the user gave it (status --node-port-addresses):
	// NodePorts are served only on a node's addresses inside these prefixes. nil: kube-proxy's defaults (every
	// address, or the node's primary IPs in nftables mode), which every node with an address of the family has.
	NodePortAddresses []netip.Prefix
	// Announcers is what the announcers' own objects say (MetalLB's ServiceL2Status and ServiceBGPStatus, Cilium's
	// L2 announcement Leases), read cluster-wide in live mode; the zero value (manifest mode, or nothing read)
	// holds no record. The announcers that record themselves on the Service (kube-vip, OpenELB, PureLB) come with
	// the Service.
	Announcers announce.Snapshot
	// AnnouncersLeave is a node the announcers that follow local endpoints (announce.Source.FollowsLocalEndpoints)
	// have left: drain-check's state after a drain, where they move their announcements off the drained node to
	// nodes with a ready local endpoint. Their records naming it are read as naming such a node (the first by
	// name: which one an announcer elects is its own affair), or as gone when none has one. "" for the cluster as
	// it is.
	AnnouncersLeave string
	// IgnoreSelector is the exporter's --services.ignore-selector as the user gave it (status
	// --ignore-selector), which the API does not show: the Services it selects are ignored as the exporter
	// ignores them (kubeview.IgnoredReason; a Service's own annotation gives the reason first). nil: none.
	IgnoreSelector labels.Selector
}

// Source is where a manifest object was read: the file ("stdin" for standard input) and the line its
// document (or its item, in a List) starts on, counted from 1.
type Source struct {
	File string
	Line int
}

// SyntheticNodes makes n untainted, unlabelled-but-for-hostname nodes, node-1 … node-n: `--nodes N` in
// manifest mode.
func SyntheticNodes(n int) []*corev1.Node {
	nodes := make([]*corev1.Node, 0, n)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node-%d", i)
		nodes = append(nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux",
			}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP,
				Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}}},
		})
	}
	return nodes
}

func (c *Cluster) ref(kind, ns, name string) ObjectRef {
	src := c.Sources[kind+"/"+ns+"/"+name]
	return ObjectRef{Kind: kind, Namespace: ns, Name: name, Source: src.File, Line: src.Line}
}

// sortedNodes returns the nodes sorted by name, so every output lists them in one order.
func sortedNodes(nodes []*corev1.Node) []*corev1.Node {
	out := append([]*corev1.Node(nil), nodes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func nodeNames(nodes []*corev1.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}
