package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The dataplane is detected, never inferred from silence.

// kubeProxyState is what the exporter on a node says of its dataplane and kube-proxy.
func kubeProxyState(node string, livez, programmed float64) []func(cluster.Metrics) error {
	nl := nodeLabels(node)
	return []func(cluster.Metrics) error{
		metricIs("localtraffic_dataplane_info", cluster.Labels{"node": node, "dataplane": "kube-proxy"}, 1),
		metricAbsent("localtraffic_dataplane_info", cluster.Labels{"node": node, "dataplane": "replacement"}),
		metricIs("localtraffic_kube_proxy_up", cluster.Labels{"node": node, "endpoint": "livez"}, livez),
		metricIs("localtraffic_kube_proxy_programmed", nl, programmed),
		metricIs("localtraffic_scrape_collector_success", cluster.Labels{"node": node, "collector": "kube_proxy"}, 1),
		metricIs("localtraffic_scrape_collector_success", cluster.Labels{"node": node, "collector": "rules"}, 1),
	}
}

// scrapeChecked scrapes node's exporter and applies each check; it returns the scrape too.
func scrapeChecked(ctx context.Context, c *cluster.Cluster, node string, checks ...func(cluster.Metrics) error) (cluster.Metrics, error) {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return m, err
	}
	var errs []error
	for _, check := range checks {
		errs = append(errs, check(m))
	}
	return m, errors.Join(errs...)
}

// TestFidelityKubeProxyNeverStarted: node-3 as after a reboot whose kube-proxy never comes up (image pull
// failing, a crash before its health server starts): no kube-proxy process, none of its rules, and an exporter
// that never saw it. Before the fix this read as a kube-proxy replacement and muted every kube-proxy alert. Now
// the node is kube-proxy's, missing: kube_proxy_up 0 and not programmed, so the shipped
// LocalTrafficKubeProxyUnhealthy fires on the exporter's live series; real traffic to the NodePort is refused,
// not blackholed, and no blackhole pages.
func TestFidelityKubeProxyNeverStarted(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-3")
	svc := newService(t, c, "e2e-fidelity-nokp", "orders", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	l := svcLabels(svc, n.Name)
	// Control: with kube-proxy, node-3 has no local endpoint and blackholes the NodePort, and is paged.
	eventually(t, converge, "node-3 blackholes with kube-proxy running", func() error {
		return errors.Join(wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Blackhole, n.Name),
			expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", l, 1)))
	})

	n.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	if err := n.CleanupRules(ctx); err != nil {
		fatalln(t, err)
	}
	restartExporter(t, c, n, "--state.file=") // a fresh exporter: it never saw kube-proxy here (no state file says it did)
	var m cluster.Metrics
	eventually(t, converge, "node-3: kube-proxy missing, not a replacement", func() error {
		if err := wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Refused, n.Name); err != nil {
			return err
		}
		var err error
		m, err = scrapeChecked(ctx, c, n.Name, append(kubeProxyState(n.Name, 0, 0), metricIs("localtraffic_blackhole", l, 0))...)
		return err
	})
	alertsOnLiveSeries(t, ctx, m, n.Name, map[string][]string{
		"LocalTrafficKubeProxyUnhealthy":     {n.Name},
		"LocalTrafficKubeProxyNotProgrammed": nil,
		"LocalTrafficBlackhole":              nil,
		"LocalTrafficRulesMismatch":          nil,
		"LocalTrafficCollectorFailing":       nil,
	})
}

// TestFidelityKubeProxyNotProgrammed: kube-proxy on node-3 runs, but with credentials that may not list
// EndpointSlices it never completes its first sync: v1.37.2 answers /healthz and /livez 200 from start-up
// and writes no rule until its informers have listed. The node is "not programmed": the exporter says so
// (kube_proxy_programmed 0), reports no blackhole (real traffic to the NodePort is refused: there is no rule to
// drop it), and the shipped LocalTrafficKubeProxyNotProgrammed fires on its live series, not
// LocalTrafficKubeProxyUnhealthy. Given its usual credentials kube-proxy syncs; its drop makes the node a
// blackhole again, in the traffic and in the exporter.
func TestFidelityKubeProxyNotProgrammed(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n := c.Node("node-3")
	svc := newService(t, c, "e2e-fidelity-unsynced", "orders", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1")
	setEndpoints(t, c, svc, ready(pods...))
	l := svcLabels(svc, n.Name)
	kubeconfig := kubeProxyWithoutEndpointSlices(t, c)

	n.StopKubeProxy()
	t.Cleanup(func() { restartKubeProxy(t, c, n, cluster.KubeProxyOptions{}) })
	if err := n.CleanupRules(ctx); err != nil {
		fatalln(t, err)
	}
	if err := n.StartKubeProxy(ctx, cluster.KubeProxyOptions{ExtraArgs: []string{"--kubeconfig=" + kubeconfig}}); err != nil {
		fatalln(t, err)
	}
	if err := n.WaitKubeProxyHealthy(ctx, converge); err != nil {
		fatalln(t, err)
	}
	var m cluster.Metrics
	eventually(t, converge, "node-3: kube-proxy up, not programmed", func() error {
		if err := wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Refused, n.Name); err != nil {
			return err
		}
		dump, err := ruleDump(ctx, n)
		if err != nil {
			return err
		}
		if strings.Contains(dump, "KUBE-SERVICES") {
			return fmt.Errorf("node-3 holds kube-proxy rules: kube-proxy synced after all")
		}
		m, err = scrapeChecked(ctx, c, n.Name, append(kubeProxyState(n.Name, 1, 0), metricIs("localtraffic_blackhole", l, 0),
			metricAbsent("localtraffic_rules_mismatch", l))...)
		return err
	})
	alertsOnLiveSeries(t, ctx, m, n.Name, map[string][]string{
		"LocalTrafficKubeProxyNotProgrammed": {n.Name},
		"LocalTrafficKubeProxyUnhealthy":     nil,
		"LocalTrafficBlackhole":              nil,
		"LocalTrafficCollectorFailing":       nil,
	})

	restartKubeProxy(t, c, n, cluster.KubeProxyOptions{})
	eventually(t, converge, "node-3 programmed: its drop is a blackhole again", func() error {
		return errors.Join(wantVerdict(c.Request(ctx, nodePortAddr(n, svc)), cluster.Blackhole, n.Name),
			expectMetrics(ctx, c, n.Name, append(kubeProxyState(n.Name, 1, 1), metricIs("localtraffic_blackhole", l, 1))...))
	})
}

// kubeProxyWithoutEndpointSlices is a kubeconfig for a ServiceAccount with what kube-proxy reads but
// EndpointSlices: its Node (node IPs, eligibility), Services, ServiceCIDRs and events, so it starts, serves its
// health server and waits for its EndpointSlice informer forever.
func kubeProxyWithoutEndpointSlices(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ctx := testContext(t)
	const ns, name = "e2e-fidelity-unsynced", "kube-proxy-no-slices"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	rbac := c.Admin().RbacV1()
	sa, err := c.Admin().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		fatalln(t, err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = rbac.ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
		_ = c.Admin().CoreV1().ServiceAccounts(ns).Delete(ctx, sa.Name, metav1.DeleteOptions{})
	})
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, ns, name)
	if err != nil {
		fatalln(t, err)
	}
	return kubeconfig
}
