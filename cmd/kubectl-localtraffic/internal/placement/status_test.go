package placement

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// live builds the cluster as the apiserver would show it with the Deployment's replicas running on nodes.
func live(nodes []*corev1.Node, svc *corev1.Service, d *appsv1.Deployment, on ...string) *Cluster {
	c := manifests(nodes, svc, d)
	pods, rss, slice := readyPods(d, svc, on...)
	c.Pods, c.ReplicaSets, c.EndpointSlices, c.Live = pods, rss, []*discoveryv1.EndpointSlice{slice}, true
	return c
}

// The drill: 3 replicas pinned to node-1 of 3 workers; the status names node-2 and node-3 and the NodePort.
func TestStatusDrill(t *testing.T) {
	c := live(workers(3), nodePortService("checkout"), deployment("checkout", 3, pinnedTo("node-1")), "node-1", "node-1", "node-1")
	st := Status(c)
	if len(st) != 1 {
		t.Fatalf("%d services, want 1", len(st))
	}
	s := st[0]
	if got := s.Blackholes(); !slices.Equal(got, []string{"node-2", "node-3"}) {
		t.Errorf("blackholes %v", got)
	}
	if want := "1 of 3 nodes serve; node-2, node-3 drop NodePort 30090/TCP"; s.Summary != want {
		t.Errorf("summary %q, want %q", s.Summary, want)
	}
	if s.Nodes[0].LocalEndpoints != 3 || !s.Nodes[0].Serves {
		t.Errorf("node-1: %+v", s.Nodes[0])
	}
	// The live audit flags the blackhole now and the pin that causes it.
	r := Audit(c)
	wantIDs(t, r, "LT100:critical", "LT101:critical", info)
	if f := find(t, r, BlackholeNow); !slices.Equal(f.Nodes, []string{"node-2", "node-3"}) {
		t.Errorf("LT100 nodes %v", f.Nodes)
	}
	// After the fix: one replica per node, everything serves.
	c = live(workers(3), nodePortService("checkout"), deployment("checkout", 3, drillFix), "node-1", "node-2", "node-3")
	if s := Status(c)[0]; len(s.Blackholes()) != 0 || s.Summary != "3 of 3 nodes serve" {
		t.Errorf("after the fix: %q %v", s.Summary, s.Blackholes())
	}
	wantIDs(t, Audit(c), info)
}

// A health-checked LoadBalancer: nodes without a ready endpoint answer 503 and are drained, not blackholes; a
// draining or excluded node receives nothing.
func TestStatusLoadBalancer(t *testing.T) {
	nodes := workers(4)
	nodes[3].Labels[corev1.LabelNodeExcludeBalancers] = "true"
	c := live(nodes, nodePortService("checkout", loadBalancer), deployment("checkout", 2), "node-1", "node-1")
	s := Status(c)[0]
	if len(s.Blackholes()) != 0 || s.Serving != 1 || s.Receiving != 3 {
		t.Errorf("status %+v", s)
	}
	if !strings.Contains(s.Summary, "2 drained by the health check") {
		t.Errorf("summary %q", s.Summary)
	}
	if s.Nodes[3].Receives {
		t.Error("excluded node receives")
	}
}

// A multi-port Service whose second port has no local endpoint on a node: the health check answers 200 (a
// ready IP) but the second port drops there — a blackhole the API shows.
func TestStatusPortWithoutLocalEndpoint(t *testing.T) {
	svc := nodePortService("checkout", loadBalancer, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 9000, NodePort: 30091})
	})
	d := deployment("checkout", 2)
	c := live(workers(2), svc, d, "node-1", "node-2")
	// A second slice carries the admin port, only on node-1.
	c.EndpointSlices = append(c.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "checkout-admin", Labels: map[string]string{discoveryv1.LabelServiceName: "checkout"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("admin"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](9000)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.10"}, NodeName: ptr.To("node-1")}},
	})
	s := Status(c)[0]
	if got := s.Blackholes(); !slices.Equal(got, []string{"node-2"}) || !slices.Equal(s.Nodes[1].Drops, []string{"NodePort 30091/TCP"}) {
		t.Errorf("blackholes %v drops %v", got, s.Nodes[1].Drops)
	}
}

// No endpoint anywhere is an outage (kube-proxy rejects everywhere), not a per-node blackhole.
func TestStatusOutage(t *testing.T) {
	c := live(workers(2), nodePortService("checkout"), deployment("checkout", 0))
	s := Status(c)[0]
	if !s.Outage || len(s.Blackholes()) != 0 {
		t.Errorf("status %+v", s)
	}
}

// Terminating-but-serving endpoints still carry traffic (kube-proxy's fallback): not a blackhole.
func TestStatusServingTerminating(t *testing.T) {
	c := live(workers(2), nodePortService("checkout"), deployment("checkout", 2), "node-1", "node-2")
	c.EndpointSlices[0].Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if s := Status(c)[0]; len(s.Blackholes()) != 0 {
		t.Errorf("serving-terminating counted as a blackhole: %q", s.Summary)
	}
	c.EndpointSlices[0].Endpoints[1].Conditions.Serving = ptr.To(false)
	if s := Status(c)[0]; !slices.Equal(s.Blackholes(), []string{"node-2"}) {
		t.Errorf("not-serving endpoint: %q", s.Summary)
	}
}

// Dual-stack: each family's proxier counts its own slices; IPv6 endpoints only on node-1 make node-2 drop the
// IPv6 NodePort while it serves IPv4.
func TestStatusDualStack(t *testing.T) {
	svc := nodePortService("checkout", func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	c := live(workers(2), svc, deployment("checkout", 2), "node-1", "node-2")
	c.EndpointSlices = append(c.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "checkout-v6", Labels: map[string]string{discoveryv1.LabelServiceName: "checkout"}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"fd00:10:244::10"}, NodeName: ptr.To("node-1")}},
	})
	s := Status(c)[0]
	if got := s.Blackholes(); !slices.Equal(got, []string{"node-2"}) || !slices.Equal(s.Nodes[1].Drops, []string{"NodePort 30090/TCP (IPv6)"}) {
		t.Errorf("blackholes %v, drops %v; %s", got, s.Nodes[1].Drops, s.Summary)
	}
}

// A Local ClusterIP Service with an externalIP: kube-proxy drops the address on every node without a local
// endpoint, but only the nodes the network routes it to receive it. From the API that is "cannot tell", not
// a blackhole on every node (the exporter, on the node, decides it from the address or the drop counter).
func TestStatusExternalIPCannotTell(t *testing.T) {
	svc := nodePortService("checkout", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.Ports[0].NodePort = corev1.ServiceTypeClusterIP, 0
		s.Spec.ExternalIPs = []string{"192.0.2.70"}
	})
	c := live(workers(3), svc, deployment("checkout", 1), "node-1")
	s := Status(c)[0]
	if len(s.Blackholes()) != 0 {
		t.Errorf("blackholes %v: an externalIP is not routed to every node", s.Blackholes())
	}
	for _, n := range s.Nodes[1:] {
		if !slices.Equal(n.CannotTell, []string{"externalIP 192.0.2.70:80/TCP"}) || n.Serves || n.Blackhole {
			t.Errorf("%s: %+v", n.Node, n)
		}
	}
	if n := s.Nodes[0]; len(n.CannotTell) != 0 || !n.Serves || !n.RotationUnknown {
		t.Errorf("node-1 holds the endpoint and serves the address wherever it is routed: %+v", n)
	}
	if want := "node-2, node-3 would drop externalIP 192.0.2.70:80/TCP"; !strings.Contains(s.Summary, want) {
		t.Errorf("summary %q lacks %q", s.Summary, want)
	}
	// A NodePort beside the externalIP needs no node evidence: the NodePort drop is a blackhole.
	svc.Spec.Type, svc.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30090
	if s := Status(live(workers(3), svc, deployment("checkout", 1), "node-1"))[0]; !slices.Equal(s.Blackholes(), []string{"node-2", "node-3"}) {
		t.Errorf("NodePort and externalIP: blackholes %v", s.Blackholes())
	}
}

// Virtual nodes (virtual-kubelet, Fargate) run no kube-proxy and serve no node port: never receivers, so
// never blackholes, and not counted among the receiving nodes.
func TestStatusVirtualNodesReceiveNothing(t *testing.T) {
	nodes := workers(3)
	nodes[1].Labels["type"] = "virtual-kubelet"
	nodes[2].Labels["eks.amazonaws.com/compute-type"] = "fargate"
	c := live(nodes, nodePortService("checkout"), deployment("checkout", 1), "node-1")
	s := Status(c)[0]
	if len(s.Blackholes()) != 0 || s.Receiving != 1 || s.Nodes[1].Receives || !s.Nodes[1].Virtual || !s.Nodes[2].Virtual {
		t.Errorf("status %+v", s)
	}
	// The audit's receiving nodes are the same.
	for _, rep := range Audit(c).Services {
		if !slices.Equal(rep.Receiving, []string{"node-1"}) {
			t.Errorf("audit receiving %v", rep.Receiving)
		}
	}
}

// A Service annotated localtraffic.io/intentional-placement is judged as any other (its blackholes are still
// listed) but is shown as ignored with the annotation's reason, and fails nothing: status does not count it,
// its audit findings keep their severity but are ignored, and Worst leaves them out.
func TestIgnoredService(t *testing.T) {
	svc := nodePortService("checkout", annotated(kubeview.AnnotationIntentionalPlacement, "licensed on node-1 only"))
	c := live(workers(3), svc, deployment("checkout", 3, pinnedTo("node-1")), "node-1", "node-1", "node-1")
	s := Status(c)[0]
	if !s.Ignored || s.IgnoredReason != "licensed on node-1 only" {
		t.Errorf("status ignored %v %q", s.Ignored, s.IgnoredReason)
	}
	if got := s.Blackholes(); !slices.Equal(got, []string{"node-2", "node-3"}) || s.Failing() {
		t.Errorf("blackholes %v (still measured), failing %v (want false)", got, s.Failing())
	}
	r := Audit(c)
	wantIDs(t, r, "LT100:critical", "LT101:critical", info)
	if !r.Services[0].Ignored || r.Services[0].IgnoredReason != "licensed on node-1 only" {
		t.Errorf("report ignored %v %q", r.Services[0].Ignored, r.Services[0].IgnoredReason)
	}
	for _, f := range r.Findings() {
		if !f.Ignored || f.IgnoredReason != "licensed on node-1 only" {
			t.Errorf("%s not ignored: %+v", f.ID, f)
		}
	}
	if r.Worst() != 0 {
		t.Errorf("worst %v, want nothing that fails", r.Worst())
	}
	// Beside a Service that is not ignored, its findings come after those that count, and Worst is the other's.
	other := nodePortService("web", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30091 })
	c.Services = append(c.Services, other)
	c.Deployments = append(c.Deployments, deployment("web", 1))
	r = Audit(c)
	fs := r.Findings()
	if fs[0].Service.Name != "web" || fs[len(fs)-1].Service.Name != "checkout" || r.Worst() != Critical {
		t.Errorf("worst %v, findings %+v", r.Worst(), fs)
	}
	// Without the annotation it fails as before.
	c = live(workers(3), nodePortService("checkout"), deployment("checkout", 3, pinnedTo("node-1")), "node-1", "node-1", "node-1")
	if s := Status(c)[0]; s.Ignored || !s.Failing() || Audit(c).Worst() != Critical {
		t.Errorf("unannotated: ignored %v failing %v", s.Ignored, s.Failing())
	}
}
