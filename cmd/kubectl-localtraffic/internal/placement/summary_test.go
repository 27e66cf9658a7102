package placement

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// sameAsStatus fails unless Summarize gives, on every node, exactly Status's verdict, and counts what
// Status's nodes show.
func sameAsStatus(t *testing.T, c *Cluster) []Summary {
	t.Helper()
	want := map[string]ServiceStatus{}
	for _, s := range Status(c) {
		want[s.Namespace+"/"+s.Name] = s
	}
	got := Summarize(c)
	if len(got) != len(want) {
		t.Fatalf("%d summaries, Status has %d Services", len(got), len(want))
	}
	for i := range got {
		s := &got[i]
		w := want[s.Namespace+"/"+s.Name]
		e := s.Expand()
		if !reflect.DeepEqual(e, w) {
			t.Errorf("%s/%s: per class\n%+v\nper node\n%+v", s.Namespace, s.Name, e, w)
		}
		if s.Dropping != len(w.Blackholes()) || !slices.Equal(s.DroppingNodes(-1), w.Blackholes()) || s.Failing() != w.Failing() {
			t.Errorf("%s/%s: dropping %d %v failing %v, Status: %v failing %v", s.Namespace, s.Name, s.Dropping,
				s.DroppingNodes(-1), s.Failing(), w.Blackholes(), w.Failing())
		}
		if first := s.DroppingNodes(1); len(w.Blackholes()) > 0 && !slices.Equal(first, w.Blackholes()[:1]) {
			t.Errorf("%s/%s: first dropping node %v", s.Namespace, s.Name, first)
		}
	}
	return got
}

// TestSummaryIsStatus: the verdict computed once per class of node is, node by node, the one computed per node:
// nodes hosting endpoints, excluded, draining, virtual and control-plane nodes, nodes outside nodePortAddresses,
// an externalIP only the network routes, a dual-stack Service, an ignored one, an outage, and nodes an
// announcer's record on the Service names.
func TestSummaryIsStatus(t *testing.T) {
	nodes := func() []*corev1.Node {
		n := append(workers(6), controlPlane(true), controlPlane(false))
		n[7].Name = "cp-2"
		n[3].Labels[corev1.LabelNodeExcludeBalancers] = "true"
		n[4].DeletionTimestamp = &metav1.Time{}
		n[5].Labels["type"] = "virtual-kubelet"
		n[5].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.9.9"}}
		return n
	}
	cases := map[string]*Cluster{
		"pinned NodePort": live(nodes(), nodePortService("checkout"), deployment("checkout", 3, pinnedTo("node-1")), "node-1", "node-1", "node-1"),
		"LoadBalancer":    live(nodes(), nodePortService("checkout", loadBalancer), deployment("checkout", 2), "node-1", "node-2"),
		"ignored": live(nodes(), nodePortService("checkout", annotated(kubeview.AnnotationIntentionalPlacement, "licensed")),
			deployment("checkout", 1), "node-2"),
		"outage": live(nodes(), nodePortService("checkout"), deployment("checkout", 0)),
		"externalIP": live(nodes(), nodePortService("checkout", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.10"} }),
			deployment("checkout", 1), "node-1"),
		"dual-stack": live(nodes(), nodePortService("checkout", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}), deployment("checkout", 2), "node-1", "node-2"),
	}
	// An announcer's record on the Service names node-3 (kube-vip's host annotation, OpenELB's layer 2 one):
	// node-3 hosts no endpoint, yet its verdict for the load balancer IP is not its class's.
	for name, key := range map[string]string{"kube-vip": announce.AnnotationKubeVIPHost, "OpenELB": announce.AnnotationOpenELBLayer2} {
		svc := nodePortService("checkout", loadBalancer, annotated(key, "node-3"), func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		})
		cases["announced by "+name] = live(nodes(), svc, deployment("checkout", 1), "node-1")
	}
	outside := live(nodes(), nodePortService("checkout"), deployment("checkout", 1), "node-1")
	outside.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("192.168.9.0/24")}
	cases["nodePortAddresses"] = outside
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { sameAsStatus(t, c) })
	}
}

// TestNodesOfAClassShareOneVerdict: six workers that differ only in name and addresses are one class; a
// node that hosts an endpoint has its own verdict, and so does a node outside nodePortAddresses.
func TestNodesOfAClassShareOneVerdict(t *testing.T) {
	c := live(workers(6), nodePortService("checkout"), deployment("checkout", 1), "node-1")
	if nc := classify(c.Nodes, c); len(nc.reps) != 1 {
		t.Errorf("%d classes of 6 equal workers, want 1", len(nc.reps))
	}
	c.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix(c.Nodes[5].Status.Addresses[0].Address + "/32")}
	if nc := classify(c.Nodes, c); len(nc.reps) != 2 {
		t.Errorf("%d classes with one node inside nodePortAddresses, want 2", len(nc.reps))
	}
	s := sameAsStatus(t, c)[0]
	if len(s.own) != 1 || s.Dropping != 1 || s.CannotTell != 4 {
		t.Errorf("own verdicts %d, dropping %d, cannot tell %d; want 1, 1, 4", len(s.own), s.Dropping, s.CannotTell)
	}
}

// TestClassKeyCoversNodeState: every NodeState field but the name and the address lists tells classes apart,
// so a new input of the verdict added to NodeState splits classes instead of being shared by mistake. The
// addresses are left out because the verdict reads them only as node evidence, which the plugin has not.
func TestClassKeyCoversNodeState(t *testing.T) {
	left := []string{"Name", "InternalIPs", "ExternalIPs", "PodCIDRs"}
	base := classKey(kubeview.NodeState{}, nil)
	typ := reflect.TypeFor[kubeview.NodeState]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var ns kubeview.NodeState
		v := reflect.ValueOf(&ns).Elem().Field(i)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.String:
			v.SetString("x")
		case reflect.Slice:
			v.Set(reflect.ValueOf([]string{"x"}))
		default:
			t.Fatalf("NodeState.%s is a %s: teach this test to set it", f.Name, v.Kind())
		}
		if split := classKey(ns, nil) != base; split == slices.Contains(left, f.Name) {
			t.Errorf("NodeState.%s: splits classes %v", f.Name, split)
		}
	}
	if classKey(kubeview.NodeState{}, map[corev1.IPFamily]bool{corev1.IPv4Protocol: true}) == base {
		t.Error("the nodePortAddresses outcome does not split classes")
	}
}

// TestSortWorstFirst: failing Services first, the most dropping nodes first, then namespace and name; then an
// outage; an ignored Service, however many nodes drop it, fails nothing and comes after.
func TestSortWorstFirst(t *testing.T) {
	s := []Summary{{Namespace: "a", Name: "ok"}, {Namespace: "b", Name: "ignored", Ignored: true, Dropping: 9},
		{Namespace: "c", Name: "one", Dropping: 1}, {Namespace: "a", Name: "two", Dropping: 2}, {Namespace: "a", Name: "one", Dropping: 1},
		{Namespace: "z", Name: "down", Outage: true}}
	SortWorstFirst(s)
	var got []string
	for _, x := range s {
		got = append(got, x.Namespace+"/"+x.Name)
	}
	if want := []string{"a/two", "a/one", "c/one", "z/down", "b/ignored", "a/ok"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestSummaryDropsWhatIsLost: kube-vip announces the load balancer IP from node-3, which hosts no endpoint, so
// node-3 drops it (a blackhole); its NodePort is dropped too, but the load balancer's health check drains it
// there. The summary's Drops names what is lost, the load balancer IP; node-3's own Drops names both.
func TestSummaryDropsWhatIsLost(t *testing.T) {
	svc := nodePortService("checkout", loadBalancer, annotated(announce.AnnotationKubeVIPHost, "node-3"), func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	})
	c := live(workers(3), svc, deployment("checkout", 1), "node-1")
	s := sameAsStatus(t, c)[0]
	lb, nodePort := "load balancer IP 192.0.2.10:80/TCP", "NodePort 30090/TCP"
	if !slices.Equal(s.DroppingNodes(-1), []string{"node-3"}) || !slices.Equal(s.Drops, []string{lb}) {
		t.Errorf("dropping %v, drops %v; want [node-3], [%s]", s.DroppingNodes(-1), s.Drops, lb)
	}
	if n := s.Expand().Nodes[2]; !slices.Equal(n.Drops, []string{nodePort, lb}) {
		t.Errorf("node-3 drops %v, want [%s %s]", n.Drops, nodePort, lb)
	}
}
