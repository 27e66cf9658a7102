package kubeview

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
)

// Builders for the objects the tests need, in the shapes the API server and the endpointslice controller write.

func localService(ns, name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: typ, ClusterIP: "10.96.0.10", Ports: ports,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		},
	}
	if typ == corev1.ServiceTypeLoadBalancer {
		svc.Spec.HealthCheckNodePort = 32000
	}
	return svc
}

type ep struct {
	ip, node                    string
	ready, serving, terminating *bool
}

func readyOn(ip, node string) ep { return ep{ip: ip, node: node, ready: ptr.To(true)} }
func notReadyOn(ip, node string) ep {
	return ep{ip: ip, node: node, ready: ptr.To(false), serving: ptr.To(false)}
}
func terminatingOn(ip, node string) ep {
	return ep{ip: ip, node: node, ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)}
}

func slice(ns, svc, name string, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	if ports == nil {
		ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			NodeName:   ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating},
		})
	}
	return s
}

func node(name string, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalIP, Address: "10.250.0.11"},
		}},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

// startView runs a View for node over a fake clientset holding objs.
func startView(t *testing.T, nodeName string, objs ...runtime.Object) (*View, kubernetes.Interface) {
	t.Helper()
	return startViewWith(t, nodeName, nil, objs...)
}

func startViewWith(t *testing.T, nodeName string, opts []Option, objs ...runtime.Object) (*View, kubernetes.Interface) {
	t.Helper()
	client := fake.NewClientset(objs...)
	v := New(kubeviewtest.NewAPI(client), nodeName, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := v.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	return v, client
}

// eventually polls the view until check passes; informers deliver changes asynchronously.
func eventually(t *testing.T, v *View, check func(Snapshot) error) Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, err := v.Snapshot()
		if err == nil {
			if err = check(snap); err == nil {
				return snap
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("view never reached the expected state: %v\nlast snapshot: %+v", err, snap)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ipv4 is the Service's IPv4 counts; the test fails the lookup loudly through a zero value.
func ipv4(s ServiceState) FamilyEndpoints {
	fe, _ := s.Family(corev1.IPv4Protocol)
	return fe
}

func findService(snap Snapshot, ns, name string) (ServiceState, bool) {
	for _, s := range snap.Services {
		if s.Namespace == ns && s.Name == name {
			return s, true
		}
	}
	return ServiceState{}, false
}

// want checks a Service's local endpoint count and presence.
func want(ns, name string, local int, has bool) func(Snapshot) error {
	return func(snap Snapshot) error {
		s, ok := findService(snap, ns, name)
		if !ok {
			return fmt.Errorf("%s/%s not in the view", ns, name)
		}
		if s.LocalEndpoints() != local || s.HasLocalEndpoint() != has {
			return fmt.Errorf("%s/%s: local=%d has=%v, want local=%d has=%v", ns, name, s.LocalEndpoints(), s.HasLocalEndpoint(), local, has)
		}
		return nil
	}
}

func absent(ns, name string) func(Snapshot) error {
	return func(snap Snapshot) error {
		if _, ok := findService(snap, ns, name); ok {
			return fmt.Errorf("%s/%s still in the view", ns, name)
		}
		return nil
	}
}

// The drill: three replicas pinned to node-1. Only node-1 has local endpoints.
func TestDrillReplicasPinnedToOneNode(t *testing.T) {
	objs := func() []runtime.Object {
		return []runtime.Object{
			localService("kubelings", "checkout", corev1.ServiceTypeNodePort),
			slice("kubelings", "checkout", "checkout-abc", nil,
				readyOn("10.244.1.10", "node-1"), readyOn("10.244.1.11", "node-1"), readyOn("10.244.1.12", "node-1")),
		}
	}
	for node, local := range map[string]int{"node-1": 3, "node-2": 0, "node-3": 0} {
		t.Run(node, func(t *testing.T) {
			v, _ := startView(t, node, append(objs(), nodeObj(node))...)
			snap := eventually(t, v, want("kubelings", "checkout", local, local > 0))
			s, _ := findService(snap, "kubelings", "checkout")
			if !ipv4(s).Ports[0].ClusterWide {
				t.Errorf("the Service has endpoints somewhere; ClusterWide should be true")
			}
		})
	}
}

func nodeObj(name string) *corev1.Node { return node(name) }

func TestSpreadReplicas(t *testing.T) {
	v, _ := startView(t, "node-2", nodeObj("node-2"),
		localService("kubelings", "checkout", corev1.ServiceTypeNodePort),
		slice("kubelings", "checkout", "checkout-abc", nil,
			readyOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2"), readyOn("10.244.3.10", "node-3")))
	eventually(t, v, want("kubelings", "checkout", 1, true))
}

// With no ready local endpoint, kube-proxy keeps forwarding to serving-terminating ones; the health check node
// port counts only ready ones.
func TestServingTerminatingFallback(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeLoadBalancer),
		slice("shop", "web", "web-1", nil, terminatingOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2")))
	snap := eventually(t, v, want("shop", "web", 1, true))
	s, _ := findService(snap, "shop", "web")
	if !ipv4(s).Ports[0].LocalTerminating {
		t.Error("the local endpoint is the serving-terminating fallback")
	}
	if ipv4(s).LocalReadyEndpoints != 0 {
		t.Errorf("ready local endpoints = %d, want 0 (the health check answers 503)", ipv4(s).LocalReadyEndpoints)
	}
}

// A ready endpoint wins over terminating ones: only ready ones count then.
func TestReadyPreferredOverTerminating(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, terminatingOn("10.244.1.10", "node-1"), readyOn("10.244.1.11", "node-1"),
			terminatingOn("10.244.1.12", "node-1")))
	snap := eventually(t, v, want("shop", "web", 1, true))
	if s, _ := findService(snap, "shop", "web"); ipv4(s).Ports[0].LocalTerminating || ipv4(s).LocalReadyEndpoints != 1 {
		t.Errorf("got %+v", s)
	}
}

func TestNotReadyEndpointsDoNotCount(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, notReadyOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2")))
	snap := eventually(t, v, want("shop", "web", 0, false))
	if s, _ := findService(snap, "shop", "web"); !ipv4(s).Ports[0].ClusterWide {
		t.Error("node-2's ready endpoint makes the port usable cluster-wide")
	}
}

// No endpoint anywhere: kube-proxy rejects on every node. ClusterWide false tells the verdict it is an outage.
func TestNoEndpointsAnywhere(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, notReadyOn("10.244.2.10", "node-2")))
	snap := eventually(t, v, want("shop", "web", 0, false))
	if s, _ := findService(snap, "shop", "web"); ipv4(s).Ports[0].ClusterWide {
		t.Error("no usable endpoint anywhere; ClusterWide should be false")
	}
}

func TestLocalToClusterAndBack(t *testing.T) {
	ctx := context.Background()
	svc := localService("shop", "web", corev1.ServiceTypeNodePort)
	v, client := startView(t, "node-1", nodeObj("node-1"), svc,
		slice("shop", "web", "web-1", nil, readyOn("10.244.1.10", "node-1")))
	eventually(t, v, want("shop", "web", 1, true))

	svc = svc.DeepCopy()
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	if _, err := client.CoreV1().Services("shop").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, v, absent("shop", "web"))

	svc = svc.DeepCopy()
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := client.CoreV1().Services("shop").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, v, want("shop", "web", 1, true))
}

func TestDeletion(t *testing.T) {
	ctx := context.Background()
	v, client := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, readyOn("10.244.1.10", "node-1")))
	eventually(t, v, want("shop", "web", 1, true))

	// The endpoints go first (scale to zero), then the Service.
	if err := client.DiscoveryV1().EndpointSlices("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, v, want("shop", "web", 0, false))
	if err := client.CoreV1().Services("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, v, absent("shop", "web"))
}

// One Service's endpoints split over several slices (the controller caps slices at 100 endpoints).
func TestEndpointsSplitAcrossSlices(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-a", nil, readyOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2")),
		slice("shop", "web", "web-b", nil, readyOn("10.244.1.11", "node-1"), readyOn("10.244.3.10", "node-3")),
		// The same endpoint in two slices (during a controller rebalance) counts once.
		slice("shop", "web", "web-c", nil, readyOn("10.244.1.11", "node-1")))
	eventually(t, v, want("shop", "web", 2, true))
}

// Ports are matched by name and protocol; an unnamed single port matches the slice port with no name.
func TestMultiPortAndUnnamedPorts(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	multi := localService("dns", "resolver", corev1.ServiceTypeNodePort,
		corev1.ServicePort{Name: "dns", Protocol: udp, Port: 53, NodePort: 30053},
		corev1.ServicePort{Name: "dns-tcp", Protocol: tcp, Port: 53, NodePort: 30054})
	unnamed := localService("default", "nginx", corev1.ServiceTypeNodePort,
		corev1.ServicePort{Protocol: tcp, Port: 80, NodePort: 30080})
	v, _ := startView(t, "node-1", nodeObj("node-1"), multi, unnamed,
		// Only the UDP port has a local endpoint: the TCP port is dropped here.
		slice("dns", "resolver", "resolver-udp",
			[]discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: &udp, Port: ptr.To[int32](5353)}},
			readyOn("10.244.1.53", "node-1")),
		slice("dns", "resolver", "resolver-tcp",
			[]discoveryv1.EndpointPort{{Name: ptr.To("dns-tcp"), Protocol: &tcp, Port: ptr.To[int32](5353)}},
			readyOn("10.244.2.53", "node-2")),
		slice("default", "nginx", "nginx-1",
			[]discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: &tcp, Port: ptr.To[int32](80)}},
			readyOn("10.244.1.80", "node-1")))
	snap := eventually(t, v, want("dns", "resolver", 1, false))
	s, _ := findService(snap, "dns", "resolver")
	if p := ipv4(s).Ports; p[0].Local != 1 || p[1].Local != 0 || !p[1].ClusterWide {
		t.Errorf("per-port view wrong: %+v", p)
	}
	eventually(t, v, want("default", "nginx", 1, true))
}

func TestExcludedAndDrainingNode(t *testing.T) {
	excluded := node("node-1", func(n *corev1.Node) {
		n.Labels = map[string]string{LabelExcludeFromLB: ""}
		n.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeletedByCA, Effect: corev1.TaintEffectNoSchedule}}
	})
	v, _ := startView(t, "node-1", excluded)
	snap := eventually(t, v, func(s Snapshot) error {
		if !s.Node.Found {
			return fmt.Errorf("node not seen yet")
		}
		return nil
	})
	if !snap.Node.Excluded || !snap.Node.Draining() || snap.Node.Deleting {
		t.Errorf("node state = %+v", snap.Node)
	}
	if len(snap.Node.InternalIPs) != 1 || snap.Node.InternalIPs[0] != "10.250.0.11" {
		t.Errorf("InternalIPs = %v", snap.Node.InternalIPs)
	}
}

// Which Services are in scope: kube-proxy's own filters.
func TestIsExternalLocal(t *testing.T) {
	base := localService("ns", "s", corev1.ServiceTypeNodePort)
	cases := map[string]struct {
		mod  func(*corev1.Service)
		want bool
	}{
		"nodeport local":     {func(*corev1.Service) {}, true},
		"loadbalancer local": {func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }, true},
		"cluster policy": {func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}, false},
		"clusterip with externalIPs": {func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalIPs = corev1.ServiceTypeClusterIP, []string{"192.0.2.10"}
		}, true},
		"clusterip only": {func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }, false},
		"headless":       {func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, false},
		"other proxy": {func(s *corev1.Service) {
			s.Labels = map[string]string{labelServiceProxyName: "cilium"}
		}, false},
		"externalname": {func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := base.DeepCopy()
			c.mod(s)
			if got := IsExternalLocal(s); got != c.want {
				t.Errorf("IsExternalLocal = %v, want %v", got, c.want)
			}
		})
	}
}

// kube-proxy v1.37 filters slices only by the headless label: a slice labelled for another proxy still counts
// (only Services with that label are dropped, by IsExternalLocal).
func TestServiceProxyNameOnSliceStillCounts(t *testing.T) {
	other := slice("shop", "web", "web-other", nil, readyOn("10.244.1.10", "node-1"))
	other.Labels[labelServiceProxyName] = "other"
	v, _ := startView(t, "node-1", nodeObj("node-1"), localService("shop", "web", corev1.ServiceTypeNodePort), other)
	eventually(t, v, want("shop", "web", 1, true))
}

// A Service labelled service.kubernetes.io/headless keeps its rules, but the endpointslice controller copies the
// label onto its slices, which kube-proxy drops: no endpoints anywhere, every node rejects (an outage).
func TestHeadlessLabelledSlicesIgnored(t *testing.T) {
	svc := localService("shop", "web", corev1.ServiceTypeNodePort)
	svc.Labels = map[string]string{labelHeadless: ""}
	sl := slice("shop", "web", "web-1", nil, readyOn("10.244.1.10", "node-1"), readyOn("10.244.2.10", "node-2"))
	sl.Labels[labelHeadless] = ""
	v, _ := startView(t, "node-1", nodeObj("node-1"), svc, sl)
	snap := eventually(t, v, want("shop", "web", 0, false))
	if s, _ := findService(snap, "shop", "web"); ipv4(s).Ports[0].ClusterWide {
		t.Error("kube-proxy sees no endpoint anywhere; ClusterWide should be false")
	}
}

// The node-name mismatch of kubernetes#71851: an exporter told a name no endpoint carries sees none local.
func TestNodeNameMismatchMakesEverythingRemote(t *testing.T) {
	v, _ := startView(t, "Node-1", nodeObj("Node-1"),
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, readyOn("10.244.1.10", "node-1")))
	eventually(t, v, want("shop", "web", 0, false))
}

// The transform keeps local endpoints and only counts remote ones: memory does not grow with other nodes.
func TestTransformDropsRemoteEndpoints(t *testing.T) {
	s := slice("shop", "web", "web-1", nil, readyOn("10.244.1.10", "node-1"))
	for i := 0; i < 500; i++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.9.%d", i%250)}, NodeName: ptr.To(fmt.Sprintf("node-%d", 10+i)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i%2 == 0), Serving: ptr.To(true), Terminating: ptr.To(i%2 == 1)},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}},
		})
	}
	// Three pods elsewhere that stopped serving while they terminate: neither ready nor usable, but terminating.
	for i := 0; i < 3; i++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.8.%d", i)}, NodeName: ptr.To("node-9"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)},
		})
	}
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
	transform := TransformEndpointSlice("node-1")
	out, err := transform(s)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	if len(got.Endpoints) != 1 || got.ManagedFields != nil {
		t.Fatalf("transformed slice keeps %d endpoints and managed fields %v", len(got.Endpoints), got.ManagedFields)
	}
	if got.Annotations[annotationRemoteReady] != "250" || got.Annotations[annotationRemoteServingTerminating] != "250" ||
		got.Annotations[annotationRemoteTerminating] != "253" {
		t.Errorf("remote counts = %v", got.Annotations)
	}
	// Idempotent: transforming again changes nothing.
	again, _ := transform(got)
	if a := again.(*discoveryv1.EndpointSlice).Annotations; a[annotationRemoteReady] != "250" || a[annotationRemoteServingTerminating] != "250" ||
		a[annotationRemoteTerminating] != "253" {
		t.Errorf("second transform changed the counts: %v", a)
	}
}

func TestInformerStatus(t *testing.T) {
	v, _ := startView(t, "node-1", nodeObj("node-1"), localService("shop", "web", corev1.ServiceTypeNodePort))
	sts := v.Informers()
	if len(sts) != 3 {
		t.Fatalf("got %d informers", len(sts))
	}
	for _, st := range sts {
		if !st.Synced {
			t.Errorf("%s not synced", st.Resource)
		}
	}
	// The node and the Service arrive as add events; no slice exists, so no slice event. Synced is the
	// store's: the handlers that stamp LastEvent run a moment after it, so wait for them (a hang guard).
	seen := map[string]bool{}
	waitFor(t, "the add events of the node and the Service", func() bool {
		for _, st := range v.Informers() {
			seen[st.Resource] = !st.LastEvent.IsZero()
		}
		return seen[ResourceNodes] && seen[ResourceServices]
	})
	if seen[ResourceEndpointSlices] {
		t.Errorf("last events seen: %v: a slice event without a slice", seen)
	}
}

// A pod that stopped serving while it terminates (it fails readiness on SIGTERM) is still listed, and a cordon
// is still on the Node: the two facts an exposure episode's cause is told by, kept through the slim
// transforms.
func TestStoppedEndpointAndCordonSurviveTheTransforms(t *testing.T) {
	cordoned := node("node-1", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	stopped := ep{ip: "10.244.1.10", node: "node-1", ready: ptr.To(false), serving: ptr.To(false), terminating: ptr.To(true)}
	v, _ := startView(t, "node-1", cordoned,
		localService("shop", "web", corev1.ServiceTypeNodePort),
		slice("shop", "web", "web-1", nil, stopped, terminatingOn("10.244.1.11", "node-1"), readyOn("10.244.2.10", "node-2"),
			readyOn("10.244.3.10", "node-3"), notReadyOn("10.244.4.10", "node-4"),
			ep{ip: "10.244.5.10", node: "node-5", ready: ptr.To(false), serving: ptr.To(false), terminating: ptr.To(true)}))
	snap := eventually(t, v, want("shop", "web", 1, true))
	if !snap.Node.Unschedulable {
		t.Error("the cordon (spec.unschedulable) was lost")
	}
	s, _ := findService(snap, "shop", "web")
	if got := ipv4(s); got.LocalStopped != 1 || got.RemoteReady != 2 {
		t.Errorf("LocalStopped, RemoteReady = %d, %d; want 1 (the serving fallback is in use, not stopped), 2", got.LocalStopped, got.RemoteReady)
	}
	// The rollout window's fact: both local pods being deleted and the one elsewhere that stopped serving.
	if got := ipv4(s); got.Terminating != 3 {
		t.Errorf("Terminating = %d, want 3 (two local, one remote, serving or not)", got.Terminating)
	}
	if n, _ := transformNode(cordoned); !n.(*corev1.Node).Spec.Unschedulable {
		t.Error("transformNode dropped spec.unschedulable")
	}
}
