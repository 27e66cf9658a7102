package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestLoadBalancer: a Local LoadBalancer Service with endpoints on node-1 and node-2. The health check node
// port answers 200 there and 503 elsewhere; the LB address routed through each node is served where endpoints
// are and dropped elsewhere; a load balancer checking the port drains the dropping nodes, so the exporter
// reports them out of rotation and no blackhole.
func TestLoadBalancer(t *testing.T) { loadBalancerScenario(t, sharedCluster(t)) }

// loadBalancerScenario is TestLoadBalancer on c, whose node-1 and node-2 get the endpoints.
func loadBalancerScenario(t *testing.T, c *cluster.Cluster) {
	ctx := testContext(t)
	const lbIP = "192.0.2.10"
	svc := newService(t, c, "e2e-lb", "web", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal)
	if svc.Spec.HealthCheckNodePort == 0 {
		fatalln(t, "apiserver allocated no healthCheckNodePort")
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	if _, err := c.Admin().CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		fatalf(t, "set LoadBalancer ingress: %v", err)
	}
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	serving := map[string]bool{"node-1": true, "node-2": true}
	hcnp := strconv.Itoa(int(svc.Spec.HealthCheckNodePort))

	for _, n := range c.Nodes() {
		eventually(t, converge, "LoadBalancer on "+n.Name, func() error {
			var errs []error
			code, body, err := healthCheck(ctx, c, n, svc)
			want, wantEPs := http.StatusServiceUnavailable, 0
			if serving[n.Name] {
				want, wantEPs = http.StatusOK, 1
			}
			if err != nil {
				errs = append(errs, err)
			} else if code != want || body.LocalEndpoints != wantEPs {
				errs = append(errs, fmt.Errorf("health check on %s: %d localEndpoints=%d, want %d with %d", n.Name, code, body.LocalEndpoints, want, wantEPs))
			}
			r := c.RequestVia(ctx, n.Name, lbIP+":80")
			if serving[n.Name] {
				errs = append(errs, wantServedLocally(r, n.Name))
			} else {
				errs = append(errs, wantVerdict(r, cluster.Blackhole, "LB IP via "+n.Name))
			}
			l := svcLabels(svc, n.Name)
			inRotation := 0.0
			if serving[n.Name] {
				inRotation = 1
			}
			errs = append(errs, expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_service_info", cluster.Labels{"node": n.Name, "namespace": svc.Namespace, "service": svc.Name,
					"type": "LoadBalancer", "health_check_node_port": hcnp}, 1),
				metricIs("localtraffic_health_check_up", l, inRotation),
				metricIs("localtraffic_health_check_result", withResult(l, map[bool]string{true: "ok", false: "unavailable"}[serving[n.Name]]), 1),
				metricIs("localtraffic_health_check_local_endpoints", l, float64(wantEPs)),
				metricIs("localtraffic_in_rotation", l, inRotation),
				metricIs("localtraffic_blackhole", l, 0),
			))
			return errors.Join(errs...)
		})
	}
}

// TestServingTerminatingEndpoint: the only endpoint on node-2 is terminating but still serving. kube-proxy
// keeps sending node-2's traffic to it while its health check answers 503 (it counts only ready endpoints):
// traffic is served, the load balancer drains the node, and the exporter reports no blackhole.
func TestServingTerminatingEndpoint(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	svc := newService(t, c, "e2e-terminating", "drain", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, []cluster.Endpoint{
		{Pod: pods[0]},
		{Pod: pods[1], Ready: cluster.Bool(false), Serving: cluster.Bool(true), Terminating: cluster.Bool(true)},
	})
	n2 := c.Node("node-2")
	eventually(t, converge, "serving-terminating endpoint on node-2", func() error {
		var errs []error
		code, body, err := healthCheck(ctx, c, n2, svc)
		if err != nil {
			errs = append(errs, err)
		} else if code != http.StatusServiceUnavailable || body.LocalEndpoints != 0 {
			errs = append(errs, fmt.Errorf("health check on node-2: %d localEndpoints=%d, want 503 with 0", code, body.LocalEndpoints))
		}
		errs = append(errs, wantServedLocally(c.Request(ctx, nodePortAddr(n2, svc)), "node-2"))
		l := svcLabels(svc, "node-2")
		errs = append(errs, expectMetrics(ctx, c, "node-2",
			metricIs("localtraffic_health_check_local_endpoints", l, 0),
			metricIs("localtraffic_health_check_result", withResult(l, "unavailable"), 1),
			// The API view and the rules agree: the terminating pod still takes node-2's traffic.
			metricIs("localtraffic_local_endpoints", l, 1),
			metricIs("localtraffic_rules_drop", portLabels(svc, "node-2"), 0),
			metricIs("localtraffic_rules_local_endpoints", portLabels(svc, "node-2"), 1),
			metricIs("localtraffic_rules_mismatch", l, 0),
			metricIs("localtraffic_blackhole", l, 0),
		))
		return errors.Join(errs...)
	})
}

// TestScaleDown: a Local NodePort Service on every node is scaled to one replica on node-1: every other node
// now drops its traffic and the exporter there says blackhole. Scaled to zero, every node rejects (an outage,
// visible to every client at once), which is not a per-node blackhole.
func TestScaleDown(t *testing.T) { scaleDownScenario(t, sharedCluster(t)) }

// scaleDownScenario is TestScaleDown on c, whose node-1 keeps the last replica.
func scaleDownScenario(t *testing.T, c *cluster.Cluster) {
	ctx := testContext(t)
	svc := newService(t, c, "e2e-scale", "api", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	var names []string
	for _, n := range c.Nodes() {
		names = append(names, n.Name)
	}
	pods := startPods(t, c, svc, names...)
	setEndpoints(t, c, svc, ready(pods...))
	for _, n := range c.Nodes() {
		eventually(t, converge, "all replicas: "+n.Name, func() error {
			return errors.Join(wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name),
				expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 0)))
		})
	}

	setEndpoints(t, c, svc, ready(pods[0]))
	for _, p := range pods[1:] {
		if err := c.DeletePod(ctx, p.Namespace, p.Name); err != nil {
			fatalln(t, err)
		}
	}
	for _, n := range c.Nodes() {
		eventually(t, converge, "one replica: "+n.Name, func() error {
			r := c.Request(ctx, nodePortAddr(n, svc))
			if n.Name == "node-1" {
				return errors.Join(wantServedLocally(r, n.Name),
					expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 0)))
			}
			checks := []func(cluster.Metrics) error{
				metricIs("localtraffic_local_endpoints", svcLabels(svc, n.Name), 0),
				metricIs("localtraffic_rules_drop", portLabels(svc, n.Name), 1),
				metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 1),
			}
			if n.ProxyMode == cluster.IPTables {
				// The client's dropped SYNs were counted by the DROP rule.
				checks = append(checks, metricAbove("localtraffic_rules_dropped_packets_total", portLabels(svc, n.Name), 0))
			}
			return errors.Join(wantVerdict(r, cluster.Blackhole, n.Name), expectMetrics(ctx, c, n.Name, checks...))
		})
	}

	setEndpoints(t, c, svc, nil)
	for _, n := range c.Nodes() {
		eventually(t, converge, "zero replicas: "+n.Name, func() error {
			return errors.Join(wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Refused, n.Name),
				expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", svcLabels(svc, n.Name), 0)))
		})
	}
}

// TestClusterPolicyNeverReported: a Service with externalTrafficPolicy Cluster is served through every node
// (kube-proxy forwards to the pod on node-1) and the exporter reports nothing about it.
func TestClusterPolicyNeverReported(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	svc := newService(t, c, "e2e-cluster-policy", "shop", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyCluster)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	for _, n := range c.Nodes() {
		eventually(t, converge, "Cluster policy via "+n.Name, func() error {
			r := c.Request(ctx, nodePortAddr(n, svc))
			if r.Verdict != cluster.OK || r.Status != 200 {
				return fmt.Errorf("via %s: %s, want ok (200)", n.Name, r)
			}
			sel := cluster.Labels{"namespace": svc.Namespace, "service": svc.Name}
			return expectMetrics(ctx, c, n.Name,
				// The exporter is up and has seen the Service's namespace objects by now (scrape succeeded),
				// yet it must report no series for a Cluster-policy Service.
				metricAbsent("localtraffic_service_info", sel),
				metricAbsent("localtraffic_blackhole", sel),
				metricAbsent("localtraffic_local_endpoints", sel))
		})
	}
}

// TestNFTablesNode: on the node whose kube-proxy runs in nftables mode the exporter reads nftables, and a Local
// Service with no endpoint there is a blackhole for real traffic and for the exporter.
func TestNFTablesNode(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	nft := nftablesNode(t, c)
	svc := newService(t, c, "e2e-nft", "cart", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	eventually(t, converge, "nftables node drops", func() error {
		var errs []error
		out, err := nft.Exec(ctx, "nft", "list", "map", "ip", "kube-proxy", "no-endpoint-nodeports")
		if err != nil {
			errs = append(errs, err)
		} else if want := fmt.Sprintf("%d comment %q : drop", svc.Spec.Ports[0].NodePort, svc.Namespace+"/"+svc.Name+":http"); !strings.Contains(out, want) {
			errs = append(errs, fmt.Errorf("nft map no-endpoint-nodeports lacks %s:\n%s", want, out))
		}
		errs = append(errs, wantVerdict(c.Request(ctx, nodePortAddr(nft, svc)), cluster.Blackhole, nft.Name))
		errs = append(errs, expectMetrics(ctx, c, nft.Name,
			metricIs("localtraffic_rules_info", cluster.Labels{"node": nft.Name, "mode": "nftables"}, 1),
			metricIs("localtraffic_rules_drop", portLabels(svc, nft.Name), 1),
			metricIs("localtraffic_blackhole_source_info", cluster.Labels{"node": nft.Name, "source": "rules"}, 1),
			metricIs("localtraffic_blackhole", svcLabels(svc, nft.Name), 1)))
		return errors.Join(errs...)
	})
	setEndpoints(t, c, svc, ready(append(pods, startPods(t, c, svc, nft.Name)...)...))
	eventually(t, converge, "nftables node serves", func() error {
		return errors.Join(wantServedLocally(c.Request(ctx, nodePortAddr(nft, svc)), nft.Name),
			expectMetrics(ctx, c, nft.Name, metricIs("localtraffic_blackhole", svcLabels(svc, nft.Name), 0)))
	})
}

// TestNodeBeingDeleted: a Node held by a finalizer has a deletionTimestamp: kube-proxy's /healthz answers 503
// (load balancers drain it) and the exporter reports the node not eligible and draining.
func TestNodeBeingDeleted(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-3")
	nodes := c.Admin().CoreV1().Nodes()
	const finalizer = "e2e.localtraffic.io/hold"
	obj, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	obj.Finalizers = append(obj.Finalizers, finalizer)
	if _, err := nodes.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { restoreNode(t, c, n, finalizer) })
	if err := nodes.Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "node-3 being deleted", func() error {
		var errs []error
		r := cluster.HTTPGet(ctx, n.Dialer(), fmt.Sprintf("http://%s:%d/healthz", n.IP, cluster.KubeProxyHealthzPort))
		if r.Verdict != cluster.OK || r.Status != http.StatusServiceUnavailable {
			errs = append(errs, fmt.Errorf("kube-proxy /healthz on node-3: %s, want 503", r))
		}
		errs = append(errs, expectMetrics(ctx, c, n.Name,
			metricIs("localtraffic_kube_proxy_node_eligible", cluster.Labels{"node": n.Name}, 0),
			metricIs("localtraffic_node_draining", cluster.Labels{"node": n.Name}, 1)))
		return errors.Join(errs...)
	})
}

// restoreNode drops the finalizer (the Node goes away), registers the Node again, restarts kube-proxy (which
// exits when its Node is deleted; its DaemonSet would restart it) and waits until kube-proxy calls the node
// eligible.
func restoreNode(t *testing.T, c *cluster.Cluster, n *cluster.Node, finalizer string) {
	ctx := context.Background()
	nodes := c.Admin().CoreV1().Nodes()
	if obj, err := nodes.Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
		var keep []string
		for _, f := range obj.Finalizers {
			if f != finalizer {
				keep = append(keep, f)
			}
		}
		obj.Finalizers = keep
		if _, err := nodes.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			errorf(t, "remove finalizer: %v", err)
		}
	}
	eventually(t, converge, "node-3 gone", func() error {
		_, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("node %s still exists", n.Name)
		}
		return nil
	})
	if err := n.Register(ctx); err != nil {
		errorf(t, "re-register %s: %v", n.Name, err)
		return
	}
	restartKubeProxy(t, c, n, cluster.KubeProxyOptions{})
	eventually(t, converge, "node-3 eligible again", func() error {
		r := cluster.HTTPGet(ctx, n.Dialer(), fmt.Sprintf("http://%s:%d/healthz", n.IP, cluster.KubeProxyHealthzPort))
		if r.Verdict != cluster.OK || r.Status != http.StatusOK {
			return fmt.Errorf("kube-proxy /healthz on %s: %s, want 200", n.Name, r)
		}
		return expectMetrics(ctx, c, n.Name, metricIs("localtraffic_kube_proxy_node_eligible", cluster.Labels{"node": n.Name}, 1))
	})
}

// TestKubeProxyStopped: with kube-proxy gone the exporter reports it down on that node, while the rules it left
// behind keep forwarding (stale, not yet broken). Restarted, it is up again.
func TestKubeProxyStopped(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-2")
	svc := newService(t, c, "e2e-kube-proxy-down", "orders", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, n.Name)
	setEndpoints(t, c, svc, ready(pods...))
	eventually(t, converge, "served before the stop", func() error {
		return wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name)
	})
	n.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	eventually(t, converge, "kube-proxy down on node-2", func() error {
		return errors.Join(
			wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name),
			expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "healthz"}, 0),
				metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "livez"}, 0),
				metricIs("localtraffic_kube_proxy_result", cluster.Labels{"node": n.Name, "endpoint": "healthz", "result": "refused"}, 1),
				metricIs("localtraffic_kube_proxy_healthy", cluster.Labels{"node": n.Name}, 0)))
	})
}

// restartKubeProxy (re)starts kube-proxy on n and waits until it is alive (/livez) and, with its real node
// name, until the exporter sees /healthz answer 200 (under a wrong name kube-proxy finds no Node, so /healthz
// stays 503).
func restartKubeProxy(t *testing.T, c *cluster.Cluster, n *cluster.Node, opts cluster.KubeProxyOptions) {
	t.Helper()
	ctx := context.Background()
	n.StopKubeProxy()
	if err := n.StartKubeProxy(ctx, opts); err != nil {
		fatalln(t, err)
	}
	if err := n.WaitKubeProxyHealthy(ctx, converge); err != nil {
		fatalln(t, err)
	}
	if opts.HostnameOverride != "" {
		return
	}
	eventually(t, converge, "exporter sees kube-proxy up on "+n.Name, func() error {
		return expectMetrics(ctx, c, n.Name,
			metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": n.Name, "endpoint": "healthz"}, 1))
	})
}

// TestWrongHostnameOverride: kube-proxy on node-2 started with a name that is no Node's treats every endpoint as
// remote, so node-2 drops the traffic of a Service whose endpoint the API places on node-2. The rules disagree
// with the API view; the exporter, reading the rules, says blackhole and flags the mismatch.
func TestWrongHostnameOverride(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-2")
	svc := newService(t, c, "e2e-hostname", "billing", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1", n.Name)
	setEndpoints(t, c, svc, ready(pods...))
	eventually(t, converge, "served before the restart", func() error {
		return wantServedLocally(c.Request(ctx, nodePortAddr(n, svc)), n.Name)
	})
	restartKubeProxy(t, c, n, cluster.KubeProxyOptions{HostnameOverride: n.Name + "-typo"})
	t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	l := svcLabels(svc, n.Name)
	eventually(t, 3*converge, "rules disagree with the API on node-2", func() error {
		return errors.Join(
			wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Blackhole, n.Name),
			expectMetrics(ctx, c, n.Name,
				metricIs("localtraffic_has_local_endpoint", l, 1),
				metricIs("localtraffic_rules_mismatch", l, 1),
				metricIs("localtraffic_blackhole", l, 1)))
	})
}

// withResult adds a result label to l.
func withResult(l cluster.Labels, result string) cluster.Labels {
	out := cluster.Labels{"result": result}
	for k, v := range l {
		out[k] = v
	}
	return out
}
