package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestRotationHealthCheckPassingNeedsAContract: a two-port LoadBalancer Service whose pod on node-2 (iptables)
// and node-4 (nftables) serves only the first port; the second port's one endpoint is on node-1. kube-proxy's
// health check counts a node's ready local endpoint addresses over all ports, so both nodes answer 200 and a
// load balancer that honours that check keeps them for both ports, while the second port's NodePort has no
// local endpoint there and is dropped. Whether that is a page depends on who sends:
//   - nothing known to keep nodes by that check (no cloud, no annotation: an announcer, an unknown
//     controller) and nothing arrives: a warning (no_traffic_seen), not a critical page;
//   - the Service declares that its load balancer checks the health check node port: critical
//     (health_check_passing), the load balancer keeps the node for its 200;
//   - the declaration removed, a checker of no known kind probing the dropped port (the traffic port) from
//     one address: its probes are no client's, still a warning;
//   - the declaration removed and clients arriving at the dropped port: critical (traffic_lost).
func TestRotationHealthCheckPassingNeedsAContract(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	svc := serviceSpec(t, c, "e2e-rotation-passing", "shop", corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 81,
			TargetPort: intstr.FromInt32(cluster.BackendPort)})
	})
	pods := startPods(t, c, svc, "node-1", "node-2", "node-4")
	// One slice per port, as the EndpointSlice controller writes for pods that expose different ports.
	slice := func(name string, port corev1.ServicePort, pods ...*cluster.Pod) *discoveryv1.EndpointSlice {
		ready := true
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svc.Namespace, Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: cluster.ManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &port.Name, Protocol: &port.Protocol, Port: &port.TargetPort.IntVal}},
		}
		for _, p := range pods {
			node := p.Node
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		return s
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		slice(svc.Name+"-http", svc.Spec.Ports[0], pods...),
		slice(svc.Name+"-admin", svc.Spec.Ports[1], pods[0]),
	} {
		if _, err := c.Admin().DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			fatalln(t, err)
		}
	}
	nodes := []string{"node-2", "node-4"}
	for _, node := range nodes {
		// A quiet period shorter than the default: "nothing arrived" needs the meter to have watched that long.
		restartExporter(t, c, c.Node(node), testGrace, "--arrivals.quiet-period=20s")
	}
	reasonIs := func(what, reason string) {
		t.Helper()
		for _, node := range nodes {
			n := c.Node(node)
			eventually(t, converge, node+": "+what, func() error {
				code, _, err := healthCheck(ctx, c, n, svc)
				if err != nil {
					return err
				}
				if code != http.StatusOK {
					return fmt.Errorf("health check on %s: %d, want 200 (a local endpoint of the first port)", node, code)
				}
				return expectMetrics(ctx, c, node, metricIs("localtraffic_blackhole", svcLabels(svc, node), 1),
					metricIs("localtraffic_blackhole_reason", reasonLabels(svc, node, reason), 1))
			})
		}
	}
	reasonIs("no load balancer known to keep the node by its 200, nothing arrives: a warning", "no_traffic_seen")

	annotate := func(value *string) {
		t.Helper()
		v := "null"
		if value != nil {
			v = fmt.Sprintf("%q", *value)
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, "localtraffic.io/health-check", v))
		if _, err := c.Admin().CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			fatalln(t, err)
		}
	}
	hcnp := "health-check-node-port"
	annotate(&hcnp)
	reasonIs("the load balancer declared to keep the node by its 200: critical", "health_check_passing")

	annotate(nil)
	reasonIs("the declaration removed, nothing arrives: a warning again", "no_traffic_seen")

	// A load balancer of no known kind that checks the traffic port: its checker (one address, every 2 s)
	// probes the dropped port, and its probes arrive there, dropped and retransmitted like any SYN. They are
	// no client's: the 200 says no more about clients than before, and the node stays a warning for three
	// grace windows, never critical.
	if err := c.AddClientSource(ctx, cluster.CheckerIP); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveClientSource(context.Background(), cluster.CheckerIP); err != nil {
			errorln(t, err)
		}
	})
	var dropped []string
	for _, node := range nodes {
		dropped = append(dropped, fmt.Sprintf("%s:%d", c.Node(node).IP, svc.Spec.Ports[1].NodePort))
	}
	stopChecking := checkEvery(t, c, cluster.CheckerIP, 2*time.Second, dropped...)
	warnedThroughout(ctx, t, c, svc, nodes, 45*time.Second, "the traffic-port checker started", 10) // three grace windows (testGrace)
	// The clients below are to be the only ones arriving.
	stopChecking()

	keepSending(t, c, dropped...)
	for _, a := range dropped {
		if err := wantVerdict(c.Request(ctx, a), cluster.Blackhole, "the second port at "+a); err != nil {
			fatalln(t, err)
		}
	}
	reasonIs("clients arrive at the dropped port: critical", "traffic_lost")
}
