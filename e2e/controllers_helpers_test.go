package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
)

// ctrlState holds this test binary's cluster with controllers (kube-controller-manager, kube-scheduler, node
// agents), shared by the drill and the scheduler scenarios; TestMain closes it with the plain one. Its
// namespaces are lte2e-<pid>-k-*, so both clusters can run at once.
var ctrlState struct {
	once sync.Once
	mu   sync.Mutex
	c    *cluster.Cluster
	err  error
}

// ctrlWorkers are the controller cluster's workers: node-1 and node-2 in iptables mode, node-3 in nftables
// mode; a fourth node, control-plane, is tainted NoSchedule and runs kube-proxy and the exporter too.
const ctrlWorkers = 3

func controllerCluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	requireRoot(t)
	ctrlState.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		c, err := cluster.Up(ctx, cluster.Config{
			Name:        "k",
			Nodes:       cluster.ControllerNodes(ctrlWorkers, true),
			Controllers: true,
			// Pod Security admission enforcing baseline wherever a namespace does not say otherwise, as on many
			// managed clusters: the shipped install lines must work there (deploy_podsecurity_test.go).
			PodSecurityDefault: "baseline",
			StartExporters:     true,
			ExporterArgs:       everySeries(),
			Log:                os.Stderr,
		})
		ctrlState.mu.Lock()
		ctrlState.c, ctrlState.err = c, err
		ctrlState.mu.Unlock()
	})
	if ctrlState.err != nil {
		fatalf(t, "controller cluster: %v", ctrlState.err)
	}
	return ctrlState.c
}

func closeControllerCluster() error {
	ctrlState.mu.Lock()
	defer ctrlState.mu.Unlock()
	if ctrlState.c != nil {
		return ctrlState.c.Close()
	}
	return nil
}

// operator returns a shell that runs kubectl and curl in the outside client's namespace.
func operator(t testing.TB, c *cluster.Cluster) *drill.Shell {
	t.Helper()
	s, err := drill.NewShell(c)
	if err != nil {
		fatalln(t, err)
	}
	return s
}

// liveDrillOperator is the operator of a live drill: its shell and the transcript of what it typed and saw. At the
// end of the test the transcript is logged and the drill's objects are removed.
func liveDrillOperator(t *testing.T, c *cluster.Cluster) (*drill.Shell, drill.Transcript) {
	t.Helper()
	sh := operator(t, c)
	transcript := &bytes.Buffer{}
	t.Cleanup(func() {
		t.Logf("what the operator saw:\n%s", transcript.String())
		if err := drill.CleanupLive(context.Background(), c); err != nil {
			errorf(t, "cleanup: %v", err)
		}
	})
	return sh, drill.Transcript{W: transcript}
}

// operatorRun runs a command line in the operator's shell and fails the test on error.
func operatorRun(t testing.TB, s *drill.Shell, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := s.Run(ctx, cmd, "")
	if err != nil {
		fatalln(t, err)
	}
	t.Logf("$ %s\n%s", cmd, strings.TrimRight(out, "\n"))
	return out
}

// workloadPodSpec is the pod template of the scenarios' workloads: one stand-in container on backendPort.
func workloadPodSpec(name string, grace int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: name, Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
				Args:  []string{"netexec", fmt.Sprintf("--http-port=%d", backendPort)},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: backendPort}},
			}},
		},
	}
}

// hostnameSpread is a hard spread over kubernetes.io/hostname; honor sets nodeTaintsPolicy: Honor.
func hostnameSpread(name string, honor bool) corev1.TopologySpreadConstraint {
	tsc := corev1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
	}
	if honor {
		p := corev1.NodeInclusionPolicyHonor
		tsc.NodeTaintsPolicy = &p
	}
	return tsc
}

// localNodePortService creates a NodePort Service with externalTrafficPolicy Local selecting app=name
// (port 80 → backendPort, the given node port) in namespace ns, and deletes it at the end. The EndpointSlice
// controller writes its slices.
func localNodePortService(t testing.TB, c *cluster.Cluster, ns, name string, nodePort int32) *corev1.Service {
	t.Helper()
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	svc, err := c.Admin().CoreV1().Services(ns).Create(ctx, cluster.NewService(ns, name, corev1.ServiceTypeNodePort, cluster.WithNodePort(nodePort)), metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "create service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		if err := c.Admin().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			errorf(t, "delete service %s/%s: %v", ns, name, err)
		}
	})
	return svc
}

// createDeployment creates d and, at the end, deletes it (the garbage collector removes its ReplicaSets and
// pods) and waits until its pods are gone, so the next scenario starts on empty nodes.
func createDeployment(t testing.TB, c *cluster.Cluster, d *appsv1.Deployment) {
	t.Helper()
	ctx := testContext(t)
	if _, err := c.Admin().AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		fatalf(t, "create deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	t.Cleanup(func() { deleteWorkload(t, c, d.Namespace, d.Name, "deployments") })
}

func deleteWorkload(t testing.TB, c *cluster.Cluster, ns, name, kind string) {
	ctx := context.Background()
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	var err error
	if kind == "daemonsets" {
		err = c.Admin().AppsV1().DaemonSets(ns).Delete(ctx, name, opts)
	} else {
		err = c.Admin().AppsV1().Deployments(ns).Delete(ctx, name, opts)
	}
	if err != nil {
		errorf(t, "delete %s %s/%s: %v", kind, ns, name, err)
		return
	}
	if err := cluster.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, func() error {
		pods, err := c.Admin().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods of %s left", n, name)
		}
		return nil
	}); err != nil {
		errorf(t, "%s %s/%s: %v", kind, ns, name, err)
	}
}

// podsOf lists the pods of app=name.
func podsOf(ctx context.Context, c *cluster.Cluster, ns, name string) ([]corev1.Pod, error) {
	l, err := c.Admin().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unschedulable returns the scheduler's message when it reported the pod Unschedulable.
func unschedulable(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// readyPerNode counts the Running, Ready, not terminating pods of app=name per node.
func readyPerNode(pods []corev1.Pod) map[string]int {
	res := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(p) {
			res[p.Spec.NodeName]++
		}
	}
	return res
}

// placementRow is one node's view of a Service: real traffic and the exporter's verdict.
type placementRow struct {
	node      string
	traffic   cluster.Result
	blackhole float64
	known     bool
	scrapeErr error
}

// checkServing sends one real request per node (control-plane included) to the Service's node port and
// scrapes each exporter: a node in serving must answer 200 from a pod on itself with the exporter saying
// blackhole 0; every other node must drop the connection with the exporter saying blackhole 1 — except the
// control-plane node, which is excluded from load balancers: there the exporter must see the drop in the rules,
// and the label takes the node out of load balancers only (docs/rotation.md): it is out of rotation
// (blackhole 0) until NodePort clients have kept arriving past --rotation.grace — these checks' own requests
// are such clients in a long scenario — and then in rotation with the blackhole's reason traffic_lost.
func checkServing(ctx context.Context, c *cluster.Cluster, svc *corev1.Service, serving map[string]bool) error {
	var rows []placementRow
	var errs []error
	for _, n := range c.Nodes() {
		r := placementRow{node: n.Name, traffic: c.Request(ctx, nodePortAddr(n, svc))}
		m, err := c.Metrics(ctx, n.Name)
		scrapeErr := err
		if err == nil {
			r.blackhole, r.known, err = m.Value("localtraffic_blackhole", svcLabels(svc, n.Name))
		}
		r.scrapeErr = err
		rows = append(rows, r)
		if serving[n.Name] {
			if err := wantServedLocally(r.traffic, n.Name); err != nil {
				errs = append(errs, err)
			}
		} else if r.traffic.Verdict != cluster.Blackhole {
			errs = append(errs, fmt.Errorf("via %s: got %s, want blackhole", n.Name, r.traffic))
		}
		// The control-plane node carries kubeadm's exclude-from-external-load-balancers label: when it drops,
		// the exporter says so (rules_drop) but counts it out of rotation, so no blackhole to page on.
		wantBH := !serving[n.Name] && !n.ControlPlane
		// Observed in rotation: the control plane's clients (these requests) arrived past the grace window.
		observedIn := n.ControlPlane && !serving[n.Name] && r.known && r.blackhole == 1
		switch {
		case r.scrapeErr != nil:
			errs = append(errs, fmt.Errorf("%s: scrape: %w", n.Name, r.scrapeErr))
		case !r.known:
			errs = append(errs, fmt.Errorf("%s: no localtraffic_blackhole series for %s/%s", n.Name, svc.Namespace, svc.Name))
		case (r.blackhole == 1) != wantBH && !observedIn:
			errs = append(errs, fmt.Errorf("%s: exporter localtraffic_blackhole=%g, want %v", n.Name, r.blackhole, wantBH))
		}
		if n.ControlPlane && scrapeErr == nil {
			drop, inRotation := 0.0, 0.0
			if !serving[n.Name] {
				drop = 1
			}
			if observedIn {
				inRotation = 1
				if err := metricIs("localtraffic_blackhole_reason", reasonLabels(svc, n.Name, "traffic_lost"), 1)(m); err != nil {
					errs = append(errs, fmt.Errorf("%s: in rotation although excluded, but not by the clients it drops: %w", n.Name, err))
				}
			}
			for _, check := range []func(cluster.Metrics) error{
				metricIs("localtraffic_in_rotation", svcLabels(svc, n.Name), inRotation),
				metricIs("localtraffic_node_excluded", cluster.Labels{"node": n.Name}, 1),
				metricIs("localtraffic_rules_drop", portLabels(svc, n.Name), drop),
			} {
				if err := check(m); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\n%s", errors.Join(errs...), formatRows(rows))
	}
	return nil
}

func formatRows(rows []placementRow) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENT\tEXPORTER localtraffic_blackhole\t")
	for _, r := range rows {
		exp := fmt.Sprintf("%g", r.blackhole)
		if !r.known {
			exp = "absent"
		}
		if r.scrapeErr != nil {
			exp = r.scrapeErr.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", r.node, r.traffic, exp)
	}
	tw.Flush()
	return b.String()
}

// servingNodes turns per-node counts into the set of nodes with at least one.
func servingNodes(counts map[string]int) map[string]bool {
	res := map[string]bool{}
	for n, k := range counts {
		if k > 0 {
			res[n] = true
		}
	}
	return res
}

// workers returns the set of worker (non-control-plane) node names.
func workers(c *cluster.Cluster) map[string]bool {
	res := map[string]bool{}
	for _, n := range c.Nodes() {
		if !n.ControlPlane {
			res[n.Name] = true
		}
	}
	return res
}
