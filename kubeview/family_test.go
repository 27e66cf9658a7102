package kubeview

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func dualStack(svc *corev1.Service) *corev1.Service {
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	return svc
}

func ipv6Slice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.AddressType = discoveryv1.AddressTypeIPv6
	return s
}

// transformed runs the informer's transform, as the View would, so the counting sees what it sees in production.
func transformed(t *testing.T, node string, slices ...*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	t.Helper()
	out := make([]*discoveryv1.EndpointSlice, 0, len(slices))
	for _, s := range slices {
		o, err := TransformEndpointSlice(node)(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out
}

// One proxier per family: a node with an IPv4 endpoint but no IPv6 one forwards IPv4 and drops IPv6, and a
// dual-stack pod counts once in each family, not twice.
func TestDualStackCountsPerFamily(t *testing.T) {
	svc := dualStack(localService("shop", "web", corev1.ServiceTypeNodePort))
	v4 := slice("shop", "web", "web-v4", nil, readyOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2"))
	v6 := ipv6Slice(slice("shop", "web", "web-v6", nil, readyOn("fd00:244:2::10", "node-2")))

	node1 := ServiceStateOf(svc, transformed(t, "node-1", v4, v6))
	f4, ok4 := node1.Family(corev1.IPv4Protocol)
	f6, ok6 := node1.Family(corev1.IPv6Protocol)
	if !ok4 || !ok6 {
		t.Fatalf("families = %+v", node1.Families)
	}
	if f4.LocalEndpoints != 1 || f4.Ports[0].Local != 1 || f6.LocalEndpoints != 0 || f6.Ports[0].Local != 0 {
		t.Errorf("node-1: IPv4 %+v, IPv6 %+v", f4, f6)
	}
	if !f6.Ports[0].ClusterWide {
		t.Error("node-2 has an IPv6 endpoint: IPv6 is usable cluster-wide, node-1 drops rather than rejects")
	}
	if node1.LocalEndpoints() != 0 || node1.HasLocalEndpoint() {
		t.Errorf("node-1 summary: local=%d has=%v, want 0 and false (its IPv6 NodePort drops)", node1.LocalEndpoints(), node1.HasLocalEndpoint())
	}

	node2 := ServiceStateOf(svc, transformed(t, "node-2", v4, v6))
	if node2.LocalEndpoints() != 1 || !node2.HasLocalEndpoint() {
		t.Errorf("node-2 summary: local=%d has=%v, want 1 and true", node2.LocalEndpoints(), node2.HasLocalEndpoint())
	}
	for _, fe := range node2.Families {
		if fe.LocalEndpoints != 1 || fe.LocalReadyEndpoints != 1 {
			t.Errorf("node-2 %s: %+v, want one endpoint (the dual-stack pod counts once per family)", fe.Family, fe)
		}
	}
}

// A single-stack IPv6 Service reads only IPv6 slices; a Service the API server filled no families in falls back
// to its cluster IP's family.
func TestServiceFamilies(t *testing.T) {
	v6only := localService("shop", "web", corev1.ServiceTypeNodePort)
	v6only.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	v6only.Spec.ClusterIP, v6only.Spec.ClusterIPs = "fd00:96::10", []string{"fd00:96::10"}
	st := ServiceStateOf(v6only, transformed(t, "node-1",
		slice("shop", "web", "web-v4", nil, readyOn("10.244.1.10", "node-1")),
		ipv6Slice(slice("shop", "web", "web-v6", nil, readyOn("fd00:244:1::10", "node-1"), readyOn("fd00:244:1::11", "node-1")))))
	if len(st.Families) != 1 || st.Families[0].Family != corev1.IPv6Protocol || st.LocalEndpoints() != 2 {
		t.Errorf("IPv6-only Service: %+v", st.Families)
	}

	legacy := localService("shop", "old", corev1.ServiceTypeNodePort)
	legacy.Spec.ClusterIP = "fd00:96::11"
	if got := serviceFamilies(legacy); !reflect.DeepEqual(got, []corev1.IPFamily{corev1.IPv6Protocol}) {
		t.Errorf("families from the cluster IP = %v", got)
	}
	legacy.Spec.ClusterIP = ""
	if got := serviceFamilies(legacy); !reflect.DeepEqual(got, []corev1.IPFamily{corev1.IPv4Protocol}) {
		t.Errorf("families with nothing to go by = %v, want IPv4", got)
	}
}

// kube-proxy keys endpoints by canonical IP and port; the non-terminating copy of a duplicate wins, whichever
// slice comes first. An address of the wrong family inside a slice is ignored.
func TestDuplicateEndpointsAndCanonicalIPs(t *testing.T) {
	svc := dualStack(localService("shop", "web", corev1.ServiceTypeNodePort))
	for _, order := range []string{"terminating first", "ready first"} {
		t.Run(order, func(t *testing.T) {
			term := slice("shop", "web", "web-a", nil, terminatingOn("10.244.1.10", "node-1"))
			ready := slice("shop", "web", "web-b", nil, readyOn("10.244.001.010", "node-1")) // sloppy spelling, same IP
			slices := []*discoveryv1.EndpointSlice{term, ready}
			if order == "ready first" {
				slices = []*discoveryv1.EndpointSlice{ready, term}
			}
			st := ServiceStateOf(svc, transformed(t, "node-1", slices...))
			f4 := ipv4(st)
			if f4.Ports[0].Local != 1 || f4.Ports[0].LocalTerminating || f4.LocalReadyEndpoints != 1 {
				t.Errorf("IPv4: %+v, want one ready endpoint", f4)
			}
		})
	}
	v6 := ipv6Slice(slice("shop", "web", "web-v6", nil,
		readyOn("fd00:244:1::0010", "node-1"), readyOn("fd00:244:1::10", "node-1"), readyOn("10.244.1.99", "node-1")))
	st := ServiceStateOf(svc, transformed(t, "node-1", v6))
	if f6, _ := st.Family(corev1.IPv6Protocol); f6.LocalEndpoints != 1 {
		t.Errorf("IPv6: %+v, want one endpoint (two spellings of one IP; the IPv4 address ignored)", f6)
	}
}

// The cloud service controller's reading of exclude-from-external-load-balancers: present excludes, unless the
// value parses as false.
func TestExcludeLabelValues(t *testing.T) {
	for value, excluded := range map[string]bool{"": true, "true": true, "yes": true, "false": false, "False": false, "0": false, "1": true} {
		t.Run(fmt.Sprintf("%q", value), func(t *testing.T) {
			st := NodeStateOf(node("node-1", func(n *corev1.Node) { n.Labels = map[string]string{LabelExcludeFromLB: value} }))
			if st.Excluded != excluded || st.LoadBalancerEligible() == excluded || st.NodePortEligible() == excluded {
				t.Errorf("value %q: %+v eligible lb=%v np=%v, want excluded=%v", value, st, st.LoadBalancerEligible(), st.NodePortEligible(), excluded)
			}
		})
	}
	if st := NodeStateOf(node("node-1")); st.Excluded || !st.LoadBalancerEligible() {
		t.Errorf("unlabelled node: %+v", st)
	}
}

func TestNodeEligibility(t *testing.T) {
	now := metav1.Now()
	cases := map[string]struct {
		st         NodeState
		lb, nodePT bool
	}{
		"healthy":  {NodeStateOf(node("n")), true, true},
		"deleting": {NodeStateOf(node("n", func(n *corev1.Node) { n.DeletionTimestamp = &now })), false, false},
		"autoscaler taint": {NodeStateOf(node("n", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeletedByCA, Effect: corev1.TaintEffectNoSchedule}}
		})), false, false},
		// No Node object: in no load balancer's target set; its addresses and kube-proxy's rules still take
		// NodePort traffic.
		"missing": {NodeState{Name: "n"}, false, true},
		// Virtual nodes run no kube-proxy: neither a NodePort nor a load balancer target.
		"virtual-kubelet label": {NodeStateOf(node("n", func(n *corev1.Node) {
			n.Labels = map[string]string{LabelVirtualKubeletType: VirtualKubeletType}
		})), false, false},
		"virtual-kubelet taint": {NodeStateOf(node("n", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: TaintVirtualKubelet, Value: "azure", Effect: corev1.TaintEffectNoSchedule}}
		})), false, false},
		"fargate": {NodeStateOf(node("n", func(n *corev1.Node) {
			n.Labels = map[string]string{LabelEKSComputeType: EKSComputeTypeFargate}
		})), false, false},
		"another type label": {NodeStateOf(node("n", func(n *corev1.Node) {
			n.Labels = map[string]string{LabelVirtualKubeletType: "worker", LabelEKSComputeType: "ec2"}
		})), true, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.st.LoadBalancerEligible() != c.lb || c.st.NodePortEligible() != c.nodePT {
				t.Errorf("%+v: lb=%v nodeport=%v, want %v %v", c.st, c.st.LoadBalancerEligible(), c.st.NodePortEligible(), c.lb, c.nodePT)
			}
		})
	}
}

func TestInternalIPPerFamily(t *testing.T) {
	st := NodeStateOf(node("node-1", func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses,
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00:250:0::0011"})
	}))
	if got := st.InternalIP(corev1.IPv4Protocol); got != "10.250.0.11" {
		t.Errorf("IPv4 InternalIP = %q", got)
	}
	if got := st.InternalIP(corev1.IPv6Protocol); got != "fd00:250::11" {
		t.Errorf("IPv6 InternalIP = %q (canonical form expected)", got)
	}
	if len(st.InternalIPs) != 2 {
		t.Errorf("InternalIPs = %v (ExternalIP must not count)", st.InternalIPs)
	}
	// kube-proxy's order: every InternalIP, then every ExternalIP.
	if got := st.KubeProxyNodeIPs(); !slices.Equal(got, []string{"10.250.0.11", "fd00:250::11", "203.0.113.5"}) {
		t.Errorf("KubeProxyNodeIPs = %v", got)
	}
}

// kube-proxy programs an ingress IP only when its ipMode is VIP or unset, and each family's proxier only its
// own family's addresses.
func TestLoadBalancerIPModes(t *testing.T) {
	svc := dualStack(localService("shop", "web", corev1.ServiceTypeLoadBalancer))
	svc.Spec.ExternalIPs = []string{"192.0.2.50", "2001:db8::50"}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "192.0.2.10"},
		{IP: "192.0.2.11", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
		{IP: "192.0.2.12", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
		{IP: "2001:db8::0010"},
		{Hostname: "lb.example.com"},
	}
	st := ServiceStateOf(svc, nil)
	lb4, ext4 := st.AddressesOf(corev1.IPv4Protocol)
	lb6, ext6 := st.AddressesOf(corev1.IPv6Protocol)
	if !reflect.DeepEqual(lb4, []string{"192.0.2.10", "192.0.2.11"}) || !reflect.DeepEqual(ext4, []string{"192.0.2.50"}) {
		t.Errorf("IPv4: lb %v ext %v", lb4, ext4)
	}
	if !reflect.DeepEqual(lb6, []string{"2001:db8::10"}) || !reflect.DeepEqual(ext6, []string{"2001:db8::50"}) {
		t.Errorf("IPv6: lb %v ext %v", lb6, ext6)
	}

	// allocateLoadBalancerNodePorts false and a Proxy-mode address only: nothing external on the node.
	proxyOnly := localService("shop", "proxied", corev1.ServiceTypeLoadBalancer,
		corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	proxyOnly.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	proxyOnly.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.20", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
	ps := ServiceStateOf(proxyOnly, nil)
	if f4 := ipv4(ps); ps.ExternallyReachable(corev1.IPv4Protocol, f4.Ports[0]) {
		t.Errorf("a Proxy-mode address without a NodePort gives kube-proxy nothing to program: %+v", ps)
	}
	if f4 := ipv4(st); !st.ExternallyReachable(corev1.IPv4Protocol, f4.Ports[0]) {
		t.Error("a NodePort is reachable")
	}
}

// The local endpoints' addresses and target ports, after the informer's transform: what kube-proxy's rules
// must DNAT to (the ready ones, else the serving-terminating ones), and the other local endpoints the API
// still lists; remote endpoints are in neither.
func TestLocalAddrs(t *testing.T) {
	svc := dualStack(localService("shop", "web", corev1.ServiceTypeNodePort))
	v4 := slice("shop", "web", "web-v4", nil,
		readyOn("10.244.1.11", "node-1"), readyOn("10.244.1.10", "node-1"), notReadyOn("10.244.1.12", "node-1"),
		terminatingOn("10.244.1.13", "node-1"), readyOn("10.244.2.10", "node-2"))
	v6 := ipv6Slice(slice("shop", "web", "web-v6", nil, terminatingOn("fd00:244:1:0::10", "node-1"), readyOn("fd00:244:2::10", "node-2")))
	st := ServiceStateOf(svc, transformed(t, "node-1", v4, v6))
	f4, _ := st.Family(corev1.IPv4Protocol)
	f6, _ := st.Family(corev1.IPv6Protocol)
	aps := func(s ...string) []netip.AddrPort {
		var out []netip.AddrPort
		for _, a := range s {
			out = append(out, netip.MustParseAddrPort(a))
		}
		return out
	}
	if p := f4.Ports[0]; !reflect.DeepEqual(p.LocalAddrs, aps("10.244.1.10:8080", "10.244.1.11:8080")) ||
		!reflect.DeepEqual(p.LocalUnused, aps("10.244.1.12:8080", "10.244.1.13:8080")) {
		t.Errorf("IPv4: used %v, unused %v", p.LocalAddrs, p.LocalUnused)
	}
	// No ready IPv6 endpoint: the serving-terminating one is used (canonical spelling), nothing unused.
	if p := f6.Ports[0]; !reflect.DeepEqual(p.LocalAddrs, aps("[fd00:244:1::10]:8080")) || p.LocalUnused != nil || !p.LocalTerminating {
		t.Errorf("IPv6: used %v, unused %v, terminating %v", p.LocalAddrs, p.LocalUnused, p.LocalTerminating)
	}
	node3 := ServiceStateOf(svc, transformed(t, "node-3", v4, v6))
	for _, f := range node3.Families {
		if p := f.Ports[0]; p.LocalAddrs != nil || p.LocalUnused != nil {
			t.Errorf("node-3 %s: %v %v, want none", f.Family, p.LocalAddrs, p.LocalUnused)
		}
	}
}
