package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
	"github.com/localtraffic/localtraffic-exporter/e2e/nodeagent"
)

// The exposure scenario's clocks. The load balancer checks every second and takes a target out after three
// failed checks (back after two answered): the pods' one-second grace period ends before that, so that each
// node drops for one to two seconds while still in service, short enough for CI, long enough for dozens of
// lost attempts at the client's rate. The meter's quiet period is shortened from 2 minutes so that an episode
// nothing forwards again ends, by the quiet period after its last lost attempt, within seconds.
const (
	exposureCheckEvery = time.Second
	exposureUnhealthy  = 3
	exposureHealthy    = 2
	exposureQuiet      = 6 * time.Second
	// exposureGrace is the pods' terminationGracePeriodSeconds: a pod exits when it ends (the node agent
	// reports it exited, then deletes it).
	exposureGrace = 1
	// exposureReadyAfter is the readiness probe's initialDelaySeconds: a new pod on the node is not ready before
	// the load balancer took the node out, so the node drops in between, as with a real application's start.
	exposureReadyAfter = 5
	// exposureMinReady is the Deployment's minReadySeconds: the load balancer puts a node back (two checks
	// after its new pod is ready) before the rollout deletes the next old pod.
	exposureMinReady = 4
	// exposureRate is the client's new connections per second; exposureSources its source addresses, well under
	// the 16 the meter follows per destination (a source it does not follow has its retransmissions counted as
	// new attempts). Each source reaches each node five times a second, so a retransmitted SYN (1 s after the
	// first) is among its source's latest eight ports at the node, where the meter recognises it
	// (docs/exposure.md, "Error bounds").
	exposureRate    = 100
	exposureSources = 9
	// exposureTimeout is how long the client waits for a SYN-ACK before it counts the attempt lost: longer than
	// Linux's first SYN retransmission (1 s after the SYN, TCP_TIMEOUT_INIT), shorter than its second (3 s), so
	// each lost attempt sends exactly two SYNs from one source port, and the meter must count it once.
	exposureTimeout = 1500 * time.Millisecond
	// synRetransmit is when Linux retransmits an unanswered SYN: a handshake that took longer lost its first SYN.
	synRetransmit = time.Second
	// meterLag is the arrivals meter's block timeout: its counts miss up to that much of the latest arrivals, so
	// the count the model takes when told of kube-proxy's change may miss attempts served just before it, which
	// the episode then counts (docs/exposure.md, "Error bounds"). toldGap bounds how late the model is told of
	// the change: attempts lost in between are counted as served.
	meterLag = 200 * time.Millisecond
	toldGap  = 20 * time.Millisecond
	// exposureStarved is how far behind its schedule the client may fall before its own clock is no measure of
	// a handshake's second.
	exposureStarved = 250 * time.Millisecond
	// drainSlack is how far the measured drain may lie outside the bracket of the simulator's checks: the
	// recorder dates the first 503 by the API's change (kube-proxy's sync trails it by milliseconds when it is
	// not held back by its minSyncPeriod) or its own first probe that answered 503.
	drainSlack = 250 * time.Millisecond
	// checkSteadyRun is how many checks in a row on one clock the meter is sure to have proven a checker by
	// (five: sources.go), with room for the clock it begins from.
	checkSteadyRun = 8
)

// steadyRun counts node's latest checks sent before `before` that keep one clock, each within 20 ms (the
// meter's least tolerance) of the first plus a whole number of intervals, the last check first.
func (lb *healthCheckingLB) steadyRun(node string, before time.Time) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var sent []time.Time
	for _, ch := range lb.checks {
		if ch.node == node && !ch.sent.IsZero() && ch.sent.Before(before) {
			sent = append(sent, ch.sent)
		}
	}
	n := 0
	for i := len(sent) - 1; i >= 0; i-- {
		k := sent[len(sent)-1].Sub(sent[i]).Seconds() / lb.interval.Seconds()
		if off := math.Abs(k-math.Round(k)) * lb.interval.Seconds(); off > 0.02 || math.Round(k) != float64(len(sent)-1-i) {
			break
		}
		n++
	}
	return n
}

// TestExposureMatchesLostConnections: the exposure recorder's numbers held to real packets, on the cluster with
// the real scheduler and controllers. A Local LoadBalancer Service whose load balancer (healthCheckingLB's
// checks: every worker's health check node port every second, out after three failures, back after two
// answers) sends each new connection to a worker in service at its NodePort, as a network load balancer with
// instance targets does; a Deployment of two replicas on node-1 and node-2 (one each, a hard spread that
// honours taints) whose pods exit at the end of a 1 s grace period and are ready 5 s after they start; a client
// opening 100 new connections a second from 9 source addresses, each given 1.5 s for its SYN-ACK (its SYN
// retransmitted once by the kernel), counting every attempt and every loss. The exporters of node-1 and node-2
// run with a 6 s quiet period and no state file.
//
// Rollout: the Deployment restarted (maxSurge 0, maxUnavailable 1): on each node in turn the old pod exits,
// its replacement on the same node is not ready yet, and the node drops what the load balancer still sends.
// Drain: `kubectl drain node-2`: cordoned, its pod evicted, its replacement on node-1. Each episode must carry
// its cause (rollout, drain), its attempts must be the client's lost attempts on that node (retransmissions not
// counted again), its seconds the client's failure window (first lost SYN to last) within 1 s, and the
// histogram must count one episode per node that lost. PreStop: the preStop the measured drains recommend,
// applied and rolled out again, must leave the client nothing lost and the recorders nothing counted
// (preStopRollout).
func TestExposureMatchesLostConnections(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	const ns, name = "e2e-exposure", "checkout"
	nodes := []string{"node-1", "node-2"}
	for _, n := range nodes {
		restartExporter(t, c, c.Node(n), "--arrivals.quiet-period="+exposureQuiet.String(), "--state.file=",
			"--collector.service_exposure")
	}
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	spec := cluster.NewService(ns, name, corev1.ServiceTypeLoadBalancer)
	// The load balancer asks the health check node port: every arrival at the NodePort is a client's.
	spec.Annotations = map[string]string{"localtraffic.io/health-check": "health-check-node-port"}
	svc, err := c.Admin().CoreV1().Services(ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "create service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = c.Admin().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })

	d := deployment(ns, name, 2, exposureGrace, rollingUpdate(0, 1), hostnameSpread(name, true))
	d.Spec.MinReadySeconds = exposureMinReady
	pod := &d.Spec.Template.Spec
	pod.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}}}
	pod.Containers[0].ReadinessProbe = &corev1.Probe{InitialDelaySeconds: exposureReadyAfter, PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(backendPort)}}}
	createDeployment(t, c, d)
	serving := map[string]bool{"node-1": true, "node-2": true}
	waitHealthChecksOn(t, ctx, c, svc, serving)

	lb := &healthCheckingLB{c: c, svc: svc, interval: exposureCheckEvery, unhealthy: exposureUnhealthy, healthy: exposureHealthy}
	cl := startExposureClient(t, c, lb, svc)
	eventually(t, converge, "node-1 and node-2 in rotation, counting attempts, their NodePorts reached", func() error {
		for _, n := range nodes {
			if err := expectMetrics(ctx, c, n, metricIs("localtraffic_in_rotation", svcLabels(svc, n), 1),
				metricIs("localtraffic_blackhole", svcLabels(svc, n), 0),
				metricIs("localtraffic_exposure_attempts_counted", nodeLabels(n), 1)); err != nil {
				return err
			}
			if err := cl.servedSince(n, time.Now().Add(-time.Second)); err != nil {
				return err
			}
		}
		return nil
	})

	// Rollout: what kubectl rollout restart does, a new template annotation.
	exposurePhase(t, ctx, c, cl, lb, "rollout", nodes, func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
		if _, err := c.Admin().AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			fatalln(t, err)
		}
	}, func() error {
		dep, err := c.Admin().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := dep.Status; dep.Generation != st.ObservedGeneration || st.UpdatedReplicas != 2 || st.Replicas != 2 || st.AvailableReplicas != 2 {
			return fmt.Errorf("rollout under way: %+v", st)
		}
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		if got := readyPerNode(pods); len(pods) != 2 || got["node-1"] != 1 || got["node-2"] != 1 {
			return fmt.Errorf("%d pods, ready per node %v: want one on node-1 and one on node-2", len(pods), got)
		}
		if in := lb.inServiceNow(); !in["node-1"] || !in["node-2"] {
			return fmt.Errorf("in service: %v, want node-1 and node-2", in)
		}
		return nil
	})

	// Drain: kubectl cordons the node, evicts its pod and waits until it is gone; the replacement lands on node-1.
	sh := operator(t, c)
	t.Cleanup(func() { operatorRun(t, sh, "kubectl uncordon node-2") })
	exposurePhase(t, ctx, c, cl, lb, "drain", []string{"node-2"}, func() {
		operatorRun(t, sh, "kubectl drain node-2 --ignore-daemonsets --delete-emptydir-data --timeout=2m")
	}, func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		if got := readyPerNode(pods); len(pods) != 2 || got["node-1"] != 2 {
			return fmt.Errorf("%d pods, ready per node %v: want both on node-1", len(pods), got)
		}
		return nil
	})
	// The recommendation: the preStop the measured drains ask for, applied, and the Deployment rolled again.
	preStopRollout(t, ctx, c, cl, lb, sh, d.Spec.Template.Spec.Containers[0].Name, nodes)
	if starved := cl.starvedPhases(); len(starved) > 0 {
		// Every phase ran, and its drain was held to the load balancer; the client's own counts were not.
		t.Skipf("%s", strings.Join(starved, "; "))
	}
	failed, refused := cl.failedElsewhere(nodes)
	if len(refused) > 0 {
		t.Logf("%d attempts refused by a stopped pod just before its node dropped (not an exposure): %s", len(refused), strings.Join(refused, "; "))
	}
	if len(failed) > 0 {
		errorf(t, "%d attempts failed other than by a timeout on node-1 or node-2: %s", len(failed), strings.Join(failed, "; "))
	}
}

// waitHealthChecksOn waits until the Service's health check node port answers 200 on the workers in serving and
// 503 on every other worker.
func waitHealthChecksOn(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service, serving map[string]bool) {
	t.Helper()
	eventually(t, 3*time.Minute, svc.Name+"'s health checks answer as placed", func() error {
		for n := range workers(c) {
			want := 503
			if serving[n] {
				want = 200
			}
			if code, _, err := healthCheck(ctx, c, c.Node(n), svc); err != nil || code != want {
				return fmt.Errorf("health check on %s: %d %v, want %d", n, code, err, want)
			}
		}
		return nil
	})
}

// exposureReading is what node's exporter says of one cause's episodes.
type exposureReading struct {
	seconds, attempts float64
	// otherAttempts and otherSeconds sum the other causes'.
	otherSeconds, otherAttempts float64
	episodes                    uint64
	histSum                     float64
	open                        float64
	// syns is every SYN the meter saw at the node's NodePorts (localtraffic_arrivals_total), retransmissions
	// included.
	syns float64
	// drains and drainSum are the node's measured load balancer drains (localtraffic_lb_drain_seconds);
	// svcDrains and svcDrainSum the Service's (localtraffic_service_lb_drain_seconds, absent before its first
	// episode: 0).
	drains, svcDrains     uint64
	drainSum, svcDrainSum float64
	// interval is the checker's cadence the meter proved at the health check node port
	// (localtraffic_service_lb_check_interval_seconds, hasInterval: exported); hasWindow: a configured window is
	// exported, which no annotation of the scenario's Service configures.
	interval               float64
	hasInterval, hasWindow bool
	// svcAttempts is the Service's lost attempts of the cause (localtraffic_service_exposure_attempts_total) and
	// windowAttempts the attempts that arrived in its windows of the cause, served or dropped
	// (localtraffic_service_window_attempts_total): 0 while absent.
	svcAttempts, windowAttempts float64
}

func readExposure(ctx context.Context, c *cluster.Cluster, svc *corev1.Service, node, cause string) (exposureReading, error) {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return exposureReading{}, err
	}
	var r exposureReading
	for _, name := range []string{"localtraffic_exposure_seconds_total", "localtraffic_exposure_attempts_total"} {
		series := m.Series(name, nodeLabels(node))
		if len(series) != 5 {
			return r, fmt.Errorf("%s: %d series, want one per cause (5)", name, len(series))
		}
		for _, s := range series {
			own := false
			for _, l := range s.GetLabel() {
				own = own || l.GetName() == "cause" && l.GetValue() == cause
			}
			v := s.GetCounter().GetValue()
			switch {
			case name == "localtraffic_exposure_seconds_total" && own:
				r.seconds = v
			case name == "localtraffic_exposure_seconds_total":
				r.otherSeconds += v
			case own:
				r.attempts = v
			default:
				r.otherAttempts += v
			}
		}
	}
	h := m.Series("localtraffic_exposure_episode_seconds", nodeLabels(node))
	if len(h) != 1 || h[0].GetHistogram() == nil {
		return r, fmt.Errorf("localtraffic_exposure_episode_seconds: %d series, want one histogram", len(h))
	}
	r.episodes, r.histSum = h[0].GetHistogram().GetSampleCount(), h[0].GetHistogram().GetSampleSum()
	d := m.Series("localtraffic_lb_drain_seconds", nodeLabels(node))
	if len(d) != 1 || d[0].GetHistogram() == nil {
		return r, fmt.Errorf("localtraffic_lb_drain_seconds: %d series, want one histogram", len(d))
	}
	r.drains, r.drainSum = d[0].GetHistogram().GetSampleCount(), d[0].GetHistogram().GetSampleSum()
	switch sd := m.Series("localtraffic_service_lb_drain_seconds", svcLabels(svc, node)); {
	case len(sd) == 1 && sd[0].GetHistogram() != nil:
		r.svcDrains, r.svcDrainSum = sd[0].GetHistogram().GetSampleCount(), sd[0].GetHistogram().GetSampleSum()
	case len(sd) > 0:
		return r, fmt.Errorf("localtraffic_service_lb_drain_seconds: %d series, want one histogram", len(sd))
	}
	if r.interval, r.hasInterval, err = m.Value("localtraffic_service_lb_check_interval_seconds", svcLabels(svc, node)); err != nil {
		return r, err
	}
	r.hasWindow = len(m.Series("localtraffic_service_lb_check_window_seconds", svcLabels(svc, node))) > 0
	withCause := svcLabels(svc, node)
	withCause["cause"] = cause
	if r.svcAttempts, _, err = m.Value("localtraffic_service_exposure_attempts_total", withCause); err != nil {
		return r, err
	}
	if r.windowAttempts, _, err = m.Value("localtraffic_service_window_attempts_total", withCause); err != nil {
		return r, err
	}
	open, ok, err := m.Value("localtraffic_exposure_episodes_open", nodeLabels(node))
	if err != nil || !ok {
		return r, fmt.Errorf("localtraffic_exposure_episodes_open: present %v, %v", ok, err)
	}
	r.open = open
	syns, ok, err := m.Value("localtraffic_arrivals_total", cluster.Labels{"node": node, "kind": "node_port", "ip_family": ipv4})
	if err != nil || !ok {
		return r, fmt.Errorf("localtraffic_arrivals_total: present %v, %v", ok, err)
	}
	r.syns = syns
	return r, nil
}

// exposurePhase runs act (a rollout, a drain) under the client's traffic, waits until done says the workload
// settled and each of nodes ended one more episode, and holds each node's episode to what the client lost there.
func exposurePhase(t *testing.T, ctx context.Context, c *cluster.Cluster, cl *exposureClient, lb *healthCheckingLB, cause string, nodes []string, act func(), done func() error) {
	t.Helper()
	from := time.Now()
	before := map[string]exposureReading{}
	for _, n := range nodes {
		r, err := readExposure(ctx, c, lb.svc, n, cause)
		if err != nil {
			fatalln(t, err)
		}
		before[n] = r
	}
	act()
	after := map[string]exposureReading{}
	err := cluster.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, func() error {
		if err := done(); err != nil {
			return err
		}
		for _, n := range nodes {
			r, err := readExposure(ctx, c, lb.svc, n, cause)
			if err != nil {
				return err
			}
			if r.episodes == before[n].episodes || r.open != 0 {
				return fmt.Errorf("%s: %d episodes ended, %v open: want one more ended, none open", n, r.episodes-before[n].episodes, r.open)
			}
			after[n] = r
		}
		return nil
	})
	to := time.Now()
	_, changes := lb.history()
	var moves []string
	for _, ch := range changes {
		if !ch.at.Before(from) {
			moves = append(moves, ch.String())
		}
	}
	t.Logf("%s from %s to %s; the load balancer: %s", cause, from.Format("15:04:05.000"), to.Format("15:04:05.000"), strings.Join(moves, ", "))
	if err != nil {
		for _, n := range nodes {
			lost, served := cl.between(n, from, to)
			r, rerr := readExposure(ctx, c, lb.svc, n, cause)
			t.Logf("%s: the client lost %d attempts (%s), %d served; the recorder: %+v %v (before %+v)", n, len(lost), spanOf(lost), served, r, rerr, before[n])
		}
		fatalf(t, "%s: settled, an episode ended on %s: %v", cause, strings.Join(nodes, " and "), err)
	}
	for _, n := range nodes {
		// The drain first: it does not rest on the client's handshake times, which a starved client's
		// exposureAgrees skips for.
		drainAgrees(t, cl, lb, cause, n, from, to, before[n], after[n])
		exposureAgrees(t, cl, cause, n, from, to, before[n], after[n])
		windowAgrees(t, cause, n, before[n], after[n])
	}
}

// drainAgrees holds the load balancer's drain the node's recorder measured in a phase (from, to) to the load
// balancer's configuration: checks every interval, out after unhealthy failures, so from its first 503 the node
// gets new connections for (unhealthy − 1) intervals and the phase of its first check after the 503, at most
// unhealthy intervals (with the checks' own time): within one interval of interval × unhealthy. The simulator's
// own checks bracket it closer: the 503 came between the last check that passed and the first that failed, so
// the drain is the client's last connection sent to the node before the load balancer took it out less one or
// the other, within drainSlack (the recorder dates the 503 by the API's change, which kube-proxy's sync may
// trail, or by the first probe of its own that answered 503). The per-Service histogram must have observed the
// same.
func drainAgrees(t *testing.T, cl *exposureClient, lb *healthCheckingLB, cause, node string, from, to time.Time, before, after exposureReading) {
	t.Helper()
	lb.mu.Lock()
	var lastOK, firstFail, out time.Time
	for _, ch := range lb.checks {
		if ch.node != node || !ch.at.Before(to) || !firstFail.IsZero() {
			continue
		}
		switch {
		case ch.ok:
			lastOK = ch.at // the last that passed may be before the phase began
		case !ch.at.Before(from):
			firstFail = ch.at
		}
	}
	for _, ch := range lb.changes {
		if ch.node == node && !ch.inService && !firstFail.IsZero() && !ch.at.Before(firstFail) && out.IsZero() {
			out = ch.at
		}
	}
	lb.mu.Unlock()
	var lastSent time.Time
	cl.mu.Lock()
	for _, a := range cl.attempts {
		if a.node == node && !a.at.Before(from) && a.at.Before(out) && a.at.After(lastSent) {
			lastSent = a.at
		}
	}
	cl.mu.Unlock()
	n, drain := after.drains-before.drains, after.drainSum-before.drainSum
	window := lb.interval * time.Duration(lb.unhealthy)
	t.Logf("%s on %s: load balancer drain measured %d time(s), %.3f s; configured %s × %d = %s; the simulator: last check "+
		"passed %s, first failed %s, out at %s, last connection sent before %s",
		cause, node, n, drain, lb.interval, lb.unhealthy, window, lastOK.Format("15:04:05.000"), firstFail.Format("15:04:05.000"),
		out.Format("15:04:05.000"), lastSent.Format("15:04:05.000"))
	var errs []error
	if n != 1 {
		errs = append(errs, fmt.Errorf("localtraffic_lb_drain_seconds observed %d drains, want 1", n))
	} else if math.Abs(drain-window.Seconds()) > lb.interval.Seconds() {
		errs = append(errs, fmt.Errorf("measured drain %.3f s, want within %s of the configured %s", drain, lb.interval, window))
	}
	if n == 1 && !lastOK.IsZero() && !firstFail.IsZero() && !lastSent.IsZero() {
		lo, hi := lastSent.Sub(firstFail).Seconds(), lastSent.Sub(lastOK).Seconds()
		t.Logf("%s on %s: the simulator's checks bracket the drain %.3f s to %.3f s", cause, node, lo, hi)
		if drain < lo-drainSlack.Seconds() || drain > hi+drainSlack.Seconds() {
			errs = append(errs, fmt.Errorf("measured drain %.3f s, the simulator's checks bracket it %.3f s to %.3f s (± %s)", drain, lo, hi, drainSlack))
		}
	}
	// The load balancer's checks arrive at the health check node port from one address every interval: the
	// meter proves that cadence where the checks keep a clock, and with no annotation to configure a window it
	// is what the Service exports. On a loaded machine the simulator's checks (both nodes' in turn, each after
	// the other's answer) drift off any clock by more than the meter's tolerance: it must export the interval
	// where the node's last checkSteadyRun checks before the phase ended kept one within 20 ms.
	steady := lb.steadyRun(node, to)
	t.Logf("%s on %s: the checker's interval exported %v (%.3f s); the simulator's last %d checks kept a clock within 20 ms",
		cause, node, after.hasInterval, after.interval, steady)
	switch {
	case after.hasWindow:
		errs = append(errs, fmt.Errorf("localtraffic_service_lb_check_window_seconds exported, which no annotation configures"))
	case after.hasInterval && math.Abs(after.interval-lb.interval.Seconds()) > lb.interval.Seconds()/10:
		errs = append(errs, fmt.Errorf("localtraffic_service_lb_check_interval_seconds %.3f, want the checker's %s", after.interval, lb.interval))
	case !after.hasInterval && steady >= checkSteadyRun:
		errs = append(errs, fmt.Errorf("localtraffic_service_lb_check_interval_seconds absent, though the simulator's last %d checks kept a clock", steady))
	}
	if sn, sd := after.svcDrains-before.svcDrains, after.svcDrainSum-before.svcDrainSum; sn != n || math.Abs(sd-drain) > 1e-6 {
		errs = append(errs, fmt.Errorf("localtraffic_service_lb_drain_seconds grew by %d, %.3f s; the node's by %d, %.3f s", sn, sd, n, drain))
	}
	if err := errors.Join(errs...); err != nil {
		errorf(t, "%s on %s: the measured drain disagrees with the load balancer:\n%v", cause, node, err)
	}
}

// windowAgrees holds the attempts a node counted in the Service's windows of a phase to what it lost and what
// arrived: every lost attempt arrived in a window (the success ratio never passes 1), and the window counts no
// more than the SYNs the meter saw at the node's NodePorts, retransmissions included.
func windowAgrees(t *testing.T, cause, node string, before, after exposureReading) {
	t.Helper()
	lost, window, syns := after.svcAttempts-before.svcAttempts, after.windowAttempts-before.windowAttempts, after.syns-before.syns
	t.Logf("%s on %s: the Service lost %.0f attempts, %.0f arrived in its %s windows (%.0f served), %.0f SYNs arrived",
		cause, node, lost, window, cause, window-lost, syns)
	if lost <= 0 || window < lost || window > syns {
		errorf(t, "%s on %s: window attempts grew by %.0f, lost by %.0f, SYNs by %.0f: want 0 < lost <= window <= SYNs", cause, node, window, lost, syns)
	}
}

// exposureAgrees holds one node's episode of a phase (from, to) to the client's attempts there.
func exposureAgrees(t *testing.T, cl *exposureClient, cause, node string, from, to time.Time, before, after exposureReading) {
	t.Helper()
	lost, served := cl.between(node, from, to)
	if len(lost) == 0 {
		errorf(t, "%s: the client lost no attempt on %s: nothing to measure", cause, node)
		return
	}
	first, last := lost[0], lost[len(lost)-1]
	if late := cl.lateBetween(from, to); late > exposureStarved {
		// Not held to the client's count here; the test goes on with the next phase and is skipped at its end.
		why := fmt.Sprintf("%s on %s: the client fell %s behind its schedule (the machine starved it): its own timeouts and "+
			"handshake times do not tell which SYNs the node dropped, so its count is no measure here", cause, node, late)
		t.Log(why)
		cl.mu.Lock()
		cl.starved = append(cl.starved, why)
		cl.mu.Unlock()
		return
	}
	// The recorder's bounds around the client's count: the attempts served within the meter's lag before the
	// drop may be counted, those lost within the told gap after the first loss may not. The drop came after the
	// last attempt served before the first loss, and the model was told of it no earlier: the meter's lag
	// reaches back from there (from the first loss where nothing was served before it).
	lagFrom := first
	if s := cl.lastServedBefore(node, first); !s.IsZero() {
		lagFrom = s
	}
	_, late := cl.between(node, lagFrom.Add(-meterLag), first)
	early, _ := cl.between(node, first, first.Add(toldGap))
	// The failure window runs from the first lost attempt's SYN to the last one's: its retransmission a second
	// later is no new attempt, and no later loss.
	window := last.Sub(first).Seconds()
	gotSeconds, gotAttempts := after.seconds-before.seconds, after.attempts-before.attempts
	// Every SYN the client sent the node in the phase: one per answered attempt, two per lost one (its
	// retransmission), against what the meter saw arrive.
	syns := 2*len(lost) + served
	t.Logf("%s on %s: %.0f new connections a second overall; SYNs at its NodePort: %d sent, %.0f seen\n"+
		"  %-28s %10s %10s\n  %-28s %10.3f %10.0f\n  %-28s %10.3f %10d   (first lost %s, last %s; %d served within %s before the last served)\n"+
		"  histogram: %d episode(s) ended, sum %.3f s; other causes: %.3f s, %.0f attempts",
		cause, node, float64(cl.sentBetween(from, to))/to.Sub(from).Seconds(), syns, after.syns-before.syns,
		"", "seconds", "attempts", "recorder ("+cause+")", gotSeconds, gotAttempts,
		"client (lost, SYN to SYN)", window, len(lost), first.Format("15:04:05.000"), last.Format("15:04:05.000"), late, meterLag,
		after.episodes-before.episodes, after.histSum-before.histSum, after.otherSeconds-before.otherSeconds, after.otherAttempts-before.otherAttempts)

	var errs []error
	if n := after.episodes - before.episodes; n != 1 {
		errs = append(errs, fmt.Errorf("the histogram counted %d episodes, want 1", n))
	}
	if after.otherSeconds != before.otherSeconds || after.otherAttempts != before.otherAttempts {
		errs = append(errs, fmt.Errorf("other causes moved: %.3f s, %.0f attempts, want the episode's cause %s",
			after.otherSeconds-before.otherSeconds, after.otherAttempts-before.otherAttempts, cause))
	}
	lo, hi := len(lost)-len(early), len(lost)+late
	if gotAttempts < float64(lo) || gotAttempts > float64(hi) {
		errs = append(errs, fmt.Errorf("%.0f attempts recorded, the client lost %d: want %d to %d (%d lost within %s of the first loss, %d served from %s before the last served attempt)",
			gotAttempts, len(lost), lo, hi, len(early), toldGap, late, meterLag))
	}
	if math.Abs(gotSeconds-window) > time.Second.Seconds() {
		errs = append(errs, fmt.Errorf("%.3f s recorded, the client's failure window %.3f s: want within 1 s", gotSeconds, window))
	}
	if d := after.histSum - before.histSum; math.Abs(d-gotSeconds) > 1e-6 {
		errs = append(errs, fmt.Errorf("the histogram's sum grew by %.3f s, the seconds counter by %.3f s", d, gotSeconds))
	}
	if err := errors.Join(errs...); err != nil {
		errorf(t, "%s on %s: the recorder disagrees with the packets:\n%v", cause, node, err)
	}
}

// exposureAttempt is one of the client's connections: when it began, the node the load balancer sent it to,
// and what came of it. Lost: its first SYN got no answer, so no SYN-ACK within exposureTimeout, or one only after
// the kernel's retransmission a second later (the drop ended in between: the retry got through).
type exposureAttempt struct {
	at time.Time
	// late is how far behind its schedule the client opened it: a starved client's own clock misjudges its
	// handshakes.
	late time.Duration
	node string
	lost bool
	err  error
}

// exposureClient opens exposureRate new connections a second through the load balancer (lb.pick), each from
// the next of exposureSources addresses, waits up to exposureTimeout for the handshake and closes it. It never
// retries: a lost attempt's only repeat is the kernel's own SYN retransmission from the same port.
type exposureClient struct {
	mu       sync.Mutex
	attempts []exposureAttempt
	// starved says why each phase whose count the client could not measure was not held to it.
	starved []string
}

func (cl *exposureClient) starvedPhases() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return slices.Clone(cl.starved)
}

func startExposureClient(t *testing.T, c *cluster.Cluster, lb *healthCheckingLB, svc *corev1.Service) *exposureClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var srcs []string
	for i := range exposureSources {
		src := fmt.Sprintf("10.250.0.%d", 150+i)
		if err := c.AddClientSource(ctx, src); err != nil {
			cancel()
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.RemoveClientSource(context.Background(), src) })
		srcs = append(srcs, src)
	}
	// The load balancer checks from an address of its own, as a cloud's checkers do: the test's own probes of
	// the health check node port (waitHealthChecksOn) come from the client's default address at no cadence.
	lb.src = "10.250.0.149"
	if err := c.AddClientSource(ctx, lb.src); err != nil {
		cancel()
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.RemoveClientSource(context.Background(), lb.src) })
	// The load balancer's targets are the workers, each in the state of its first check.
	lb.inService, lb.streak = map[string]bool{}, map[string]int{}
	for n := range workers(c) {
		lb.targets = append(lb.targets, n)
		lb.inService[n] = lb.probe(ctx, n)
	}
	sort.Strings(lb.targets)
	cl := &exposureClient{}
	var wg sync.WaitGroup
	wg.Add(2)
	go lb.probeEvery(ctx, &wg)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / exposureRate)
		defer tick.Stop()
		// A source's successive connections alternate between the nodes in service (an odd number of sources, two
		// nodes). A tick late on a busy machine is made up: the rate holds over any second.
		began := time.Now()
		for i := 0; ; i++ {
			due := began.Add(time.Duration(i) * time.Second / exposureRate)
			if time.Now().Before(due) {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
			late := max(time.Since(due)-time.Second/exposureRate, 0)
			node := lb.pick(i)
			addr := nodePortAddr(c.Node(node), svc)
			d := netns.Dialer{NS: c.ClientNS, Timeout: exposureTimeout, Local: srcs[i%len(srcs)]}
			wg.Add(1)
			start := time.Now()
			go func() {
				defer wg.Done()
				at := time.Now()
				conn, err := d.DialContext(ctx, "tcp", addr)
				if ctx.Err() != nil {
					return
				}
				a := exposureAttempt{at: at, late: late + at.Sub(start), node: node, err: err}
				if err == nil {
					_ = conn.Close()
					a.lost = time.Since(at) >= synRetransmit
				} else {
					var op *net.OpError
					a.lost = errors.As(err, &op) && op.Timeout()
				}
				cl.mu.Lock()
				cl.attempts = append(cl.attempts, a)
				cl.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return cl
}

// spanOf is the first and last of times, for the log.
func spanOf(times []time.Time) string {
	if len(times) == 0 {
		return "none"
	}
	return times[0].Format("15:04:05.000") + " to " + times[len(times)-1].Format("15:04:05.000")
}

// between is when each attempt sent to node in [from, to) was lost, in order, and how many were served.
func (cl *exposureClient) between(node string, from, to time.Time) ([]time.Time, int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var lost []time.Time
	served := 0
	for _, a := range cl.attempts {
		if a.node != node || a.at.Before(from) || !a.at.Before(to) {
			continue
		}
		switch {
		case a.lost:
			lost = append(lost, a.at)
		case a.err == nil:
			served++
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].Before(lost[j]) })
	return lost, served
}

// lastServedBefore is when the latest attempt served at node and begun before t began (zero: none).
func (cl *exposureClient) lastServedBefore(node string, t time.Time) time.Time {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var last time.Time
	for _, a := range cl.attempts {
		if a.node == node && !a.lost && a.err == nil && a.at.Before(t) && a.at.After(last) {
			last = a.at
		}
	}
	return last
}

// lateBetween is the most the client fell behind its schedule for an attempt begun in [from, to).
func (cl *exposureClient) lateBetween(from, to time.Time) time.Duration {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var late time.Duration
	for _, a := range cl.attempts {
		if !a.at.Before(from) && a.at.Before(to) {
			late = max(late, a.late)
		}
	}
	return late
}

// sentBetween counts the attempts begun in [from, to), to every node.
func (cl *exposureClient) sentBetween(from, to time.Time) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, a := range cl.attempts {
		if !a.at.Before(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

// servedSince: an attempt sent to node since `from` got its handshake.
func (cl *exposureClient) servedSince(node string, from time.Time) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, a := range cl.attempts {
		if a.node == node && a.err == nil && a.at.After(from) {
			return nil
		}
	}
	return fmt.Errorf("no attempt served on %s since %s", node, from.Format("15:04:05.000"))
}

// failedElsewhere is each attempt lost on a node not in nodes and each that failed other than by a timeout
// anywhere (a refusal, an error): neither is an exposure the recorders of nodes count. refused is, for the log,
// each refusal by a stopped pod (podRefusal), which is neither.
func (cl *exposureClient) failedElsewhere(nodes []string) (failed, refused []string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, a := range cl.attempts {
		line := fmt.Sprintf("%s at %s: %v", a.node, a.at.Format("15:04:05.000"), a.err)
		switch {
		case a.err != nil && !a.lost && slices.Contains(nodes, a.node) && cl.podRefusal(a):
			refused = append(refused, line)
		case a.err != nil && !a.lost || a.lost && !slices.Contains(nodes, a.node):
			failed = append(failed, line)
		}
	}
	return failed, refused
}

// podRefusalBefore bounds how long before its node's first drop a pod's refusal may come: the node agent stops
// a pod's servers a second after it reports the pod exited, and kube-proxy, which syncs at most once a second,
// may still forward to it until it drops (docs/exposure.md, "What it cannot see": attempts a pod refuses).
const podRefusalBefore = 2 * time.Second

// podRefusal: a is a connection refused on its node within podRefusalBefore before an attempt lost there, the
// old pod refusing between its stop and kube-proxy's drop. The caller holds cl.mu.
func (cl *exposureClient) podRefusal(a exposureAttempt) bool {
	if !errors.Is(a.err, syscall.ECONNREFUSED) {
		return false
	}
	for _, b := range cl.attempts {
		if b.lost && b.node == a.node && !b.at.Before(a.at) && b.at.Sub(a.at) <= podRefusalBefore {
			return true
		}
	}
	return false
}

// preStopRollout is the proof of the recommended preStop: after the measured rollout and drain, the preStop sleep
// and grace period the exporters' measured drains call for (recommendPreStop) are set on the Deployment, with its
// pods' stand-ins exiting on SIGTERM (nodeagent.ExitOnTermAnnotation: the preStop sleep, not the grace period,
// keeps them serving), node-2 back in play. That rollout's old pods have no preStop yet: it is logged, not held.
// Then the Deployment rolls again: on each node in turn the old pod, now with the preStop, is deleted, the node
// has no ready endpoint left, its health check answers 503, and the load balancer keeps sending for its drain
// while the old pod serves through its preStop (kube-proxy forwards to a serving terminating local endpoint when
// no ready one is left). The client must lose no attempt (no first SYN unanswered) on either node, and the
// recorders must not count one: no cause's attempts or seconds grow, no episode ends or stays open.
func preStopRollout(t *testing.T, ctx context.Context, c *cluster.Cluster, cl *exposureClient, lb *healthCheckingLB, sh *drill.Shell, container string, nodes []string) {
	t.Helper()
	preStop, grace := recommendPreStop(t, ctx, c, lb.svc, nodes, exposureGrace)
	operatorRun(t, sh, "kubectl uncordon node-2")
	apply := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"true"}},`+
		`"spec":{"terminationGracePeriodSeconds":%d,"containers":[{"name":%q,"lifecycle":{"preStop":{"sleep":{"seconds":%d}}}}]}}}}`,
		nodeagent.ExitOnTermAnnotation, grace, container, preStop)
	t.Logf("preStop: applying lifecycle.preStop.sleep.seconds %d, terminationGracePeriodSeconds %d (this rollout's old pods have none)", preStop, grace)
	from, to := rollAndSettle(t, ctx, c, lb, "applying the preStop", apply)
	for _, n := range nodes {
		lost, served := cl.between(n, from, to)
		t.Logf("applying the preStop, on %s: the client lost %d attempts (%s), %d served (not held: the old pods had no preStop)", n, len(lost), spanOf(lost), served)
	}

	before := map[string]exposureReading{}
	for _, n := range nodes {
		r, err := readExposure(ctx, c, lb.svc, n, "rollout")
		if err != nil {
			fatalln(t, err)
		}
		before[n] = r
	}
	restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	from, to = rollAndSettle(t, ctx, c, lb, "preStop rollout", restart)
	var errs []error
	for _, n := range nodes {
		after, err := readExposure(ctx, c, lb.svc, n, "rollout")
		if err != nil {
			fatalln(t, err)
		}
		b := before[n]
		lost, served := cl.between(n, from, to)
		t.Logf("preStop rollout on %s: the client lost %d attempts (%s), %d served; the recorder: attempts +%.0f (rollout) +%.0f (other causes), "+
			"seconds +%.3f +%.3f, episodes +%d, open %.0f; load balancer drain measured %d time(s), %.3f s",
			n, len(lost), spanOf(lost), served, after.attempts-b.attempts, after.otherAttempts-b.otherAttempts,
			after.seconds-b.seconds, after.otherSeconds-b.otherSeconds, after.episodes-b.episodes, after.open,
			after.drains-b.drains, after.drainSum-b.drainSum)
		if after.attempts != b.attempts || after.otherAttempts != b.otherAttempts || after.seconds != b.seconds ||
			after.otherSeconds != b.otherSeconds || after.episodes != b.episodes || after.open != 0 {
			errs = append(errs, fmt.Errorf("%s: the recorder counted exposure with the recommended preStop: attempts +%.0f, seconds +%.3f, episodes +%d, open %.0f",
				n, after.attempts-b.attempts+after.otherAttempts-b.otherAttempts, after.seconds-b.seconds+after.otherSeconds-b.otherSeconds,
				after.episodes-b.episodes, after.open))
		}
		if len(lost) == 0 {
			continue
		}
		if late := cl.lateBetween(from, to); late > exposureStarved {
			why := fmt.Sprintf("preStop rollout on %s: the client fell %s behind its schedule (the machine starved it): its %d lost attempts are no measure",
				n, late, len(lost))
			t.Log(why)
			cl.mu.Lock()
			cl.starved = append(cl.starved, why)
			cl.mu.Unlock()
			continue
		}
		errs = append(errs, fmt.Errorf("%s: the client lost %d attempts (%s) with the recommended preStop, want 0", n, len(lost), spanOf(lost)))
	}
	if err := errors.Join(errs...); err != nil {
		errorf(t, "preStop rollout:\n%v", err)
		return
	}
	t.Logf("preStop rollout: with preStop %d s and grace %d s the client lost no attempt on %s and the recorders held (no exposure counted)",
		preStop, grace, strings.Join(nodes, " and "))
}

// rollAndSettle patches the scenario's Deployment (a rollout) and waits until it settled: rolled out, one ready
// pod per node, both in service, no old pod left terminating, and then one quiet period more with no episode
// open, so that an episode a late loss opened has ended. It returns when it patched and when it settled.
func rollAndSettle(t *testing.T, ctx context.Context, c *cluster.Cluster, lb *healthCheckingLB, what, patch string) (from, to time.Time) {
	t.Helper()
	const ns, name = "e2e-exposure", "checkout"
	from = time.Now()
	if _, err := c.Admin().AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		fatalf(t, "%s: %v", what, err)
	}
	var settled time.Time
	err := cluster.Eventually(ctx, 3*time.Minute, 250*time.Millisecond, func() error {
		dep, err := c.Admin().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := dep.Status; dep.Generation != st.ObservedGeneration || st.UpdatedReplicas != 2 || st.Replicas != 2 || st.AvailableReplicas != 2 {
			return fmt.Errorf("rollout under way: %+v", st)
		}
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		if got := readyPerNode(pods); len(pods) != 2 || got["node-1"] != 1 || got["node-2"] != 1 {
			return fmt.Errorf("%d pods, ready per node %v: want one on node-1 and one on node-2, none terminating", len(pods), got)
		}
		if in := lb.inServiceNow(); !in["node-1"] || !in["node-2"] {
			return fmt.Errorf("in service: %v, want node-1 and node-2", in)
		}
		if settled.IsZero() {
			settled = time.Now()
		}
		if wait := exposureQuiet + 2*time.Second - time.Since(settled); wait > 0 {
			return fmt.Errorf("settled, waiting %s for the quiet period", wait.Round(time.Millisecond))
		}
		for _, n := range []string{"node-1", "node-2"} {
			if r, err := readExposure(ctx, c, lb.svc, n, "rollout"); err != nil || r.open != 0 {
				return fmt.Errorf("%s: %v episode(s) open, %v", n, r.open, err)
			}
		}
		return nil
	})
	to = time.Now()
	_, changes := lb.history()
	var moves []string
	for _, ch := range changes {
		if !ch.at.Before(from) {
			moves = append(moves, ch.String())
		}
	}
	t.Logf("%s from %s to %s; the load balancer: %s", what, from.Format("15:04:05.000"), to.Format("15:04:05.000"), strings.Join(moves, ", "))
	if err != nil {
		fatalf(t, "%s: did not settle: %v", what, err)
	}
	return from, to
}

// recommendPreStop is the preStop sleep and grace period the exporters' measured drains recommend for svc, by the
// rule the plugin's PRESTOP column states (docs/exposure.md): every node's localtraffic_service_lb_drain_seconds
// summed bucket by bucket, its p95 interpolated as histogram_quantile does, rounded up to whole seconds, plus a
// 5 s margin; the grace period keeps what the pods have now after their preStop (grace, no preStop) and is never
// lowered. The plugin itself reads the exporters through port-forwards to their DaemonSet's pods, which this
// scenario's exporters (the harness's, restarted with its flags) are not.
func recommendPreStop(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service, nodes []string, grace int64) (preStop, newGrace int64) {
	t.Helper()
	const margin, quantile = 5, 0.95
	byLE := map[float64]float64{}
	for _, n := range nodes {
		m, err := c.Metrics(ctx, n)
		if err != nil {
			fatalln(t, err)
		}
		for _, s := range m.Series("localtraffic_service_lb_drain_seconds", svcLabels(svc, n)) {
			h := s.GetHistogram()
			inf := false
			for _, b := range h.GetBucket() {
				byLE[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				inf = inf || math.IsInf(b.GetUpperBound(), 1)
			}
			if !inf {
				// The count stands for the +Inf bucket where the parser left it out.
				byLE[math.Inf(1)] += float64(h.GetSampleCount())
			}
		}
	}
	les := slices.Sorted(maps.Keys(byLE))
	total := byLE[math.Inf(1)]
	if total == 0 {
		fatalf(t, "no measured drain of %s/%s on %s: nothing to recommend a preStop from", svc.Namespace, svc.Name, strings.Join(nodes, " and "))
	}
	rank, lower, below := quantile*total, 0.0, 0.0
	p95 := math.NaN()
	for _, le := range les {
		n := byLE[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				p95 = lower // Prometheus: the highest finite bound
			} else {
				p95 = lower + (le-lower)*(rank-below)/(n-below)
			}
			break
		}
		lower, below = le, n
	}
	preStop = int64(math.Ceil(p95)) + margin
	newGrace = max(grace, preStop+grace)
	t.Logf("recommended from %.0f measured drain(s) of %s/%s: p95 %.3f s + %d s margin: preStop %d s, grace %d s",
		total, svc.Namespace, svc.Name, p95, margin, preStop, newGrace)
	return preStop, newGrace
}

// TestPodRefusalsBeforeTheDrop: failedElsewhere, on recorded attempts. A refusal on a node just before an attempt
// is lost there (the old pod stopped, kube-proxy not synced yet) is logged, not failed; a refusal with no drop
// after it on its node, one on a node not measured, and a timeout elsewhere fail.
func TestPodRefusalsBeforeTheDrop(t *testing.T) {
	base := time.Date(2026, 12, 7, 3, 8, 48, 0, time.UTC)
	refusal := &net.OpError{Op: "dial", Net: "tcp4", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "dial", Net: "tcp4", Err: os.ErrDeadlineExceeded}
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	cl := &exposureClient{attempts: []exposureAttempt{
		{at: at(0), node: "node-2", err: refusal},              // the pod's: node-2 drops 40 ms later
		{at: at(40), node: "node-2", err: timeout, lost: true}, // the episode's first loss
		{at: at(5000), node: "node-1", err: refusal},           // no drop follows on node-1
		{at: at(5100), node: "node-3", err: refusal},           // not a measured node
		{at: at(5200), node: "node-3", err: timeout, lost: true},
		{at: at(9000), node: "node-1", err: refusal}, // a drop 2.5 s later is not this pod's
		{at: at(11500), node: "node-1", err: timeout, lost: true},
	}}
	failed, refused := cl.failedElsewhere([]string{"node-1", "node-2"})
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "node-2 at 03:08:48.000") {
		errorf(t, "refused by a stopped pod: %q, want node-2's at 03:08:48.000 alone", refused)
	}
	if len(failed) != 4 {
		errorf(t, "failed: %q, want node-1's two refusals, node-3's refusal and its loss", failed)
	}
}
