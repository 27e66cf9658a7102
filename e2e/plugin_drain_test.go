package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// lbService creates a Local LoadBalancer Service selecting app=name, its load balancer an AWS NLB as its
// annotations say (health check every 5 s, out after 2 failures and back after 2 answers: the shortest window
// an NLB target group accepts), its ingress IP set as the controller would, and deletes it at the end. The
// EndpointSlice controller writes its slices.
func lbService(t *testing.T, c *cluster.Cluster, ns, name, ip string) *corev1.Service {
	t.Helper()
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	svc := cluster.NewService(ns, name, corev1.ServiceTypeLoadBalancer)
	svc.Annotations = map[string]string{
		"service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
		annAWSInterval:  "5",
		annAWSUnhealthy: "2",
		annAWSHealthy:   "2",
	}
	created, err := c.Admin().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "create service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = c.Admin().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if err := c.SetLoadBalancerIngress(ctx, ns, name, corev1.LoadBalancerIngress{IP: ip}); err != nil {
		fatalln(t, err)
	}
	return created
}

// The AWS NLB health check annotations: drain-check reads its load balancer window from the first two, the
// test's load balancer (healthCheckingLB) checks by all three.
const (
	annAWSInterval  = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval"
	annAWSUnhealthy = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold"
	annAWSHealthy   = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold"
)

// drainReport is the part of `drain-check -o json` the test reads.
type drainReport struct {
	Loses    bool           `json:"loses"`
	Services []drainService `json:"services"`
}

type drainService struct {
	Namespace, Name   string
	Loses             bool     `json:"loses"`
	Why               []string `json:"why"`
	Elsewhere         []string `json:"elsewhere"`
	ServingAfter      int      `json:"servingAfter"`
	LoadBalancerCheck *struct {
		Seconds float64 `json:"seconds"`
	} `json:"loadBalancerCheck"`
}

// TestPluginDrainCheck: drain-check against the controller cluster's real scheduler, controllers and kube-proxy,
// then a real drain with real traffic through each Service's load balancer. A Deployment pinned to node-1 behind
// a LoadBalancer: draining node-1 leaves no endpoint anywhere and its pods nowhere to go — exit 1 naming the
// Service. The same kind of Service backed by a Deployment spread over every worker with a PodDisruptionBudget
// (maxUnavailable 1): no loss, two nodes serving after, the load balancer's 10 s window read from its
// annotations; a NodePort Service on the same pods loses (node-1 still receives its clients), so that namespace
// exits 1. Then `kubectl drain node-1` (cordon, then evictions through the API server, which honours the budget)
// while a health-checking load balancer in front of the workers forwards a client's connections for each
// LoadBalancer Service (healthCheckingLB) and another client sends to every worker's NodePort, and the traffic is
// held to what each prediction said (wantDrainAsPredicted).
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
	var pinnedPrediction, spreadPrediction, nodePortPrediction drainService
	eventually(t, converge, "drain-check names the pinned Service", func() error {
		r := p.run(t, ctx, "", "drain-check", drained, "-n", pinned.Namespace, "-o", "json")
		var rep drainReport
		if err := json.Unmarshal([]byte(r.out), &rep); err != nil || len(rep.Services) != 1 {
			return fmt.Errorf("exit %d, %v: %s%s", r.code, err, r.out, r.errOut)
		}
		s := rep.Services[0]
		if r.code != 1 || !s.Loses || s.Name != "ledger" || len(s.Elsewhere) != 0 || len(s.Why) == 0 ||
			!strings.Contains(s.Why[0], "no endpoint left anywhere") {
			return fmt.Errorf("exit %d, %+v: want 1, ledger losing its only endpoints with nowhere else to run", r.code, s)
		}
		pinnedPrediction = s
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
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The same pods behind a Local NodePort Service, whose clients send to node addresses and do not stop.
	nodePort := cluster.NewService(ns, name+"-nodeport", corev1.ServiceTypeNodePort)
	nodePort.Spec.Selector = map[string]string{"app": name}
	// Its client connects to each node in a steady rhythm, which the arrivals meter sets aside as a TCP health
	// checker's cadence; declared, nothing probes the NodePort and every arrival is a client's (docs/rotation.md).
	nodePort.Annotations = map[string]string{"localtraffic.io/health-check": "none"}
	nodePort, err := c.Admin().CoreV1().Services(ns).Create(ctx, nodePort, metav1.CreateOptions{})
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().CoreV1().Services(ns).Delete(context.Background(), nodePort.Name, metav1.DeleteOptions{})
	})
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "drain-check clears the spread Service and names its NodePort twin", func() error {
		r := p.run(t, ctx, "", "drain-check", drained, "-n", ns, "-o", "json")
		var rep drainReport
		if err := json.Unmarshal([]byte(r.out), &rep); err != nil || len(rep.Services) != 2 {
			return fmt.Errorf("exit %d, %v: %s%s", r.code, err, r.out, r.errOut)
		}
		for _, s := range rep.Services {
			switch s.Name {
			case name:
				if s.Loses || s.ServingAfter != ctrlWorkers-1 || s.LoadBalancerCheck == nil || s.LoadBalancerCheck.Seconds != 10 {
					return fmt.Errorf("%+v: want no loss, %d serving after, a 10 s load balancer window", s, ctrlWorkers-1)
				}
				spreadPrediction = s
			case nodePort.Name:
				if !s.Loses || s.ServingAfter != ctrlWorkers-1 || len(s.Why) != 1 || !strings.HasPrefix(s.Why[0], drained+" would drop NodePort") {
					return fmt.Errorf("%+v: want %s dropping its NodePort clients, %d serving after", s, drained, ctrlWorkers-1)
				}
				nodePortPrediction = s
			}
		}
		if r.code != 1 || spreadPrediction.Name == "" || nodePortPrediction.Name == "" {
			return fmt.Errorf("exit %d, %+v: want 1, %s and %s", r.code, rep, name, nodePort.Name)
		}
		return nil
	})
	p.run(t, ctx, "", "drain-check", drained, "-n", ns)

	// Each LoadBalancer Service's load balancer forwards a client's connections to the workers in service;
	// before the drain the pinned Service's only target in service is node-1, the spread one's every worker. The
	// NodePort Service's client sends to every worker's address. drain-check reads the API, which may be ahead
	// of kube-proxy: the load balancers start once each worker's health check answers as the placement says, as
	// on a cluster that has been running.
	waitHealthChecks(t, ctx, c, pinned, map[string]bool{drained: true})
	waitHealthChecks(t, ctx, c, spread, workers(c))
	eventually(t, converge, nodePort.Name+" served on every worker", func() error {
		for n := range workers(c) {
			if err := wantServedLocally(c.Request(ctx, nodePortAddr(c.Node(n), nodePort)), n); err != nil {
				return err
			}
		}
		return nil
	})
	drains := []*drainUnderTraffic{
		{svc: pinned, app: "ledger", replicas: 2, predicted: pinnedPrediction, lb: startLB(t, c, pinned, "192.0.2.94")},
		{svc: spread, app: name, replicas: ctrlWorkers, predicted: spreadPrediction, lb: startLB(t, c, spread, "192.0.2.95")},
		{svc: nodePort, app: name, replicas: ctrlWorkers, predicted: nodePortPrediction, lb: startNodePortClient(t, c, nodePort)},
	}
	eventually(t, converge, "before the drain: each node in service serves through the load balancer", func() error {
		var errs []error
		for _, dt := range drains {
			errs = append(errs, dt.lb.servedByEveryTargetInService())
		}
		return errors.Join(errs...)
	})

	sh := operator(t, c)
	t.Cleanup(func() { operatorRun(t, sh, "kubectl uncordon "+drained) })
	drainStart := time.Now()
	operatorRun(t, sh, "kubectl drain "+drained+" --ignore-daemonsets --delete-emptydir-data --timeout=2m")
	// Each Service settles in its own time (its load balancer's window, kube-proxy's sync): waited for side by
	// side, then the clients' connections since.
	var wg sync.WaitGroup
	for _, dt := range drains {
		dt.drainStart = drainStart
		wg.Add(1)
		go func() {
			defer wg.Done()
			dt.waitSettled(t, ctx, c, drained)
		}()
	}
	wg.Wait()
	eventually(t, converge, "after the drain settled: the clients keep connecting", func() error {
		for _, dt := range drains {
			if n := len(dt.lb.requestsSince(dt.settled)); n < afterSettled {
				return fmt.Errorf("%s/%s: %d connections since it settled, want %d", dt.svc.Namespace, dt.svc.Name, n, afterSettled)
			}
		}
		return nil
	})
	for _, dt := range drains {
		wantDrainAsPredicted(t, ctx, c, dt, drained)
	}
}

// waitHealthChecks waits until the Service's health check node port answers 200 on the workers in serving and
// 503 on the others.
func waitHealthChecks(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service, serving map[string]bool) {
	t.Helper()
	eventually(t, converge, svc.Name+"'s health checks answer as placed", func() error {
		for n := range workers(c) {
			want := http.StatusServiceUnavailable
			if serving[n] {
				want = http.StatusOK
			}
			if code, _, err := healthCheck(ctx, c, c.Node(n), svc); err != nil || code != want {
				return fmt.Errorf("health check on %s: %d %v, want %d", n, code, err, want)
			}
		}
		return nil
	})
}

// drainUnderTraffic is one Service through the drain: drain-check's prediction for it and its client (through
// its load balancer, or to the node addresses).
type drainUnderTraffic struct {
	svc        *corev1.Service
	app        string
	replicas   int
	predicted  drainService
	lb         *healthCheckingLB
	drainStart time.Time
	// settled is when the cluster stood as the drain leaves it: for a Service that keeps serving, the load
	// balancer took the drained node out and the evicted pods run again elsewhere; for one that loses on nodes
	// that still receive it, kube-proxy's drop rule is in place there and the evicted pods run elsewhere; for
	// one left without endpoints, every node's kube-proxy has none of it left.
	settled time.Time
}

// afterSettled is how many connections the client opens once the drain has settled, to hold them to the
// prediction.
const afterSettled = 8

// waitSettled waits until the drain has settled for the Service as its prediction says it will. A Service
// predicted to keep serving whose evicted pods never run again or whose load balancer is left with nothing in
// service, or one predicted to lose that keeps an endpoint somewhere, fails here; the traffic is still held to
// the prediction after, for the record. It may run beside the other Services' (it fails with Errorf only).
func (dt *drainUnderTraffic) waitSettled(t *testing.T, ctx context.Context, c *cluster.Cluster, drained string) {
	t.Helper()
	what := fmt.Sprintf("%s/%s after the drain", dt.svc.Namespace, dt.svc.Name)
	err := cluster.Eventually(ctx, converge, 250*time.Millisecond, func() error {
		if dt.predicted.Loses && dt.predicted.ServingAfter > 0 {
			// Nodes that drop the Service's traffic once their pods are gone: kube-proxy's drop rule there, as
			// the node's exporter reads it, and the evicted pods replaced.
			for n := range droppers(dt.predicted) {
				if err := expectMetrics(ctx, c, n, metricIs("localtraffic_rules_drop", portLabels(dt.svc, n), 1)); err != nil {
					return fmt.Errorf("kube-proxy on %s: %w", n, err)
				}
			}
			return dt.replaced(ctx, c, drained)
		}
		if dt.predicted.Loses {
			for _, n := range c.Nodes() {
				if code, hc, err := healthCheck(ctx, c, n, dt.svc); err != nil || code != http.StatusServiceUnavailable || hc.LocalEndpoints != 0 {
					return fmt.Errorf("kube-proxy on %s: health check %d %+v %v, want 503 with no local endpoint", n.Name, code, hc, err)
				}
			}
			eps, err := c.Admin().DiscoveryV1().EndpointSlices(dt.svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + dt.svc.Name})
			if err != nil {
				return err
			}
			for _, s := range eps.Items {
				if len(s.Endpoints) > 0 {
					return fmt.Errorf("EndpointSlice %s still lists %d endpoints", s.Name, len(s.Endpoints))
				}
			}
			// The health check answers 503 as soon as no local endpoint is ready, while a terminating one still
			// keeps the drop rule; the reject comes with kube-proxy's sync of the emptied slice.
			for _, n := range c.Nodes() {
				if r := c.Request(ctx, nodePortAddr(n, dt.svc)); r.Verdict != cluster.Refused {
					return fmt.Errorf("kube-proxy on %s: NodePort %s, want refused", n.Name, r)
				}
			}
			return nil
		}
		if in := dt.lb.inServiceNow(); in[drained] || len(in) != len(dt.lb.targets)-1 {
			return fmt.Errorf("targets in service: %v, want every worker but %s", in, drained)
		}
		return dt.replaced(ctx, c, drained)
	})
	if err != nil {
		errorf(t, "%s, as drain-check predicted (loses %v): %v", what, dt.predicted.Loses, err)
	}
	dt.settled = time.Now()
}

// replaced: the Service's Deployment has all its replicas ready again, none on the drained node.
func (dt *drainUnderTraffic) replaced(ctx context.Context, c *cluster.Cluster, drained string) error {
	pods, err := podsOf(ctx, c, dt.svc.Namespace, dt.app)
	if err != nil {
		return err
	}
	perNode, total := readyPerNode(pods), 0
	for _, k := range perNode {
		total += k
	}
	if perNode[drained] != 0 || total != dt.replicas {
		return fmt.Errorf("ready pods per node %v, want %d on nodes other than %s", perNode, dt.replicas, drained)
	}
	return nil
}

// droppers are the nodes drain-check says will drop the Service's traffic after the drain ("NODE would drop …").
func droppers(s drainService) map[string]bool {
	res := map[string]bool{}
	for _, why := range s.Why {
		if n, _, ok := strings.Cut(why, " would drop "); ok {
			res[n] = true
		}
	}
	return res
}

// wantDrainAsPredicted holds what the client saw through the load balancer before, during and after the drain
// to drain-check's prediction for the Service.
//
// Predicted to keep serving (exit 0): every connection to a node other than the drained one is served by a pod
// on that node, before, during and after the drain; connections to the drained node are served until the drain
// and may be lost only while its health check fails and the load balancer has not yet taken it out — mostly as
// drops (timeouts: kube-proxy drops a Local Service's traffic on a node without a local endpoint while others
// have one), refused when one reaches the node between its pod's stop and kube-proxy's next sync, sent to the
// gone pod's address. The load balancer takes a target out at the unhealthy-threshold-th failed probe, so less
// than the predicted window (interval × unhealthy threshold) after the check started failing, and the node drops
// nothing before then (its pod serves while it terminates; the check fails from the moment the pod is not ready).
// Losses must fall within the predicted window, a second allowed for probing and kube-proxy's sync, before the
// load balancer took the node out. After the drain settled every connection is served, and the exporters say
// what the load balancer did: the drained node is out of rotation, and no node blackholes the Service.
//
// Predicted to lose because nodes that still receive the Service's traffic drop it (exit 1: a NodePort's
// clients keep using the drained node's address): after the drain settled every connection to those nodes
// times out (dropped, not refused), every connection to the others is served by a pod on that node throughout,
// and the exporter on each dropping node pages the blackhole with reason traffic_lost (the client's connections
// arrive there), the others none.
//
// Predicted to lose, no endpoint left anywhere (exit 1): connections are served by the drained node before the
// drain; once no kube-proxy has an endpoint left every connection is rejected (refused at once, not a timeout)
// wherever the load balancer sends it, every node's NodePort rejects too, the evicted pods find no node (the
// scheduler says Unschedulable), and no exporter pages a node's blackhole for it: it is an outage, rejected on
// every node, not one node's drop.
func wantDrainAsPredicted(t *testing.T, ctx context.Context, c *cluster.Cluster, dt *drainUnderTraffic, drained string) {
	t.Helper()
	defer dt.lb.stop()
	reqs, changes := dt.lb.history()
	key := dt.svc.Namespace + "/" + dt.svc.Name
	t.Logf("%s, what its client saw (drain at %s, settled at %s; load balancer targets in/out %v):\n%s", key,
		dt.drainStart.Format("15:04:05.000"), dt.settled.Format("15:04:05.000"), changes, formatLBRequests(reqs))
	var errs []error
	before, after := 0, 0
	for _, r := range reqs {
		switch {
		case r.at.Before(dt.drainStart):
			before++
			if err := wantServedLocally(r.res, r.node); err != nil {
				errs = append(errs, fmt.Errorf("%s before the drain: %w", r.at.Format("15:04:05.000"), err))
			}
		case r.at.After(dt.settled):
			after++
		}
	}
	if before == 0 || after < afterSettled {
		errs = append(errs, fmt.Errorf("%d connections before the drain and %d after it settled, want some and %d", before, after, afterSettled))
	}
	switch {
	case !dt.predicted.Loses:
		window := time.Second
		if dt.predicted.LoadBalancerCheck == nil {
			errs = append(errs, errors.New("no load balancer window predicted: nothing takes the drained node out"))
		} else {
			window += time.Duration(dt.predicted.LoadBalancerCheck.Seconds * float64(time.Second))
		}
		out, ok := tookOut(changes, drained)
		if !ok {
			errs = append(errs, fmt.Errorf("the load balancer never took %s out", drained))
		}
		if len(changes) != 1 {
			errs = append(errs, fmt.Errorf("target changes %v, want only %s taken out", changes, drained))
		}
		lost := map[cluster.Verdict]int{}
		for _, r := range reqs {
			if r.at.Before(dt.drainStart) {
				continue
			}
			err := wantServedLocally(r.res, r.node)
			if err == nil {
				continue
			}
			if r.node == drained && ok && !r.at.Before(out.Add(-window)) && !r.at.After(out) {
				lost[r.res.Verdict]++ // lost while the load balancer, as predicted, still sent to the drained node
				continue
			}
			allowed := "never taken out: no loss allowed"
			if ok {
				allowed = fmt.Sprintf("taken out at %s, loss allowed from %s", out.Format("15:04:05.000"), out.Add(-window).Format("15:04:05.000"))
			}
			errs = append(errs, fmt.Errorf("%s, during or after the drain (%s %s): %w", r.at.Format("15:04:05.000"), drained, allowed, err))
		}
		t.Logf("%s: connections lost on %s within the load balancer window %v, none elsewhere", key, drained, lost)
		for _, n := range dt.lb.targets {
			checks := []func(cluster.Metrics) error{metricIs("localtraffic_blackhole", svcLabels(dt.svc, n), 0)}
			if n == drained {
				checks = append(checks, metricIs("localtraffic_in_rotation", svcLabels(dt.svc, n), 0))
			}
			if err := expectMetrics(ctx, c, n, checks...); err != nil {
				errs = append(errs, fmt.Errorf("exporter on %s: %w", n, err))
			}
		}
	case dt.predicted.ServingAfter > 0:
		drop, reached := droppers(dt.predicted), map[string]int{}
		for _, r := range reqs {
			if drop[r.node] && r.at.After(dt.settled) {
				reached[r.node]++
			}
			switch {
			case r.at.Before(dt.drainStart):
			case !drop[r.node]:
				if err := wantServedLocally(r.res, r.node); err != nil {
					errs = append(errs, fmt.Errorf("%s, during or after the drain: %w", r.at.Format("15:04:05.000"), err))
				}
			case r.at.After(dt.settled) && r.res.Verdict != cluster.Blackhole:
				errs = append(errs, fmt.Errorf("%s via %s, after its drop rule was in place: got %s, want blackhole", r.at.Format("15:04:05.000"), r.node, r.res))
			}
		}
		for n := range drop {
			if reached[n] == 0 {
				errs = append(errs, fmt.Errorf("no connection reached %s after the drain: nothing there to drop", n))
			}
		}
		for _, n := range dt.lb.targets {
			checks := []func(cluster.Metrics) error{metricIs("localtraffic_blackhole", svcLabels(dt.svc, n), 0)}
			if drop[n] {
				checks = []func(cluster.Metrics) error{metricIs("localtraffic_blackhole", svcLabels(dt.svc, n), 1),
					metricIs("localtraffic_blackhole_reason", reasonLabels(dt.svc, n, "traffic_lost"), 1)}
			}
			// The client keeps sending meanwhile: the exporter pages once the arrivals meter has seen it.
			if err := cluster.Eventually(ctx, converge, 250*time.Millisecond, func() error { return expectMetrics(ctx, c, n, checks...) }); err != nil {
				errs = append(errs, fmt.Errorf("exporter on %s: %w", n, err))
			}
		}
	case dt.predicted.ServingAfter == 0:
		for _, r := range reqs {
			if r.at.After(dt.settled) && r.res.Verdict != cluster.Refused {
				errs = append(errs, fmt.Errorf("%s via %s, after every endpoint was gone: got %s, want refused", r.at.Format("15:04:05.000"), r.node, r.res))
			}
		}
		for _, n := range c.Nodes() {
			if r := c.Request(ctx, nodePortAddr(n, dt.svc)); r.Verdict != cluster.Refused {
				errs = append(errs, fmt.Errorf("NodePort on %s: got %s, want refused", n.Name, r))
			}
			if err := expectMetrics(ctx, c, n.Name, metricIs("localtraffic_blackhole", svcLabels(dt.svc, n.Name), 0)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
			}
		}
		pods, err := podsOf(ctx, c, dt.svc.Namespace, dt.app)
		if err != nil {
			fatalln(t, err)
		}
		for i := range pods {
			if msg, ok := unschedulable(&pods[i]); !ok || pods[i].Spec.NodeName != "" {
				errs = append(errs, fmt.Errorf("pod %s on %q, want Pending and Unschedulable (%q)", pods[i].Name, pods[i].Spec.NodeName, msg))
			}
		}
		if len(pods) != dt.replicas {
			errs = append(errs, fmt.Errorf("%d pods, want %d replacements pending", len(pods), dt.replicas))
		}
	}
	if len(errs) > 12 {
		errs = append(errs[:12], fmt.Errorf("… and %d more", len(errs)-12))
	}
	if err := errors.Join(errs...); err != nil {
		errorf(t, "%s: the drain did not go as drain-check predicted (loses %v, %d serving after):\n%v", key, dt.predicted.Loses, dt.predicted.ServingAfter, err)
	}
}

// lbRequest is one connection the load balancer forwarded: when the client opened it, the node it went to, and
// what the client got.
type lbRequest struct {
	at   time.Time
	node string
	res  cluster.Result
}

// lbChange is a target entering or leaving service.
type lbChange struct {
	at        time.Time
	node      string
	inService bool
}

func (ch lbChange) String() string {
	state := "out"
	if ch.inService {
		state = "in"
	}
	return fmt.Sprintf("%s %s at %s", ch.node, state, ch.at.Format("15:04:05.000"))
}

// healthCheckingLB is a LoadBalancer Service's load balancer as a cloud's network load balancer with node
// targets is one: every interval it probes each worker's healthCheckNodePort from outside the cluster, takes a
// target out of service after `unhealthy` failed probes in a row and puts it back after `healthy` answered ones,
// and sends each new client connection to the next target in service (round robin) — to any target when none is
// (it fails open, as an NLB does). The interval and thresholds are the Service's own annotations, the ones
// drain-check reads its window from. Its client opens one connection after another and logs each with the
// target it went to. Targets start in the state of their first probe, as on a load balancer that has been
// running. Without an ip (startNodePortClient) there is no load balancer: the client sends to each worker's
// NodePort in turn and never stops, as clients of node addresses do.
type healthCheckingLB struct {
	c                  *cluster.Cluster
	svc                *corev1.Service
	ip                 string
	interval           time.Duration
	unhealthy, healthy int
	targets            []string
	stop               func()

	mu        sync.Mutex
	inService map[string]bool
	streak    map[string]int // probes in a row that disagree with the target's state
	changes   []lbChange
	requests  []lbRequest
	// checks is every health check it made: when it ended, of which target, whether it answered 200.
	checks []lbCheck
	// src is the client address its checks come from ("": the client's default, which the tests' own probes
	// share): a load balancer's checkers have addresses of their own.
	src string
}

// lbCheck is one health check of a target: sent when it began (its SYN), at when it ended.
type lbCheck struct {
	sent, at time.Time
	node     string
	ok       bool
}

// lbClientPause is the client's pause between connections: a few a second, so that each node's share of them
// shows in a load balancer window of seconds.
const lbClientPause = 150 * time.Millisecond

func startLB(t *testing.T, c *cluster.Cluster, svc *corev1.Service, ip string) *healthCheckingLB {
	t.Helper()
	atoi := func(key string) int {
		n, err := strconv.Atoi(svc.Annotations[key])
		if err != nil || n <= 0 {
			fatalf(t, "%s/%s: annotation %s=%q: want a positive number", svc.Namespace, svc.Name, key, svc.Annotations[key])
		}
		return n
	}
	lb := &healthCheckingLB{c: c, svc: svc, ip: ip, interval: time.Duration(atoi(annAWSInterval)) * time.Second,
		unhealthy: atoi(annAWSUnhealthy), healthy: atoi(annAWSHealthy)}
	lb.start(t)
	return lb
}

// startNodePortClient starts a client of the Service's NodePort on every worker's address (healthCheckingLB
// without a load balancer).
func startNodePortClient(t *testing.T, c *cluster.Cluster, svc *corev1.Service) *healthCheckingLB {
	t.Helper()
	lb := &healthCheckingLB{c: c, svc: svc}
	lb.start(t)
	return lb
}

func (lb *healthCheckingLB) start(t *testing.T) {
	c, svc, ip := lb.c, lb.svc, lb.ip
	lb.inService, lb.streak = map[string]bool{}, map[string]int{}
	for n := range workers(c) {
		lb.targets = append(lb.targets, n)
	}
	sort.Strings(lb.targets)
	ctx, cancel := context.WithCancel(context.Background())
	for _, n := range lb.targets {
		lb.inService[n] = ip == "" || lb.probe(ctx, n)
	}
	var wg sync.WaitGroup
	if ip != "" {
		wg.Add(1)
		go lb.probeEvery(ctx, &wg)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			node, at := lb.pick(i), time.Now()
			var res cluster.Result
			if ip == "" {
				res = c.Request(ctx, nodePortAddr(c.Node(node), svc))
			} else {
				res = c.RequestVia(ctx, node, cluster.HostPort(ip, svc.Spec.Ports[0].Port))
			}
			if ctx.Err() != nil {
				return
			}
			lb.mu.Lock()
			lb.requests = append(lb.requests, lbRequest{at: at, node: node, res: res})
			lb.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(lbClientPause):
			}
		}
	}()
	lb.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	t.Cleanup(lb.stop)
	if ip != "" {
		t.Cleanup(func() { _ = c.Unroute(context.Background(), ip) })
	}
}

// probeEvery probes every target each interval until ctx ends.
func (lb *healthCheckingLB) probeEvery(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(lb.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, n := range lb.targets {
			sent := time.Now()
			ok := lb.probe(ctx, n)
			if ctx.Err() != nil {
				return
			}
			lb.observe(n, ok, sent, time.Now())
		}
	}
}

// probe asks kube-proxy's health check node port on node, as the load balancer does: in service on 200 only.
func (lb *healthCheckingLB) probe(ctx context.Context, node string) bool {
	if lb.src != "" {
		r := cluster.HTTPGet(ctx, netns.Dialer{NS: lb.c.ClientNS, Timeout: cluster.ConnectTimeout, Local: lb.src},
			fmt.Sprintf("http://%s:%d/", lb.c.Node(node).IP, lb.svc.Spec.HealthCheckNodePort))
		return r.Verdict == cluster.OK && r.Status == http.StatusOK
	}
	code, _, err := healthCheck(ctx, lb.c, lb.c.Node(node), lb.svc)
	return err == nil && code == http.StatusOK
}

// observe takes a check of node sent at sent that ended at at.
func (lb *healthCheckingLB) observe(node string, ok bool, sent, at time.Time) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.checks = append(lb.checks, lbCheck{sent: sent, at: at, node: node, ok: ok})
	if ok == lb.inService[node] {
		lb.streak[node] = 0
		return
	}
	lb.streak[node]++
	need := lb.unhealthy
	if ok {
		need = lb.healthy
	}
	if lb.streak[node] >= need {
		lb.inService[node], lb.streak[node] = ok, 0
		lb.changes = append(lb.changes, lbChange{at: at, node: node, inService: ok})
	}
}

// pick is the target of the i-th connection.
func (lb *healthCheckingLB) pick(i int) string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var in []string
	for _, n := range lb.targets {
		if lb.inService[n] {
			in = append(in, n)
		}
	}
	if len(in) == 0 {
		in = lb.targets
	}
	return in[i%len(in)]
}

func (lb *healthCheckingLB) inServiceNow() map[string]bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	res := map[string]bool{}
	for n, in := range lb.inService {
		if in {
			res[n] = true
		}
	}
	return res
}

func (lb *healthCheckingLB) history() ([]lbRequest, []lbChange) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return slices.Clone(lb.requests), slices.Clone(lb.changes)
}

func (lb *healthCheckingLB) requestsSince(at time.Time) []lbRequest {
	reqs, _ := lb.history()
	var res []lbRequest
	for _, r := range reqs {
		if r.at.After(at) {
			res = append(res, r)
		}
	}
	return res
}

// tookOut is when the load balancer last took node out of service.
func tookOut(changes []lbChange, node string) (time.Time, bool) {
	var at time.Time
	found := false
	for _, ch := range changes {
		if ch.node == node && !ch.inService {
			at, found = ch.at, true
		}
	}
	return at, found
}

// servedByEveryTargetInService: at least one connection served by a pod on each target in service, and some
// target in service.
func (lb *healthCheckingLB) servedByEveryTargetInService() error {
	in := lb.inServiceNow()
	if len(in) == 0 {
		return fmt.Errorf("%s: no target in service", lb.ip)
	}
	reqs, _ := lb.history()
	for n := range in {
		if !slices.ContainsFunc(reqs, func(r lbRequest) bool { return r.node == n && wantServedLocally(r.res, n) == nil }) {
			return fmt.Errorf("%s: no connection served on %s yet (targets in service %v)", lb.ip, n, in)
		}
	}
	return nil
}

// formatLBRequests lists the connections for the log, one line per run of the same outcome with the nodes it
// went to.
func formatLBRequests(reqs []lbRequest) string {
	var b strings.Builder
	for i := 0; i < len(reqs); {
		j, nodes := i, map[string]bool{}
		for ; j < len(reqs) && reqs[j].res.Verdict == reqs[i].res.Verdict && reqs[j].res.Status == reqs[i].res.Status; j++ {
			nodes[reqs[j].node] = true
		}
		names := slices.Sorted(maps.Keys(nodes))
		fmt.Fprintf(&b, "  %s–%s  %s ×%d via %s\n", reqs[i].at.Format("15:04:05.000"), reqs[j-1].at.Format("15:04:05.000"),
			reqs[i].res, j-i, strings.Join(names, ","))
		i = j
	}
	return b.String()
}
