package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

const backendPort = cluster.BackendPort

// converge is how long a scenario waits for kube-proxy and the exporter to catch up with an API change. Both
// react in about a second; the margin is for a loaded CI machine.
const converge = 90 * time.Second

// newService creates a Service with one TCP port 80 → backendPort in a fresh Kubernetes namespace ns.
func newService(t testing.TB, c *cluster.Cluster, ns, name string, typ corev1.ServiceType, policy corev1.ServiceExternalTrafficPolicy) *corev1.Service {
	t.Helper()
	return serviceSpec(t, c, ns, name, typ, cluster.WithPolicy(policy))
}

// startPods starts one backend pod per entry of nodes, named <svc>-<i>, and deletes them at the end.
func startPods(t testing.TB, c *cluster.Cluster, svc *corev1.Service, nodes ...string) []*cluster.Pod {
	t.Helper()
	ctx := testContext(t)
	var pods []*cluster.Pod
	for _, node := range nodes {
		name := fmt.Sprintf("%s-%d", svc.Name, nextPodIndex(c, svc))
		p, err := c.StartPod(ctx, cluster.PodConfig{Namespace: svc.Namespace, Name: name, Node: node, Ports: []int{backendPort}})
		if err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() {
			if c.Pod(p.Namespace, p.Name) != nil {
				if err := c.DeletePod(context.Background(), p.Namespace, p.Name); err != nil {
					errorf(t, "delete pod: %v", err)
				}
			}
		})
		pods = append(pods, p)
	}
	return pods
}

func nextPodIndex(c *cluster.Cluster, svc *corev1.Service) int {
	for i := 0; ; i++ {
		if c.Pod(svc.Namespace, fmt.Sprintf("%s-%d", svc.Name, i)) == nil {
			return i
		}
	}
}

// ready lists pods as ready endpoints.
func ready(pods ...*cluster.Pod) []cluster.Endpoint {
	eps := make([]cluster.Endpoint, len(pods))
	for i, p := range pods {
		eps[i] = cluster.Endpoint{Pod: p}
	}
	return eps
}

func setEndpoints(t testing.TB, c *cluster.Cluster, svc *corev1.Service, eps []cluster.Endpoint) {
	t.Helper()
	if err := c.SetEndpoints(testContext(t), svc.Namespace, svc.Name, eps); err != nil {
		fatalln(t, err)
	}
}

func svcLabels(svc *corev1.Service, node string) cluster.Labels {
	return cluster.Labels{"node": node, "namespace": svc.Namespace, "service": svc.Name}
}

// nodePortAddr is <node IP>:<the Service's first NodePort>.
func nodePortAddr(n *cluster.Node, svc *corev1.Service) string {
	return fmt.Sprintf("%s:%d", n.IP, svc.Spec.Ports[0].NodePort)
}

// wantServedLocally checks a result is a 200 from a pod on node.
func wantServedLocally(r cluster.Result, node string) error {
	if r.Verdict != cluster.OK || r.Status != 200 {
		return fmt.Errorf("via %s: got %s, want ok (200)", node, r)
	}
	if !strings.HasSuffix(strings.TrimSpace(r.Body), " on "+node) {
		return fmt.Errorf("via %s: served by %q, want a pod on %s", node, strings.TrimSpace(r.Body), node)
	}
	return nil
}

func wantVerdict(r cluster.Result, v cluster.Verdict, where string) error {
	if r.Verdict != v {
		return fmt.Errorf("%s: got %s, want %s", where, r, v)
	}
	return nil
}

// expectMetrics scrapes node's exporter and applies each check. When they pass and looked at node's verdict for
// a Service (its localtraffic_blackhole or localtraffic_blackhole_reason series), the plugin's --prometheus mode
// must show that verdict too (agreeThroughPrometheus): an error until it does, so a wait loop waits for it.
func expectMetrics(ctx context.Context, c *cluster.Cluster, node string, checks ...func(cluster.Metrics) error) error {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return err
	}
	m = m.Recording()
	var errs []error
	for _, check := range checks {
		if err := check(m); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return agreeThroughPrometheus(ctx, c, node, m)
}

// expectMetricsOn is expectMetrics for an extra exporter on node, listening on port.
func expectMetricsOn(ctx context.Context, c *cluster.Cluster, node string, port int, checks ...func(cluster.Metrics) error) error {
	m, err := c.MetricsOn(ctx, node, port)
	if err != nil {
		return err
	}
	var errs []error
	for _, check := range checks {
		errs = append(errs, check(m))
	}
	return errors.Join(errs...)
}

func metricIs(name string, labels cluster.Labels, v float64) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error { return m.Expect(name, labels, v) }
}

// metricAbove wants the single matching series above v (counters that real traffic moved).
func metricAbove(name string, labels cluster.Labels, v float64) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error {
		got, ok, err := m.Value(name, labels)
		if err != nil {
			return err
		}
		if !ok || got <= v {
			return fmt.Errorf("%s%v = %v (present %v), want > %v", name, labels, got, ok, v)
		}
		return nil
	}
}

// portLabels selects a Service port's series (the rules metrics); the harness's Services name their port http.
func portLabels(svc *corev1.Service, node string) cluster.Labels {
	return cluster.Labels{"node": node, "namespace": svc.Namespace, "service": svc.Name, "port": "http"}
}

func metricAbsent(name string, labels cluster.Labels) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error { return m.ExpectAbsent(name, labels) }
}

// healthCheckReply is kube-proxy's health check node port body.
type healthCheckReply struct {
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// healthCheck GETs the Service's health check node port on node from the outside client.
func healthCheck(ctx context.Context, c *cluster.Cluster, n *cluster.Node, svc *corev1.Service) (int, healthCheckReply, error) {
	r := c.Request(ctx, fmt.Sprintf("%s:%d", n.IP, svc.Spec.HealthCheckNodePort))
	if r.Verdict != cluster.OK {
		return 0, healthCheckReply{}, fmt.Errorf("health check on %s: %s", n.Name, r)
	}
	var body healthCheckReply
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		return r.Status, body, fmt.Errorf("health check on %s: %w: %q", n.Name, err, r.Body)
	}
	return r.Status, body, nil
}
