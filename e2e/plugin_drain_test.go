package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// lbService creates a Local LoadBalancer Service selecting app=name, its load balancer an AWS NLB as its
// annotations say (health check every 10 s, 3 failures), its ingress IP set as the controller would, and deletes
// it at the end. The EndpointSlice controller writes its slices.
func lbService(t *testing.T, c *cluster.Cluster, ns, name, ip string) *corev1.Service {
	t.Helper()
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	svc := cluster.NewService(ns, name, corev1.ServiceTypeLoadBalancer)
	svc.Annotations = map[string]string{
		"service.beta.kubernetes.io/aws-load-balancer-type":                            "nlb",
		"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval":            "10",
		"service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold": "3",
	}
	created, err := c.Admin().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = c.Admin().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if err := c.SetLoadBalancerIngress(ctx, ns, name, corev1.LoadBalancerIngress{IP: ip}); err != nil {
		t.Fatal(err)
	}
	return created
}

// drainReport is the part of `drain-check -o json` the test reads.
type drainReport struct {
	Loses    bool `json:"loses"`
	Services []struct {
		Namespace, Name   string
		Loses             bool     `json:"loses"`
		Why               []string `json:"why"`
		Elsewhere         []string `json:"elsewhere"`
		ServingAfter      int      `json:"servingAfter"`
		LoadBalancerCheck *struct {
			Seconds float64 `json:"seconds"`
		} `json:"loadBalancerCheck"`
	} `json:"services"`
}

// TestPluginDrainCheck: drain-check against the controller cluster's real scheduler, controllers and kube-proxy.
// A Deployment pinned to node-1 behind a LoadBalancer: draining node-1 leaves no endpoint anywhere and its pods
// nowhere to go — exit 1 naming the Service. The same kind of Service backed by a Deployment spread over every
// worker with a PodDisruptionBudget (maxUnavailable 1): exit 0, two nodes serving after, the load balancer's
// 30 s window read from its annotations. Then node-1 is really drained: its health check answers 503 (the load
// balancer takes it out) and the other workers serve real requests, as predicted.
func TestPluginDrainCheck(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	p := newPlugin(t, ctx, c)
	drained := c.Nodes()[0].Name

	pinned := lbService(t, c, "e2e-drain-pinned", "ledger", "192.0.2.94")
	d := deployment(pinned.Namespace, "ledger", 2, 2, appsv1.DeploymentStrategy{})
	d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: drained}
	createDeployment(t, c, d)
	waitPlacement(t, ctx, c, pinned.Namespace, "ledger", map[string]int{drained: 2})
	var rep drainReport
	eventually(t, converge, "drain-check names the pinned Service", func() error {
		r := p.run(t, ctx, "", "drain-check", drained, "-n", pinned.Namespace, "-o", "json")
		rep = drainReport{}
		if err := json.Unmarshal([]byte(r.out), &rep); err != nil || len(rep.Services) != 1 {
			return fmt.Errorf("exit %d, %v: %s%s", r.code, err, r.out, r.errOut)
		}
		s := rep.Services[0]
		if r.code != 1 || !s.Loses || s.Name != "ledger" || len(s.Elsewhere) != 0 || len(s.Why) == 0 ||
			!strings.Contains(s.Why[0], "no endpoint left anywhere") {
			return fmt.Errorf("exit %d, %+v: want 1, ledger losing its only endpoints with nowhere else to run", r.code, s)
		}
		return nil
	})
	p.run(t, ctx, "", "drain-check", drained, "-n", pinned.Namespace) // the text form, for the log

	const ns, name = "e2e-drain-spread", "orders"
	spread := lbService(t, c, ns, name, "192.0.2.95")
	createDeployment(t, c, deployment(ns, name, ctrlWorkers, 2, appsv1.DeploymentStrategy{}, hostnameSpread(name, true)))
	one := intstr.FromInt32(1)
	if _, err := c.Admin().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Admin().PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "drain-check clears the spread Service", func() error {
		r := p.run(t, ctx, "", "drain-check", drained, "-n", ns, "-o", "json")
		rep = drainReport{}
		if err := json.Unmarshal([]byte(r.out), &rep); err != nil || len(rep.Services) != 1 {
			return fmt.Errorf("exit %d, %v: %s%s", r.code, err, r.out, r.errOut)
		}
		s := rep.Services[0]
		if r.code != 0 || s.Loses || s.ServingAfter != ctrlWorkers-1 || s.LoadBalancerCheck == nil || s.LoadBalancerCheck.Seconds != 30 {
			return fmt.Errorf("exit %d, %+v: want 0, %d serving after, a 30 s load balancer window", r.code, s, ctrlWorkers-1)
		}
		return nil
	})
	p.run(t, ctx, "", "drain-check", drained, "-n", ns)

	// The drain itself (the pinned pods go Pending, as predicted): node-1's check answers 503 once its pod is
	// gone, the other workers serve.
	sh := operator(t, c)
	t.Cleanup(func() { operatorRun(t, sh, "kubectl uncordon "+drained) })
	operatorRun(t, sh, "kubectl drain "+drained+" --ignore-daemonsets --delete-emptydir-data --timeout=2m")
	want := workers(c)
	delete(want, drained)
	eventually(t, 2*time.Minute, "after the drain: "+drained+" drained by its health check, the others serve", func() error {
		code, _, err := healthCheck(ctx, c, c.Node(drained), spread)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("health check on %s: %d, want 503", drained, code)
		}
		for n := range want {
			if err := wantServedLocally(c.Request(ctx, nodePortAddr(c.Node(n), spread)), n); err != nil {
				return err
			}
		}
		return nil
	})
}
