package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// Announcers (docs/rotation.md, "Announcers"): MetalLB in layer 2 mode and Cilium's L2 announcements deliver a
// load balancer IP to one node without putting the address on its interface, and read no healthCheckNodePort.
// No announcer runs here: the tests write the announcers' records themselves, as they do (MetalLB's
// ServiceL2Status, from the CRDs of a pinned release the repository carries; Cilium's Lease), and route the
// address to the node the record names, as the announcer's ARP answers would make the network do.

var gvrServiceL2Status = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}

const (
	metallbNamespace = "metallb-system"
	ciliumNamespace  = "kube-system"
	// announcedWithin is how soon a node named by an announcer must page: a few of the test's own scrapes after
	// the record is written, far less than the default grace window (2m) the exporters run with, and less than
	// a Prometheus scrape interval.
	announcedWithin = 5 * time.Second
	// lastLease is the duration of a Cilium lease's last renewal before its holder stops: Cilium's
	// l2announcements.leaseDuration may be as short as 1 s; 3 s keeps the tests quick.
	lastLease = 3 * time.Second
)

// announcerRecord writes one announcer's record of who announces a Service, as the announcer writes it.
type announcerRecord struct {
	source string // as in localtraffic_announcer_source_state
	// hold names node as the holder.
	hold func(ctx context.Context, svc *corev1.Service, node string) error
	// expire makes the record name no live holder.
	expire func(ctx context.Context, svc *corev1.Service) error
}

func dynamicClient(t testing.TB, c *cluster.Cluster) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.AdminRESTConfig())
	if err != nil {
		fatalln(t, err)
	}
	return dyn
}

// metallbL2 writes a ServiceL2Status as MetalLB's speaker does: the object with its labels, then its status
// subresource. status.node is immutable (a CEL rule of the CRD), so a new holder is a new object.
func metallbL2(t testing.TB, c *cluster.Cluster) announcerRecord {
	dyn := dynamicClient(t, c).Resource(gvrServiceL2Status).Namespace(metallbNamespace)
	name := func(svc *corev1.Service) string { return "l2-" + svc.Namespace + "-" + svc.Name }
	del := func(ctx context.Context, svc *corev1.Service) error {
		if err := dyn.Delete(ctx, name(svc), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ServiceL2Status: %w", err)
		}
		return nil
	}
	return announcerRecord{source: "metallb_l2",
		hold: func(ctx context.Context, svc *corev1.Service, node string) error {
			if err := del(ctx, svc); err != nil {
				return err
			}
			t.Cleanup(func() { _ = del(context.Background(), svc) })
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetAPIVersion("metallb.io/v1beta1")
			u.SetKind("ServiceL2Status")
			u.SetName(name(svc))
			u.SetNamespace(metallbNamespace)
			u.SetLabels(map[string]string{"metallb.io/node": node, "metallb.io/service-name": svc.Name,
				"metallb.io/service-namespace": svc.Namespace})
			// Deletion is not instant when the object had finalizers; none here, but a create racing the
			// delete's propagation is retried.
			var created *unstructured.Unstructured
			err := cluster.Eventually(ctx, 10*time.Second, 100*time.Millisecond, func() error {
				var err error
				created, err = dyn.Create(ctx, u, metav1.CreateOptions{})
				return err
			})
			if err != nil {
				return fmt.Errorf("create ServiceL2Status: %w", err)
			}
			_ = unstructured.SetNestedMap(created.Object, map[string]any{"node": node, "serviceName": svc.Name,
				"serviceNamespace": svc.Namespace, "interfaces": []any{map[string]any{"name": "eth0"}}}, "status")
			if _, err := dyn.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("ServiceL2Status status: %w", err)
			}
			return nil
		},
		expire: del,
	}
}

// ciliumL2 writes Cilium's L2 announcement Lease as its agents' leader election does.
func ciliumL2(t testing.TB, c *cluster.Cluster) announcerRecord {
	leases := c.Admin().CoordinationV1().Leases(ciliumNamespace)
	name := func(svc *corev1.Service) string { return "cilium-l2announce-" + svc.Namespace + "-" + svc.Name }
	write := func(ctx context.Context, svc *corev1.Service, node string, renew time.Time, seconds int32) error {
		spec := coordinationv1.LeaseSpec{HolderIdentity: ptr(node), LeaseDurationSeconds: ptr(seconds),
			RenewTime: &metav1.MicroTime{Time: renew}, AcquireTime: &metav1.MicroTime{Time: renew}}
		cur, err := leases.Get(ctx, name(svc), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Cleanup(func() { _ = leases.Delete(context.Background(), name(svc), metav1.DeleteOptions{}) })
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name(svc)}, Spec: spec}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cur.Spec = spec
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	return announcerRecord{source: "cilium_l2",
		hold: func(ctx context.Context, svc *corev1.Service, node string) error {
			// Renewed for longer than the test: the agent's renewals are not what is tested here.
			return write(ctx, svc, node, time.Now(), 600)
		},
		expire: func(ctx context.Context, svc *corev1.Service) error {
			cur, err := leases.Get(ctx, name(svc), metav1.GetOptions{})
			if err != nil {
				return err
			}
			// The holder renews one last time, with the shortest lease Cilium is configured with here
			// (l2announcements.leaseDuration), and stops: a reader sees it expire that long after.
			return write(ctx, svc, *cur.Spec.HolderIdentity, time.Now(), int32(lastLease/time.Second))
		},
	}
}

var gvrServiceBGPStatus = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicebgpstatuses"}

// metallbBGP writes a ServiceBGPStatus per announcing node, as MetalLB's speakers do in BGP mode: the node and
// the peers it advertises the Service to. A new holder replaces every status of the Service.
func metallbBGP(t testing.TB, c *cluster.Cluster) announcerRecord {
	dyn := dynamicClient(t, c).Resource(gvrServiceBGPStatus).Namespace(metallbNamespace)
	selector := func(svc *corev1.Service) string {
		return "metallb.io/service-name=" + svc.Name + ",metallb.io/service-namespace=" + svc.Namespace
	}
	del := func(ctx context.Context, svc *corev1.Service) error {
		if err := dyn.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector(svc)}); err != nil {
			return fmt.Errorf("delete ServiceBGPStatus: %w", err)
		}
		return nil
	}
	return announcerRecord{source: "metallb_bgp",
		hold: func(ctx context.Context, svc *corev1.Service, node string) error {
			if err := del(ctx, svc); err != nil {
				return err
			}
			t.Cleanup(func() { _ = del(context.Background(), svc) })
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetAPIVersion("metallb.io/v1beta1")
			u.SetKind("ServiceBGPStatus")
			u.SetName("bgp-" + node + "-" + svc.Namespace + "-" + svc.Name)
			u.SetNamespace(metallbNamespace)
			u.SetLabels(map[string]string{"metallb.io/node": node, "metallb.io/service-name": svc.Name,
				"metallb.io/service-namespace": svc.Namespace})
			created, err := dyn.Create(ctx, u, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create ServiceBGPStatus: %w", err)
			}
			_ = unstructured.SetNestedMap(created.Object, map[string]any{"node": node, "serviceName": svc.Name,
				"serviceNamespace": svc.Namespace, "peers": []any{"router-a"}}, "status")
			if _, err := dyn.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("ServiceBGPStatus status: %w", err)
			}
			return nil
		},
		expire: del,
	}
}

// annotated writes an announcer's Service annotation, as kube-vip, OpenELB and PureLB do; value gives the
// annotation's value for a node and the Service's load balancer IP.
func annotated(c *cluster.Cluster, source, key string, value func(node, lbIP string) string) announcerRecord {
	set := func(ctx context.Context, svc *corev1.Service, v *string) error {
		cur, err := c.Admin().CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		if v == nil {
			delete(cur.Annotations, key)
		} else {
			cur.Annotations[key] = *v
		}
		_, err = c.Admin().CoreV1().Services(svc.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	return announcerRecord{source: source,
		hold: func(ctx context.Context, svc *corev1.Service, node string) error {
			cur, err := c.Admin().CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			lbIP := ""
			if ing := cur.Status.LoadBalancer.Ingress; len(ing) > 0 {
				lbIP = ing[0].IP
			}
			v := value(node, lbIP)
			return set(ctx, svc, &v)
		},
		expire: func(ctx context.Context, svc *corev1.Service) error { return set(ctx, svc, nil) },
	}
}

// annotationSource: the announcer records itself on the Service, which the exporter reads anyway; its source
// is ok once some Local Service carries the annotation.
func annotationSource(source string) bool {
	return source == "kube_vip" || source == "openelb" || source == "purelb"
}

func sourceOK(node, source string) func(cluster.Metrics) error {
	return metricIs("localtraffic_announcer_source_state", cluster.Labels{"node": node, "source": source, "state": "ok"}, 1)
}

// onInterface is rec with the load balancer IP held on the holder's uplink as well (kube-vip in ARP mode,
// PureLB's local addresses): a new holder takes the address from the previous one.
func onInterface(t testing.TB, c *cluster.Cluster, rec announcerRecord) announcerRecord {
	held := map[string]string{} // LB IP -> node holding it
	hold := rec.hold
	rec.hold = func(ctx context.Context, svc *corev1.Service, node string) error {
		cur, err := c.Admin().CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil || len(cur.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("the load balancer IP of %s/%s: %v", svc.Namespace, svc.Name, err)
		}
		ip := cur.Status.LoadBalancer.Ingress[0].IP
		if prev, ok := held[ip]; ok {
			if err := c.Node(prev).DelAddress(ctx, ip); err != nil {
				return err
			}
		} else {
			t.Cleanup(func() {
				if n, ok := held[ip]; ok {
					_ = c.Node(n).DelAddress(context.Background(), ip)
				}
			})
		}
		if err := c.Node(node).AddAddress(ctx, ip); err != nil {
			return err
		}
		held[ip] = node
		return hold(ctx, svc, node)
	}
	return rec
}

func installMetalLBCRDs(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	ctx := testContext(t)
	dir, err := cluster.MetalLBCRDsDir()
	if err != nil {
		fatalln(t, err)
	}
	if err := c.InstallCRDs(ctx, dir); err != nil {
		fatalln(t, err)
	}
	if err := c.EnsureNamespace(ctx, metallbNamespace); err != nil {
		fatalln(t, err)
	}
}

// TestAnnouncerHolderWithoutReplica: LoadBalancer Services with their only replica on node-1; MetalLB L2 and
// Cilium L2 each name node-2 (iptables) for one Service and node-4 (nftables) for another, MetalLB BGP (a
// status with a peer), kube-vip (BGP mode: the address on no interface; ARP mode: on the holder's eth0), OpenELB
// and PureLB one node each, and the client's route sends each address there, where kube-proxy drops it. The nodes answer 503 on the health check, which
// no announcer reads. Before the record exists, the clients' arrivals have not outlasted the grace window
// (2m, the default), and the nodes are not paged; once the announcer names them, they page announced_here
// (critical) within a few seconds. Then the holder and the route move to node-1, which serves: no blackhole on
// node-2 or node-4. Finally Cilium's holder stops renewing its lease while the replica still serves: the
// Service is unannounced, on every node alike. kubectl localtraffic status, reading the same records through the
// real apiserver, agrees at each step: the named node DROP (exit 1), then clean, then unannounced (exit 1).
func TestAnnouncerHolderWithoutReplica(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	installMetalLBCRDs(t, c)
	records := map[string]announcerRecord{"metallb_l2": metallbL2(t, c), "cilium_l2": ciliumL2(t, c), "metallb_bgp": metallbBGP(t, c),
		// kube-vip in BGP mode: the address on no interface, the route from the node it names.
		"kube_vip": annotated(c, "kube_vip", "kube-vip.io/vipHost", func(node, _ string) string { return node }),
		"openelb":  annotated(c, "openelb", "layer2.openelb.kubesphere.io/v1alpha1", func(node, _ string) string { return node }),
		"purelb": annotated(c, "purelb", "purelb.io/announcing-IPv4", func(node, lbIP string) string {
			return node + ",eth0," + lbIP
		}),
	}
	// kube-vip in ARP mode: the address on the holder's interface too, and its record naming the holder.
	records["kube_vip_arp"] = onInterface(t, c, records["kube_vip"])
	type scenario struct {
		record, node, lbIP string // record: the key in records
		svc                *corev1.Service
	}
	scenarios := []*scenario{
		{record: "metallb_l2", node: "node-2", lbIP: "192.0.2.141"},
		{record: "cilium_l2", node: "node-4", lbIP: "192.0.2.142"},
		{record: "metallb_l2", node: "node-4", lbIP: "192.0.2.143"},
		{record: "cilium_l2", node: "node-2", lbIP: "192.0.2.144"},
		{record: "metallb_bgp", node: "node-2", lbIP: "192.0.2.145"},
		{record: "kube_vip", node: "node-4", lbIP: "192.0.2.146"},
		{record: "openelb", node: "node-2", lbIP: "192.0.2.147"},
		{record: "purelb", node: "node-4", lbIP: "192.0.2.148"},
		{record: "kube_vip_arp", node: "node-2", lbIP: "192.0.2.150"},
	}
	// The exporters read the CRDs installed after they started at their next list; a restart makes it now.
	for _, node := range []string{"node-1", "node-2", "node-4"} {
		restartExporter(t, c, c.Node(node))
	}
	for i, s := range scenarios {
		s.svc = serviceSpec(t, c, "e2e-announce", fmt.Sprintf("vip-%d", i), corev1.ServiceTypeLoadBalancer, nil)
		setEndpoints(t, c, s.svc, ready(startPods(t, c, s.svc, "node-1")...))
		if err := c.SetLoadBalancerIngress(ctx, s.svc.Namespace, s.svc.Name, corev1.LoadBalancerIngress{IP: s.lbIP}); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.Unroute(context.Background(), s.lbIP) })
		if err := c.RouteVia(ctx, s.node, s.lbIP); err != nil {
			fatalln(t, err)
		}
	}
	var addrs []string
	for _, s := range scenarios {
		addrs = append(addrs, s.lbIP+":80")
	}
	keepSending(t, c, addrs...)

	for _, s := range scenarios {
		eventually(t, converge, fmt.Sprintf("%s dropping %s before any announcer record", s.node, s.lbIP), func() error {
			if err := wantVerdict(c.Request(ctx, s.lbIP+":80"), cluster.Blackhole, "LB IP via "+s.node); err != nil {
				return err
			}
			checks := []func(cluster.Metrics) error{metricIs("localtraffic_blackhole", svcLabels(s.svc, s.node), 0)}
			if src := records[s.record].source; !annotationSource(src) {
				// The announcer's informer has listed: what follows measures the verdict, not a start-up.
				checks = append(checks, sourceOK(s.node, src))
			}
			return expectMetrics(ctx, c, s.node, checks...)
		})
	}
	for _, s := range scenarios {
		if err := records[s.record].hold(ctx, s.svc, s.node); err != nil {
			fatalln(t, err)
		}
		eventually(t, announcedWithin, fmt.Sprintf("%s paged at once: %s names it for %s", s.node, s.record, s.lbIP), func() error {
			return expectMetrics(ctx, c, s.node, sourceOK(s.node, records[s.record].source),
				metricIs("localtraffic_in_rotation", svcLabels(s.svc, s.node), 1),
				metricIs("localtraffic_blackhole", svcLabels(s.svc, s.node), 1),
				metricIs("localtraffic_blackhole_reason", reasonLabels(s.svc, s.node, "announced_here"), 1))
		})
	}

	// kubectl localtraffic status reads the same records cluster-wide: each named node without a replica is the
	// Service's one blackhole (DROP, exit 1), where the plugin without the announcers' objects said "cannot tell"
	// for MetalLB and Cilium.
	p := newPlugin(t, ctx, c)
	for _, s := range scenarios {
		code, holes, _ := pluginAnnounced(t, ctx, p, s.svc)
		if code != 1 || !slices.Equal(holes, []string{s.node}) {
			errorf(t, "status %s (%s names %s): exit %d, blackholes %v; want 1, [%s]", s.svc.Name, s.record, s.node, code, holes, s.node)
		}
	}

	// The announcer fails over to node-1, which has the replica, and the network follows it.
	for _, s := range scenarios {
		if err := records[s.record].hold(ctx, s.svc, "node-1"); err != nil {
			fatalln(t, err)
		}
		if err := c.RouteVia(ctx, "node-1", s.lbIP); err != nil {
			fatalln(t, err)
		}
	}
	for _, s := range scenarios {
		eventually(t, converge, fmt.Sprintf("%s served via node-1, %s no longer paged", s.lbIP, s.node), func() error {
			if err := wantServedLocally(c.Request(ctx, s.lbIP+":80"), "node-1"); err != nil {
				return err
			}
			return expectMetrics(ctx, c, s.node, metricIs("localtraffic_blackhole", svcLabels(s.svc, s.node), 0))
		})
		if err := expectMetrics(ctx, c, "node-1", metricIs("localtraffic_in_rotation", svcLabels(s.svc, "node-1"), 1),
			metricIs("localtraffic_blackhole", svcLabels(s.svc, "node-1"), 0)); err != nil {
			errorln(t, err)
		}
		if code, holes, un := pluginAnnounced(t, ctx, p, s.svc); code != 0 || len(holes) > 0 || len(un) > 0 {
			errorf(t, "status %s held by node-1: exit %d, blackholes %v, unannounced %v; want 0 and none", s.svc.Name, code, holes, un)
		}
	}

	// Cilium's holder stops renewing its lease: nobody answers ARP for the address any more.
	for _, s := range scenarios {
		if s.record != "cilium_l2" {
			continue
		}
		if err := records[s.record].expire(ctx, s.svc); err != nil {
			fatalln(t, err)
		}
		for _, node := range []string{"node-1", "node-2", "node-4"} {
			eventually(t, lastLease+announcedWithin, fmt.Sprintf("%s reports %s unannounced", node, s.svc.Name), func() error {
				return expectMetrics(ctx, c, node, metricIs("localtraffic_service_unannounced", svcLabels(s.svc, node), 1))
			})
		}
		if code, _, un := pluginAnnounced(t, ctx, p, s.svc); code != 1 || !slices.Equal(un, []string{s.lbIP}) {
			errorf(t, "status %s, its lease expired: exit %d, unannounced %v; want 1, [%s]", s.svc.Name, code, un, s.lbIP)
		}
	}

	// MetalLB allocated the address (its annotation) and its speakers stop announcing it: the ServiceL2Status
	// is deleted and the route goes, while the replica still serves. With both of MetalLB's record kinds read
	// cluster-wide and MetalLB's speakers seen (the other Services' records, which only speakers write, remain),
	// the plugin finds no record of the address and reports it unannounced; an exporter, which
	// reads its own node's BGP records only, cannot know that no other node advertises it.
	for _, s := range scenarios {
		if s.record != "metallb_l2" {
			continue
		}
		if code, _, un := pluginAnnounced(t, ctx, p, s.svc); code != 0 || len(un) > 0 {
			fatalf(t, "status %s before MetalLB's annotation: exit %d, unannounced %v", s.svc.Name, code, un)
		}
		svc, err := c.Admin().CoreV1().Services(s.svc.Namespace).Get(ctx, s.svc.Name, metav1.GetOptions{})
		if err != nil {
			fatalln(t, err)
		}
		metav1.SetMetaDataAnnotation(&svc.ObjectMeta, "metallb.io/ip-allocated-from-pool", "e2e-pool")
		if _, err := c.Admin().CoreV1().Services(s.svc.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			fatalln(t, err)
		}
		if code, _, un := pluginAnnounced(t, ctx, p, s.svc); code != 0 || len(un) > 0 {
			errorf(t, "status %s, MetalLB's address held by node-1: exit %d, unannounced %v; want 0, none", s.svc.Name, code, un)
		}
		if err := records[s.record].expire(ctx, s.svc); err != nil {
			fatalln(t, err)
		}
		if err := c.Unroute(ctx, s.lbIP); err != nil {
			fatalln(t, err)
		}
		// Lost: with no announcer, nothing delivers the address (here the client's network has no route and
		// answers unreachable; on a LAN the router's ARP goes unanswered).
		if r := c.Request(ctx, s.lbIP+":80"); r.Verdict == cluster.OK {
			errorf(t, "%s announced by nobody: %s, want it lost", s.lbIP, r)
		}
		if code, _, un := pluginAnnounced(t, ctx, p, s.svc); code != 1 || !slices.Equal(un, []string{s.lbIP}) {
			errorf(t, "status %s, no MetalLB record: exit %d, unannounced %v; want 1, [%s]", s.svc.Name, code, un, s.lbIP)
		}
	}
}

// pluginAnnounced runs `kubectl localtraffic status -o json` for svc: the exit status, the nodes it calls
// blackholes and the load balancer IPs it reports unannounced.
func pluginAnnounced(t *testing.T, ctx context.Context, p plugin, svc *corev1.Service) (code int, holes, unannounced []string) {
	t.Helper()
	r := p.run(t, ctx, "", "status", "-n", svc.Namespace, svc.Name, "-o", "json")
	var st struct {
		Items []struct {
			NodeStatuses []struct {
				Node      string `json:"node"`
				Blackhole bool   `json:"blackhole"`
			} `json:"nodeStatuses"`
			Unannounced []string `json:"unannounced"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 || len(st.Items[0].NodeStatuses) == 0 {
		fatalf(t, "status -o json (exit %d): %v %s%s", r.code, err, r.out, r.errOut)
	}
	for _, n := range st.Items[0].NodeStatuses {
		if n.Blackhole {
			holes = append(holes, n.Node)
		}
	}
	return r.code, holes, st.Items[0].Unannounced
}

// TestAnnouncerLeaseForbidden: an exporter told to read Cilium's leases in a namespace its ServiceAccount has no
// Role in (the shipped RBAC grants kube-system only) is refused by the real authorizer. It exports the source as
// forbidden, and a lease there naming node-3, which has no replica and receives the clients' traffic, changes
// nothing: no page before the grace window, as without announcers.
func TestAnnouncerLeaseForbidden(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const (
		port   = 9750
		ns     = "e2e-cilium-elsewhere"
		lbIP   = "192.0.2.149"
		holder = "node-3"
	)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	svc := serviceSpec(t, c, "e2e-announce-forbidden", "vip", corev1.ServiceTypeLoadBalancer, nil)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, "node-1")...))
	if err := c.SetLoadBalancerIngress(ctx, svc.Namespace, svc.Name, corev1.LoadBalancerIngress{IP: lbIP}); err != nil {
		fatalln(t, err)
	}
	leases := c.Admin().CoordinationV1().Leases(ns)
	now := metav1.MicroTime{Time: time.Now()}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cilium-l2announce-" + svc.Namespace + "-" + svc.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr(holder), LeaseDurationSeconds: ptr(int32(600)), RenewTime: &now, AcquireTime: &now}}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), lease.Name, metav1.DeleteOptions{}) })
	t.Cleanup(func() { _ = c.Unroute(context.Background(), lbIP) })
	if err := c.RouteVia(ctx, holder, lbIP); err != nil {
		fatalln(t, err)
	}
	n := c.Node(holder)
	if err := n.StartExporterOn(ctx, port, "--announcers.cilium-namespace="+ns); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { n.StopExporterOn(port) })
	keepSending(t, c, lbIP+":80")
	scrape := func(checks ...func(cluster.Metrics) error) error {
		return expectMetricsOn(ctx, c, holder, port, checks...)
	}
	eventually(t, converge, "the lease read refused, the dropped VIP not paged", func() error {
		if err := wantVerdict(c.Request(ctx, lbIP+":80"), cluster.Blackhole, "LB IP via "+holder); err != nil {
			return err
		}
		return scrape(metricIs("localtraffic_announcer_source_state", cluster.Labels{"node": holder, "source": "cilium_l2", "state": "forbidden"}, 1),
			metricIs("localtraffic_blackhole", svcLabels(svc, holder), 0))
	})
	// Held for longer than a record takes to page (announcedWithin), well within the grace window.
	deadline := time.Now().Add(2 * announcedWithin)
	for time.Now().Before(deadline) {
		if err := scrape(metricIs("localtraffic_blackhole", svcLabels(svc, holder), 0)); err != nil {
			fatalf(t, "a lease the exporter may not read changed the verdict: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
