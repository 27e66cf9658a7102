package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// These scenarios need the real kube-scheduler, kube-controller-manager and node agents: they share the
// controller cluster (controllerCluster) and each uses a namespace and node port of its own.

func deployment(ns, name string, replicas int32, grace int64, strategy appsv1.DeploymentStrategy, spread ...corev1.TopologySpreadConstraint) *appsv1.Deployment {
	tmpl := workloadPodSpec(name, grace)
	tmpl.Spec.TopologySpreadConstraints = spread
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: tmpl,
			Strategy: strategy,
		},
	}
}

func rollingUpdate(surge, unavailable int) appsv1.DeploymentStrategy {
	s, u := intstr.FromInt(surge), intstr.FromInt(unavailable)
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &s, MaxUnavailable: &u}}
}

// waitPlacement waits until the app's Ready pods per node are exactly want (nodes not in want: none) and
// returns the pods.
func waitPlacement(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string, want map[string]int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 3*time.Minute, name+" placement", func() error {
		var err error
		if pods, err = podsOf(ctx, c, ns, name); err != nil {
			return err
		}
		got := readyPerNode(pods)
		for _, n := range c.Nodes() {
			if got[n.Name] != want[n.Name] {
				return fmt.Errorf("ready pods per node %v, want %v", got, want)
			}
		}
		return nil
	})
	return pods
}

func onePerWorker(c *cluster.Cluster, k int) map[string]int {
	want := map[string]int{}
	for n := range workers(c) {
		want[n] = k
	}
	return want
}

// TestSchedulerSpreadWithoutHonor: a hard hostname spread without nodeTaintsPolicy: Honor counts the tainted
// control-plane node as an empty domain, so with one replica more than there are workers the last one stays
// Pending (the scheduler says why). The workers serve; the control-plane node, which runs kube-proxy like the
// others, blackholes the node port and its exporter says so. Adding Honor schedules the last replica.
func TestSchedulerSpreadWithoutHonor(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-spread", "spread"
	svc := localNodePortService(t, c, ns, name, 30091)
	createDeployment(t, c, deployment(ns, name, ctrlWorkers+1, 1, appsv1.DeploymentStrategy{}, hostnameSpread(name, false)))

	var pending string
	eventually(t, 3*time.Minute, "one replica per worker and one Pending", func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		got := readyPerNode(pods)
		for n := range workers(c) {
			if got[n] != 1 {
				return fmt.Errorf("ready pods per node %v, want 1 on each worker", got)
			}
		}
		var msgs []string
		for i := range pods {
			if msg, ok := unschedulable(&pods[i]); ok {
				msgs = append(msgs, pods[i].Name+": "+msg)
			}
		}
		if len(msgs) != 1 {
			return fmt.Errorf("%d pods Unschedulable, want 1: %v", len(msgs), msgs)
		}
		pending = msgs[0]
		return nil
	})
	t.Logf("the scheduler on the Pending replica: %s", pending)
	if !strings.Contains(pending, "topology spread") || !strings.Contains(pending, "untolerated taint") {
		errorf(t, "scheduler message %q does not name both the spread constraint and the (control-plane) taint", pending)
	}
	eventually(t, converge, "workers serve, the control-plane node blackholes", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	sh := operator(t, c)
	operatorRun(t, sh, `kubectl -n e2e-spread patch deploy spread --type=json -p='[{"op":"add","path":"/spec/template/spec/topologySpreadConstraints/0/nodeTaintsPolicy","value":"Honor"}]'`)
	operatorRun(t, sh, `kubectl -n e2e-spread rollout status deploy/spread --timeout=3m`)
	eventually(t, 3*time.Minute, "every replica scheduled with Honor", func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		total := 0
		for _, k := range readyPerNode(pods) {
			total += k
		}
		if total != ctrlWorkers+1 || len(pods) != ctrlWorkers+1 {
			return fmt.Errorf("%d ready of %d pods, want %d", total, len(pods), ctrlWorkers+1)
		}
		return nil
	})
	eventually(t, converge, "with Honor: workers serve, the control-plane node still blackholes", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})
}

// TestSchedulerMaxSurgeParks: one replica per worker under a hard spread that counts the tainted control-plane
// node (no Honor): a rollout with maxSurge 1 / maxUnavailable 0 parks — the surge pod has nowhere legal to go
// (the scheduler says Unschedulable, the Deployment controller reports ProgressDeadlineExceeded) — while the
// old replicas keep every worker serving, traffic and exporters alike. maxSurge 0 / maxUnavailable 1 then
// completes. A second rollout with nodeTaintsPolicy Honor shows the surge pod does fit once the empty domain
// is gone (skew 2-1 = 1 is within maxSkew), so maxSurge alone does not deadlock a maxSkew-1 spread.
func TestSchedulerMaxSurgeParks(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-surge", "surge"
	svc := localNodePortService(t, c, ns, name, 30092)
	d := deployment(ns, name, ctrlWorkers, 1, rollingUpdate(1, 0), hostnameSpread(name, false))
	deadline := int32(15)
	d.Spec.ProgressDeadlineSeconds = &deadline
	createDeployment(t, c, d)
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "before the rollout every worker serves", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	sh := operator(t, c)
	operatorRun(t, sh, `kubectl -n e2e-surge patch deploy surge --type=merge -p '{"spec":{"template":{"metadata":{"annotations":{"e2e.localtraffic.io/revision":"2"}}}}}'`)
	// While the rollout is parked, every observation must show the old replicas serving on every worker.
	var msg string
	eventually(t, 3*time.Minute, "the rollout parks", func() error {
		// A worker not serving while the rollout is parked is the bug itself, not something to wait out.
		if err := checkServing(ctx, c, svc, workers(c)); err != nil {
			fatalf(t, "while the rollout parks: %v", err)
		}
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		for i := range pods {
			if m, ok := unschedulable(&pods[i]); ok {
				msg = m
			}
		}
		if msg == "" {
			return errors.New("no surge pod reported Unschedulable yet")
		}
		dep, err := c.Admin().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range dep.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Reason == "ProgressDeadlineExceeded" {
				return nil
			}
		}
		return fmt.Errorf("deployment not yet past its progress deadline (updated %d, available %d)", dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas)
	})
	t.Logf("parked: the surge pod is Unschedulable: %s", msg)
	if err := checkServing(ctx, c, svc, workers(c)); err != nil {
		fatalf(t, "while parked: %v", err)
	}

	operatorRun(t, sh, `kubectl -n e2e-surge patch deploy surge --type=merge -p '{"spec":{"strategy":{"rollingUpdate":{"maxSurge":0,"maxUnavailable":1}}}}'`)
	operatorRun(t, sh, `kubectl -n e2e-surge rollout status deploy/surge --timeout=3m`)
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "after maxSurge 0 every worker serves", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	// The same surge with Honor: the control-plane node is no domain, the surge pod fits, the rollout ends.
	// Where the new replicas land is the scheduler's and the ReplicaSet controller's choice: the spread holds
	// while each pod is scheduled, and the old pods the rollout deletes need not be where the new ones went, so
	// a worker can end with none (seen: node-3 two, node-2 none). Whatever the placement, every node must serve
	// or drop as it holds a replica or not, traffic and exporter alike.
	operatorRun(t, sh, `kubectl -n e2e-surge patch deploy surge --type=json -p='[{"op":"add","path":"/spec/template/spec/topologySpreadConstraints/0/nodeTaintsPolicy","value":"Honor"},{"op":"replace","path":"/spec/strategy/rollingUpdate","value":{"maxSurge":1,"maxUnavailable":0}}]'`)
	operatorRun(t, sh, `kubectl -n e2e-surge rollout status deploy/surge --timeout=3m`)
	eventually(t, converge, "with Honor and maxSurge 1 the nodes with a replica serve and the others drop", func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		placed := map[string]int{}
		for i := range pods {
			if pods[i].DeletionTimestamp == nil && podReady(&pods[i]) {
				placed[pods[i].Spec.NodeName]++
			}
		}
		if total := len(pods); total != 3 {
			return fmt.Errorf("%d pods (%v ready), want the 3 of the finished rollout", total, placed)
		}
		return checkServing(ctx, c, svc, servingNodes(placed))
	})
}

// TestDrainLastReplica: kubectl drain of a node holding the Service's only replica there: the node is cordoned,
// the replica evicted; for its grace period the EndpointSlice controller lists it serving and terminating and
// kube-proxy still sends the node's traffic to it (the exporter agrees: no blackhole); once the grace period
// ends the node blackholes (traffic and exporter) until someone reacts, while the replacement runs elsewhere.
func TestDrainLastReplica(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-drain", "drain"
	const grace = 15
	svc := localNodePortService(t, c, ns, name, 30093)
	createDeployment(t, c, deployment(ns, name, ctrlWorkers, grace, appsv1.DeploymentStrategy{}, hostnameSpread(name, true)))
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "before the drain every worker serves", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	drained := c.Nodes()[1].Name
	sh := operator(t, c)
	t.Cleanup(func() { operatorRun(t, sh, "kubectl uncordon "+drained) })
	drainDone := make(chan error, 1)
	drainStart := time.Now()
	go func() {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		out, err := sh.Run(dctx, "kubectl drain "+drained+" --ignore-daemonsets --delete-emptydir-data --timeout=2m", "")
		t.Logf("$ kubectl drain %s ...\n%s", drained, strings.TrimRight(out, "\n"))
		drainDone <- err
	}()

	// During the grace period: the endpoint is serving and terminating, and the node still serves. The check
	// must hold twice, 3 s apart (past the exporter's 2 s rules cache), so the exporter's verdict is one taken
	// after the endpoint became terminating.
	var firstHeld time.Time
	eventually(t, grace*time.Second, "terminating endpoint served on "+drained, func() error {
		ep, err := endpointOn(ctx, c, svc, drained)
		if err != nil {
			return err
		}
		if ep == nil || !isTrue(ep.Conditions.Terminating) || !isTrue(ep.Conditions.Serving) || isTrue(ep.Conditions.Ready) {
			return fmt.Errorf("endpoint on %s: %+v, want serving and terminating, not ready", drained, ep)
		}
		r := c.Request(ctx, nodePortAddr(c.Node(drained), svc))
		if err := wantServedLocally(r, drained); err != nil {
			return err
		}
		if err := expectMetrics(ctx, c, drained, metricIs("localtraffic_blackhole", svcLabels(svc, drained), 0)); err != nil {
			return err
		}
		if firstHeld.IsZero() {
			firstHeld = time.Now()
		}
		if time.Since(firstHeld) < 3*time.Second {
			return errors.New("held once; checking again after the rules cache")
		}
		return nil
	})
	t.Logf("%s: terminating endpoint served and exporter says no blackhole %s after the drain started", drained, time.Since(drainStart).Round(time.Millisecond))

	// After it: the node blackholes; the other workers (one holds the replacement) serve.
	want := workers(c)
	delete(want, drained)
	eventually(t, 2*time.Minute, drained+" blackholes after the grace period", func() error {
		return checkServing(ctx, c, svc, want)
	})
	t.Logf("%s blackholed %s after the drain started (grace %ds)", drained, time.Since(drainStart).Round(time.Millisecond), grace)
	if err := <-drainDone; err != nil {
		fatalf(t, "kubectl drain: %v", err)
	}
	node, err := c.Admin().CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		errorf(t, "%s not cordoned after the drain: %v", drained, err)
	}
	pods, err := podsOf(ctx, c, ns, name)
	if err != nil {
		fatalln(t, err)
	}
	per := readyPerNode(pods)
	if per[drained] != 0 || len(pods) != ctrlWorkers {
		errorf(t, "after the drain: %v ready per node over %d pods, want %d pods, none on %s", per, len(pods), ctrlWorkers, drained)
	}
}

// endpointOn returns the Service's endpoint on node from the EndpointSlice controller's slices (nil if none).
func endpointOn(ctx context.Context, c *cluster.Cluster, svc *corev1.Service, node string) (*discoveryv1.Endpoint, error) {
	slices, err := c.Admin().DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name + "," + discoveryv1.LabelManagedBy + "=endpointslice-controller.k8s.io",
	})
	if err != nil {
		return nil, err
	}
	for _, s := range slices.Items {
		for i := range s.Endpoints {
			if ep := &s.Endpoints[i]; ep.NodeName != nil && *ep.NodeName == node {
				return ep, nil
			}
		}
	}
	return nil, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestScaleDown6To2: six replicas spread two per worker, then kubectl scale to 2 (what an HPA does at night):
// the nodes left without a replica blackhole the node port, traffic and exporter alike.
func TestScaleDown6To2(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-scale", "scale"
	svc := localNodePortService(t, c, ns, name, 30094)
	createDeployment(t, c, deployment(ns, name, 6, 1, appsv1.DeploymentStrategy{}, hostnameSpread(name, true)))
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 2))
	eventually(t, converge, "six replicas: every worker serves", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	operatorRun(t, operator(t, c), "kubectl -n e2e-scale scale deploy/scale --replicas=2")
	var per map[string]int
	eventually(t, 2*time.Minute, "two replicas left", func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		if len(pods) != 2 {
			return fmt.Errorf("%d pods, want 2", len(pods))
		}
		per = readyPerNode(pods)
		return nil
	})
	serving := servingNodes(per)
	if len(serving) == len(workers(c)) {
		fatalf(t, "2 replicas on %d workers: %v", len(serving), per)
	}
	t.Logf("after the scale-down the replicas run on %v; the other nodes blackhole", per)
	eventually(t, converge, "after the scale-down only the nodes with a replica serve", func() error {
		return checkServing(ctx, c, svc, serving)
	})
}

// TestDaemonSetRollingUpdate: the structural fix, a DaemonSet: every worker serves (the control-plane node,
// which the DaemonSet does not tolerate, blackholes). Through a rolling update with maxUnavailable 1 the
// client probes every worker continuously: never more than one worker is without a serving endpoint at once,
// and at the end every worker serves the new revision, the exporter agreeing.
func TestDaemonSetRollingUpdate(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-ds", "ds"
	svc := localNodePortService(t, c, ns, name, 30095)
	one := intstr.FromInt(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: workloadPodSpec(name, 5),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one}},
		},
	}
	if _, err := c.Admin().AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { deleteWorkload(t, c, ns, name, "daemonsets") })
	waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	eventually(t, converge, "every worker serves, the control-plane node blackholes", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})

	sh := operator(t, c)
	operatorRun(t, sh, `kubectl -n e2e-ds patch ds ds --type=merge -p '{"spec":{"template":{"metadata":{"annotations":{"e2e.localtraffic.io/revision":"2"}}}}}'`)
	rollout := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		_, err := sh.Run(rctx, "kubectl -n e2e-ds rollout status ds/ds --timeout=3m", "")
		rollout <- err
	}()
	// Probe every worker in rounds until the rollout ends; count rounds with more than one worker down and
	// note each worker's down rounds (the gap between its old pod's grace period and its new pod's readiness).
	down := map[string]int{}
	verdicts := map[string]map[cluster.Verdict]int{}
	firstDown, lastDown := map[string]time.Time{}, map[string]time.Time{}
	rounds, overlapping := 0, 0
	var rolloutErr error
probe:
	for {
		select {
		case rolloutErr = <-rollout:
			break probe
		default:
		}
		rounds++
		var out []string
		for n := range workers(c) {
			if r := c.Request(ctx, nodePortAddr(c.Node(n), svc)); wantServedLocally(r, n) != nil {
				out = append(out, n)
				down[n]++
				if verdicts[n] == nil {
					verdicts[n] = map[cluster.Verdict]int{}
					firstDown[n] = time.Now()
				}
				verdicts[n][r.Verdict]++
				lastDown[n] = time.Now()
			}
		}
		if len(out) > 1 {
			overlapping++
			errorf(t, "round %d: %v all without a serving endpoint at once (maxUnavailable 1)", rounds, out)
		}
	}
	if rolloutErr != nil {
		fatalf(t, "rollout status: %v", rolloutErr)
	}
	t.Logf("rolling update: %d probe rounds over the workers, rounds with a worker down per worker: %v", rounds, down)
	for n, v := range verdicts {
		t.Logf("  %s not served for about %s (first to last failed probe), verdicts %v", n, lastDown[n].Sub(firstDown[n]).Round(time.Millisecond), v)
	}
	pods := waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
	for _, p := range pods {
		if p.Annotations["e2e.localtraffic.io/revision"] != "2" {
			errorf(t, "pod %s on %s is of the old revision", p.Name, p.Spec.NodeName)
		}
	}
	eventually(t, converge, "after the update every worker serves", func() error {
		return checkServing(ctx, c, svc, workers(c))
	})
}
