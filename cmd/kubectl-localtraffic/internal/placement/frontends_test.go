package placement_test

// One set of fixtures through both front ends of the decision (package verdict): the exporter (package
// collector: informers over the API, its transform and counting, the gatherer with its probes, rule read and
// address evidence, exactly as a scrape runs) on every node, and the plugin (this package's Status, from the API
// alone). Both must give the same answer for every node, or the plugin must say, explicitly, that it cannot tell
// from the API. The test lives on the plugin's side because the plugin's package is internal to it; the
// exporter's collector is importable from anywhere.
//
// Each fixture is a cluster as the API shows it plus what only the nodes know: the network routes an externalIP
// to some node (the address held on its interface), and every node's kube-proxy is healthy and in step with the
// API. A small model of that kube-proxy (kubeProxyOn, written here from docs/kube-proxy.md, not from
// kubeview's counting) answers the exporter's health check probes and is the rule set it reads. Each fixture
// also states the truth per node (want), so agreement on a wrong answer fails too. Some fixtures also give the
// exporter an arrivals meter and the clients it sees (arriving): the exporter then decides from packets the API
// does not show (lost traffic, a load balancer that ignores its health check, no client yet), and the plugin
// must agree or say it cannot tell, never give the opposite answer.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

const (
	fixtureNS  = "shop"
	fixtureSvc = "web"
	hcnp       = 32000
)

// answer is one node's verdict as both front ends state it.
type answer struct {
	blackhole, inRotation bool
}

// fixture is a cluster and its truth.
type fixture struct {
	name   string
	nodes  []*corev1.Node
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	// heldBy: the node whose interface holds each externalIP (the network routes it there).
	heldBy map[string]string
	// want: the truth per node, which the exporter must state.
	want map[string]answer
	// cannotTell: the nodes where the plugin must say it cannot tell (an externalIP it would drop, a NodePort
	// whose clients only the node sees), and the kind of destination it cannot tell (ExternalIP when "").
	cannotTell     []string
	cannotTellKind verdict.Kind
	// nodePortAddresses is kube-proxy's --nodeport-addresses on every node (nil: its default, every address),
	// given to both front ends as the user would give it to the plugin.
	nodePortAddresses []string
	// arriving, when not nil, gives the exporter an arrivals meter: per node, the destinations new client
	// connection attempts keep arriving at, from before the exporter's first scrape until its last, past the
	// grace window (exporterVerdict scrapes twice). wantReason: the exporter's blackhole reason per node, so the
	// fixture proves the exporter decided from the arrivals.
	arriving   map[string][]arrivals.Dest
	wantReason map[string]verdict.Reason
	// ignoreSelector is the exporter's --services.ignore-selector, given to the plugin as status
	// --ignore-selector; wantIgnored: both must then mark the Service ignored.
	ignoreSelector string
	wantIgnored    bool
}

func node(i int, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i)},
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::%d", i)},
		}},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

func nodes(n int) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		out[i] = node(i + 1)
	}
	return out
}

// onGCE gives the nodes GCE's providerID: a cloud controller whose load balancers check healthCheckNodePort
// over HTTP and never hold the VIP on a node.
func onGCE(ns []*corev1.Node) []*corev1.Node {
	for _, n := range ns {
		n.Spec.ProviderID = "gce://project/europe-west1-b/" + n.Name
	}
	return ns
}

func service(typ corev1.ServiceType, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: fixtureNS, Name: fixtureSvc},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if typ != corev1.ServiceTypeClusterIP {
		s.Spec.Ports[0].NodePort = 30090
	}
	if typ == corev1.ServiceTypeLoadBalancer {
		s.Spec.HealthCheckNodePort = hcnp
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// ep is one endpoint on a node; conditions nil are kube-proxy's defaults (ready, serving, not terminating).
type ep struct {
	node                        string
	ready, serving, terminating *bool
}

func on(nodes ...string) []ep {
	out := make([]ep, len(nodes))
	for i, n := range nodes {
		out[i] = ep{node: n}
	}
	return out
}

// slice is an EndpointSlice of the fixture Service for one family and port, addresses numbered per node.
func slice(name string, family discoveryv1.AddressType, port string, eps []ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: fixtureNS, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: fixtureSvc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, e := range eps {
		addr := fmt.Sprintf("10.244.%s.%d", strings.TrimPrefix(e.node, "node-"), 10+i)
		if family == discoveryv1.AddressTypeIPv6 {
			addr = fmt.Sprintf("fd00:244:%s::%d", strings.TrimPrefix(e.node, "node-"), 10+i)
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}})
	}
	return s
}

func v4(eps []ep) *discoveryv1.EndpointSlice {
	return slice(fixtureSvc+"-v4", discoveryv1.AddressTypeIPv4, "http", eps)
}

func serves(nodes ...string) map[string]answer {
	m := map[string]answer{}
	for _, n := range nodes {
		m[n] = answer{inRotation: true}
	}
	return m
}

// with adds answers to m.
func with(m map[string]answer, a answer, nodes ...string) map[string]answer {
	for _, n := range nodes {
		m[n] = a
	}
	return m
}

var (
	hole    = answer{blackhole: true, inRotation: true}
	drained = answer{}
)

// The fixture Service's IPv4 destinations as the arrivals meter watches them: its NodePort on the node's own
// addresses, and its load balancer IP.
var (
	nodePortDest = arrivals.NodeDest(arrivals.TCP, false, 30090)
	lbDest       = arrivals.Dest{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.10"), Port: 80}
)

func fixtures() []fixture {
	dualStack := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		s.Spec.ClusterIPs = []string{"10.96.0.20", "fd00:96::20"}
	}
	externalIP := func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.70"} }
	return []fixture{
		{name: "NodePort pinned to one node: the others blackhole",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(on("node-1", "node-1"))},
			want: with(serves("node-1"), hole, "node-2", "node-3")},
		{name: "no endpoint anywhere: an outage, no node's blackhole",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(nil)},
			want: serves("node-1", "node-2", "node-3")},
		{name: "health-checked LoadBalancer of a cloud controller: nodes without a ready endpoint answer 503 and are drained",
			nodes: onGCE(nodes(3)), svc: service(corev1.ServiceTypeLoadBalancer), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			want: with(serves("node-1"), drained, "node-2", "node-3")},
		{name: "LoadBalancer whose VIP an announcer holds on node-2, without a replica: node-2 blackholes whatever its check says",
			nodes: nodes(3), svc: service(corev1.ServiceTypeLoadBalancer), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			heldBy: map[string]string{"192.0.2.10": "node-2"},
			want:   with(with(serves("node-1"), hole, "node-2"), drained, "node-3"),
			// No cloud controller is known to run the load balancer: the VIP may be held on any node, which
			// only the node's own interfaces show.
			cannotTell: []string{"node-2", "node-3"}, cannotTellKind: verdict.LoadBalancerIP},
		{name: "LoadBalancer without a known cloud controller, its VIP held nowhere here: the plugin cannot tell drained from held",
			nodes: nodes(3), svc: service(corev1.ServiceTypeLoadBalancer), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			want:       with(serves("node-1"), drained, "node-2", "node-3"),
			cannotTell: []string{"node-2", "node-3"}, cannotTellKind: verdict.LoadBalancerIP},
		{name: "LoadBalancer: a serving-terminating endpoint forwards while its health check drains the node",
			nodes: nodes(2), svc: service(corev1.ServiceTypeLoadBalancer),
			slices: []*discoveryv1.EndpointSlice{v4([]ep{{node: "node-1"},
				{node: "node-2", ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)}})},
			want: with(serves("node-1"), drained, "node-2")},
		{name: "LoadBalancer: a second port without a local endpoint drops while the check answers 200",
			nodes: nodes(2),
			svc: service(corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 9000, NodePort: 30091})
			}),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1", "node-2")),
				slice(fixtureSvc+"-admin", discoveryv1.AddressTypeIPv4, "admin", on("node-1"))},
			want: with(serves("node-1"), hole, "node-2")},
		{name: "ClusterIP with an externalIP routed to node-2: only node-2 blackholes; the API cannot tell which",
			nodes: nodes(3), svc: service(corev1.ServiceTypeClusterIP, externalIP),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))}, heldBy: map[string]string{"192.0.2.70": "node-2"},
			want: with(with(map[string]answer{"node-1": drained}, hole, "node-2"), drained, "node-3"),
			// node-1 serves the address if it is routed there, but it is not: not in rotation on either side.
			cannotTell: []string{"node-2", "node-3"}},
		{name: "ClusterIP with an externalIP routed to the node that serves it",
			nodes: nodes(2), svc: service(corev1.ServiceTypeClusterIP, externalIP),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))}, heldBy: map[string]string{"192.0.2.70": "node-1"},
			want:       map[string]answer{"node-1": {inRotation: true}, "node-2": drained},
			cannotTell: []string{"node-2"}},
		{name: "NodePort with an externalIP: the NodePort decides without node evidence",
			nodes: nodes(2), svc: service(corev1.ServiceTypeNodePort, externalIP),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			want:   with(serves("node-1"), hole, "node-2")},
		{name: "kube-proxy's nodePortAddresses leaves node-3 out: no NodePort is served there, so it drops nothing",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			nodePortAddresses: []string{"10.0.0.1/32", "10.0.0.2/32"},
			want:              with(with(serves("node-1"), hole, "node-2"), drained, "node-3"),
			// Which addresses node-3's interfaces hold (one inside would serve the NodePort) only node-3 shows.
			cannotTell: []string{"node-3"}, cannotTellKind: verdict.NodePort},
		{name: "virtual and excluded nodes receive nothing",
			nodes: []*corev1.Node{node(1), node(2, func(n *corev1.Node) {
				n.Labels[kubeview.LabelVirtualKubeletType] = kubeview.VirtualKubeletType
				n.Spec.Taints = []corev1.Taint{{Key: kubeview.TaintVirtualKubelet, Value: "azure", Effect: corev1.TaintEffectNoSchedule}}
			}), node(3, func(n *corev1.Node) { n.Labels[kubeview.LabelEKSComputeType] = kubeview.EKSComputeTypeFargate }),
				node(4, func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "" })},
			svc: service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			want: with(serves("node-1"), drained, "node-2", "node-3", "node-4"),
			// The exclude label takes node-4 out of load balancers only: whether NodePort clients use it, only
			// its exporter sees (here none does: out).
			cannotTell: []string{"node-4"}, cannotTellKind: verdict.NodePort},
		{name: "virtual nodes are no load balancer target either",
			nodes: []*corev1.Node{node(1), node(2, func(n *corev1.Node) {
				n.Labels[kubeview.LabelVirtualKubeletType] = kubeview.VirtualKubeletType
			})},
			svc: service(corev1.ServiceTypeLoadBalancer), slices: []*discoveryv1.EndpointSlice{v4(on("node-1", "node-2"))},
			want: with(serves("node-1"), drained, "node-2")},
		{name: "dual-stack NodePort: node-2 has only an IPv4 endpoint and drops IPv6",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort, dualStack),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1", "node-2")),
				slice(fixtureSvc+"-v6", discoveryv1.AddressTypeIPv6, "http", on("node-1"))},
			want: with(serves("node-1"), hole, "node-2", "node-3")},
		{name: "arrivals: NodePort clients dropped on node-2 are lost traffic there, and node-3 has none yet",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			arriving:   map[string][]arrivals.Dest{"node-1": {nodePortDest}, "node-2": {nodePortDest}},
			want:       with(serves("node-1"), hole, "node-2", "node-3"),
			wantReason: map[string]verdict.Reason{"node-2": verdict.ReasonTrafficLost, "node-3": verdict.ReasonNoTrafficSeen}},
		{name: "arrivals: a load balancer that ignores its health check keeps sending to node-2, which its check drains",
			nodes: nodes(3), svc: service(corev1.ServiceTypeLoadBalancer), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			arriving: map[string][]arrivals.Dest{"node-1": {lbDest}, "node-2": {lbDest}},
			want:     with(with(serves("node-1"), hole, "node-2"), drained, "node-3"),
			// The plugin trusts a check only a known cloud controller's load balancer is known to honour.
			cannotTell: []string{"node-2", "node-3"}, cannotTellKind: verdict.LoadBalancerIP,
			wantReason: map[string]verdict.Reason{"node-2": verdict.ReasonHealthCheckIgnored}},
		{name: "arrivals: NodePort clients keep using node-2, excluded from load balancers, which has no endpoint",
			nodes: []*corev1.Node{node(1), node(2, func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "" }), node(3)},
			svc:   service(corev1.ServiceTypeNodePort), slices: []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			arriving:   map[string][]arrivals.Dest{"node-2": {nodePortDest}},
			want:       with(with(serves("node-1"), hole, "node-2"), hole, "node-3"),
			cannotTell: []string{"node-2"}, cannotTellKind: verdict.NodePort,
			wantReason: map[string]verdict.Reason{"node-2": verdict.ReasonTrafficLost, "node-3": verdict.ReasonNoTrafficSeen}},
		{name: "the exporter's ignore selector: both front ends judge the Service as any other and mark it ignored",
			nodes: nodes(3), svc: service(corev1.ServiceTypeNodePort, func(s *corev1.Service) { s.Labels = map[string]string{"team": "legacy"} }),
			slices:         []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			ignoreSelector: "team=legacy", wantIgnored: true,
			want: with(serves("node-1"), hole, "node-2", "node-3")},
		{name: "the exporter's ignore selector selects other Services: this one fails on both sides",
			nodes: nodes(2), svc: service(corev1.ServiceTypeNodePort, func(s *corev1.Service) { s.Labels = map[string]string{"team": "shop"} }),
			slices:         []*discoveryv1.EndpointSlice{v4(on("node-1"))},
			ignoreSelector: "team=legacy",
			want:           with(serves("node-1"), hole, "node-2")},
		{name: "dual-stack LoadBalancer: node-2's IPv6 check answers 503, its IPv4 one 200",
			nodes: nodes(2), svc: service(corev1.ServiceTypeLoadBalancer, dualStack),
			slices: []*discoveryv1.EndpointSlice{v4(on("node-1", "node-2")),
				slice(fixtureSvc+"-v6", discoveryv1.AddressTypeIPv6, "http", on("node-1"))},
			want: serves("node-1", "node-2")},
	}
}

// TestFrontEndsAgree is the table test README points to: the exporter and `kubectl localtraffic status` give
// the same answer on every node of every fixture, or the plugin says it cannot tell from the API.
func TestFrontEndsAgree(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			c := &placement.Cluster{Nodes: f.nodes, Services: []*corev1.Service{f.svc}, EndpointSlices: f.slices, Live: true}
			for _, p := range f.nodePortAddresses {
				c.NodePortAddresses = append(c.NodePortAddresses, netip.MustParsePrefix(p))
			}
			c.IgnoreSelector = ignoreSelector(t, f)
			st := placement.Status(c)
			if len(st) != 1 {
				t.Fatalf("plugin: %d Services, want 1", len(st))
			}
			if st[0].Ignored != f.wantIgnored {
				t.Errorf("plugin: ignored %v (%q), want %v", st[0].Ignored, st[0].IgnoredReason, f.wantIgnored)
			}
			for _, ps := range st[0].Nodes {
				exp, ignored := exporterVerdict(t, f, ps.Node)
				if ignored.Ignored != st[0].Ignored || ignored.IgnoredReason != st[0].IgnoredReason {
					t.Errorf("%s: exporter's ignored %v (%q), the plugin's %v (%q)", ps.Node, ignored.Ignored, ignored.IgnoredReason,
						st[0].Ignored, st[0].IgnoredReason)
				}
				got := answer{blackhole: exp.Blackhole, inRotation: exp.InRotation}
				if got != f.want[ps.Node] {
					t.Errorf("%s: exporter says %+v, the truth is %+v\n%+v", ps.Node, got, f.want[ps.Node], exp.Families)
				}
				if exp.CannotTell {
					t.Errorf("%s: the exporter has node evidence and must never answer cannot-tell", ps.Node)
				}
				if r, ok := f.wantReason[ps.Node]; ok && exp.Reason != r {
					t.Errorf("%s: exporter's reason %q, want %q", ps.Node, exp.Reason, r)
				}
				wantCannotTell := slices.Contains(f.cannotTell, ps.Node)
				if (len(ps.CannotTell) > 0) != wantCannotTell {
					t.Errorf("%s: plugin cannot tell %v, want cannot-tell %v", ps.Node, ps.CannotTell, wantCannotTell)
				}
				if wantCannotTell {
					// The plugin names what only the node can decide: exactly the destinations the exporter
					// decided from its evidence (the externalIPs it drops, or the NodePorts).
					kind := f.cannotTellKind
					if kind == "" {
						kind = verdict.ExternalIP
					}
					var decided []string
					for _, fv := range exp.Families {
						for _, e := range fv.Entries {
							if e.Dropped && e.Kind == kind {
								decided = append(decided, e.Destination.String())
							}
						}
					}
					if !slices.Equal(ps.CannotTell, decided) || ps.Blackhole {
						t.Errorf("%s: plugin cannot tell %v (blackhole %v), the exporter decided %v from node evidence",
							ps.Node, ps.CannotTell, ps.Blackhole, decided)
					}
					continue
				}
				if ps.Blackhole != exp.Blackhole {
					t.Errorf("%s: plugin says blackhole %v, exporter %v", ps.Node, ps.Blackhole, exp.Blackhole)
				}
				// Rotation too, where the API shows it (not an externalIP the network may route here, which the
				// plugin would serve if it came).
				expServes := exp.InRotation && !exp.Blackhole
				if !ps.RotationUnknown && (ps.InRotation != exp.InRotation || ps.Serves != expServes) {
					t.Errorf("%s: plugin says in rotation %v serves %v, exporter %v %v", ps.Node,
						ps.InRotation, ps.Serves, exp.InRotation, expServes)
				}
			}
		})
	}
}

// ignoreSelector parses the fixture's selector as both front ends parse theirs (nil: none).
func ignoreSelector(t *testing.T, f fixture) labels.Selector {
	t.Helper()
	if f.ignoreSelector == "" {
		return nil
	}
	sel, err := labels.Parse(f.ignoreSelector)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// exporterVerdict runs the exporter's gatherer for nodeName over the fixture, as one scrape does, and returns
// its verdict and its view of the Service (whether it is ignored, and why).
func exporterVerdict(t *testing.T, f fixture, nodeName string) (verdict.Verdict, kubeview.ServiceState) {
	t.Helper()
	objs := []runtime.Object{f.svc}
	for _, n := range f.nodes {
		objs = append(objs, n)
	}
	for _, s := range f.slices {
		objs = append(objs, s)
	}
	var opts []kubeview.Option
	if sel := ignoreSelector(t, f); sel != nil {
		opts = append(opts, kubeview.WithIgnoreSelector(sel))
	}
	view := kubeview.New(kubeviewtest.NewAPI(fake.NewClientset(objs...)), nodeName, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	view.Start(ctx)
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	// The fake informers fill after their first sync; wait until the view holds the fixture.
	for {
		snap, err := view.Snapshot()
		if err == nil && snap.Node.Found && len(snap.Services) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the view never held the fixture: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	var self *corev1.Node
	for _, n := range f.nodes {
		if n.Name == nodeName {
			self = n
		}
	}
	kp := kubeProxyOn(f, nodeName)
	var local []net.IP
	for _, a := range self.Status.Addresses {
		local = append(local, net.ParseIP(a.Address))
	}
	for ip, holder := range f.heldBy {
		if holder == nodeName {
			local = append(local, net.ParseIP(ip))
		}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := scrape.GathererConfig{
		View: view, RuleReader: kp, Addrs: fixedAddrs(local),
		KubeProxyAddress:  func(kubeview.NodeState) (string, error) { return "127.0.0.1:10256", nil },
		NodePortAddresses: append([]string{}, f.nodePortAddresses...), ExternalIPWindow: 10 * time.Minute,
		Client: &http.Client{Transport: kp}, ProbeTimeout: time.Second, Concurrency: 4, Logger: logger,
	}
	var m *clientsMeter
	if f.arriving != nil {
		m = &clientsMeter{arriving: f.arriving[nodeName], since: meterStart.Add(-time.Second), now: meterStart}
		cfg.Meter = m
	}
	g := scrape.NewGatherer(cfg)
	st := g.Gather(ctx)
	// With a meter, scrapes every 30 s until past the grace window: the exporter counts a drained node's
	// arrivals from the first scrape that found the destination dropped, and remembers that scrape only while
	// scrapes keep coming.
	for m != nil && m.now.Before(meterStart.Add(scrape.DefaultGrace+time.Minute)) {
		m.now = m.now.Add(30 * time.Second)
		st = g.Gather(ctx)
	}
	if st.APIErr != nil || len(st.Services) != 1 {
		t.Fatalf("%s: scrape: %v, %d Services", nodeName, st.APIErr, len(st.Services))
	}
	return st.Services[0].Verdict, st.Services[0].Service
}

// meterStart is when a fixture's meter is first read.
var meterStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// clientsMeter is a node's arrivals meter (scrape.ArrivalsMeter) that sees clients keep arriving at the
// destinations in arriving, since since, the latest a second before now, and nothing anywhere else (every one
// a client's: no health checker among them). Gather is not concurrent with the test's changes of now.
type clientsMeter struct {
	arriving   []arrivals.Dest
	since, now time.Time
	watched    arrivals.Watch
}

func (m *clientsMeter) Watch(w arrivals.Watch) error {
	m.watched = w
	return nil
}

func (m *clientsMeter) Snapshot() arrivals.Snapshot {
	s := arrivals.Snapshot{Status: arrivals.StatusOK, Since: m.since, Taken: m.now,
		Families: []arrivals.FamilyStats{{Family: "IPv4"}, {Family: "IPv6"}}}
	for _, d := range m.watched.Dests {
		c := arrivals.DestCount{Dest: d, WatchedSince: m.since}
		if slices.Contains(m.arriving, d) {
			c.Attempts = uint64(m.now.Sub(m.since) / time.Second)
			c.FirstSeen, c.ActiveSince, c.LastSeen = m.since, m.since, m.now.Add(-time.Second)
			// Clients, whose dropped SYNs the kernel retransmits: not a port scan's single SYNs.
			c = scrapetest.Repeating(c)
		}
		s.Dests = append(s.Dests, c)
	}
	// Sorted as the meter sorts them (protocol, address, port): Snapshot.Dest searches them.
	slices.SortFunc(s.Dests, func(a, b arrivals.DestCount) int {
		if a.Protocol != b.Protocol {
			return int(a.Protocol) - int(b.Protocol)
		}
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	return s
}

type fixedAddrs []net.IP

func (a fixedAddrs) LocalAddrs() ([]net.IP, error) { return a, nil }

// kubeProxy is a healthy kube-proxy on one node, in step with the API: it answers the health check node port
// and kube-proxy's own health server (an http.RoundTripper for the exporter's probes), and its rules are what
// the exporter reads (a scrape.DataplaneReader).
type kubeProxy struct {
	node     string
	families []corev1.IPFamily
	// local and ready: per family and port name, kube-proxy's local endpoints (ready ones, else
	// serving-terminating ones) and the ready ones; remote: usable endpoints elsewhere.
	local, ready, remote map[corev1.IPFamily]map[string]int
	// readyIPs: per family, the distinct ready local addresses the health check counts (over all ports).
	readyIPs map[corev1.IPFamily]map[string]bool
	svc      *corev1.Service
}

func kubeProxyOn(f fixture, node string) *kubeProxy {
	kp := &kubeProxy{node: node, families: f.svc.Spec.IPFamilies, svc: f.svc,
		local: map[corev1.IPFamily]map[string]int{}, ready: map[corev1.IPFamily]map[string]int{}, remote: map[corev1.IPFamily]map[string]int{},
		readyIPs: map[corev1.IPFamily]map[string]bool{}}
	for _, fam := range kp.families {
		kp.local[fam], kp.ready[fam], kp.remote[fam] = map[string]int{}, map[string]int{}, map[string]int{}
		kp.readyIPs[fam] = map[string]bool{}
		term := map[string]int{}
		for _, s := range f.slices {
			if string(s.AddressType) != string(fam) {
				continue
			}
			port := *s.Ports[0].Name
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready == nil || *e.Conditions.Ready
				servingTerm := !ready && (e.Conditions.Serving == nil || *e.Conditions.Serving) &&
					e.Conditions.Terminating != nil && *e.Conditions.Terminating
				switch {
				case *e.NodeName != node && (ready || servingTerm):
					kp.remote[fam][port]++
				case ready:
					kp.ready[fam][port]++
					kp.readyIPs[fam][e.Addresses[0]] = true
				case servingTerm:
					term[port]++
				}
			}
		}
		for port, n := range kp.ready[fam] {
			kp.local[fam][port] = n
		}
		for port, n := range term {
			if kp.local[fam][port] == 0 {
				kp.local[fam][port] = n
			}
		}
	}
	return kp
}

// Read is the rule set: for a port with endpoints somewhere but none here, a "has no local endpoints" drop
// for the NodePort, each load balancer IP and each externalIP of the family (docs/kube-proxy.md, iptables mode).
func (kp *kubeProxy) Read(context.Context) (dataplane.Rules, error) {
	byFamily := map[string]map[kernelrules.ServicePort]kernelrules.PortState{}
	for _, fam := range kp.families {
		ports := map[kernelrules.ServicePort]kernelrules.PortState{}
		for _, p := range kp.svc.Spec.Ports {
			sp := kernelrules.ServicePort{Namespace: fixtureNS, Name: fixtureSvc, Port: p.Name, Protocol: string(p.Protocol)}
			st := kernelrules.PortState{Programmed: true, LocalEndpoints: kp.local[fam][p.Name]}
			if st.LocalEndpoints == 0 && kp.remote[fam][p.Name] > 0 {
				if p.NodePort != 0 {
					st.Drops = append(st.Drops, kernelrules.DropRule{Port: p.NodePort, Counted: true})
				}
				var addrs []string
				for _, ing := range kp.svc.Status.LoadBalancer.Ingress {
					addrs = append(addrs, ing.IP)
				}
				for _, a := range append(addrs, kp.svc.Spec.ExternalIPs...) {
					if kubeview.IPFamilyOf(a) == fam {
						st.Drops = append(st.Drops, kernelrules.DropRule{Address: a, Port: p.Port, Counted: true})
					}
				}
				st.Drop = len(st.Drops) > 0
			}
			ports[sp] = st
		}
		byFamily[string(fam)] = ports
	}
	return kernelrules.NewFamilySnapshot(kernelrules.ModeIPTables, kernelrules.BackendNFT, time.Now(), byFamily), nil
}

// RoundTrip answers kube-proxy's health server (any other port) and the health check node port: 200 while the
// family of the address asked has a ready local endpoint, else 503, with kube-proxy's body
// (docs/kube-proxy.md, Health check node port and Health server).
func (kp *kubeProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	host, port, err := net.SplitHostPort(req.URL.Host)
	if err != nil {
		return nil, err
	}
	resp := &http.Response{Header: http.Header{"Content-Type": {"application/json"}}, Request: req}
	if port != strconv.Itoa(hcnp) {
		resp.StatusCode = http.StatusOK
		resp.Body = io.NopCloser(strings.NewReader(`{"lastUpdated":"2026-11-30T11:45:14.71Z","currentTime":"2026-11-30T11:45:14.71Z","nodeEligible":true,"healthy":true}`))
		return resp, nil
	}
	n := len(kp.readyIPs[kubeview.IPFamilyOf(host)])
	resp.StatusCode = http.StatusOK
	if n == 0 {
		resp.StatusCode = http.StatusServiceUnavailable
	}
	resp.Body = io.NopCloser(strings.NewReader(fmt.Sprintf(`{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":true}`,
		fixtureNS, fixtureSvc, n)))
	return resp, nil
}
