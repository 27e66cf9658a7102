package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The Event writer's scenario: the shipped RBAC of deploy/overlays/events, the Lease it names, and a second
// exporter on node-1 and node-2 (beside the usual ones) with --events.write.
const (
	eventsPort  = 9753
	eventsLease = "localtraffic-exporter-events"
	eventsQuiet = 3 * time.Second
)

// TestEventsOneWriterPerCluster: one Kubernetes Event per exposure episode, from one writer. node-1's and
// node-2's writers (node-1's started first, so it leads) find each other in a selectorless Service's
// EndpointSlice, as they would in the DaemonSet's Service, and are authorised by the overlay's own RBAC only.
// A Local NodePort Service has a replica on node-1 and node-2; a client keeps connecting to node-2's NodePort;
// node-2's replica is then listed terminating and no longer serving (a rollout) while node-1's serves, so node-2
// drops what still arrives; the client stops and the episode ends its quiet period later. Exactly one Event
// regarding the Service (its UID) must follow, from reportingController localtraffic-exporter, its note naming
// node-2 and the attempts lost. Then the leader's exporter stops: node-2's takes the Lease and, going on from the
// cursor the Lease keeps, writes nothing again.
func TestEventsOneWriterPerCluster(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const ns = "e2e-events"
	svc, pods := eventsScenario(t, c, ns, "web", "node-1", "node-2")
	admin := c.Admin()
	writer := func(node string) error { return startWriter(ctx, c, ns, node) }
	if err := writer("node-1"); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { c.Node("node-1").StopExporterOn(eventsPort) })
	eventually(t, converge, "node-1's writer leads", func() error {
		return errors.Join(leaseHolder(ctx, c, "writer-node-1"),
			expectMetricsOn(ctx, c, "node-1", eventsPort, metricIs("localtraffic_event_writer_leader", nodeLabels("node-1"), 1)))
	})
	if err := writer("node-2"); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { c.Node("node-2").StopExporterOn(eventsPort) })

	addr := nodePortAddr(c.Node("node-2"), svc)
	lost := node2LosesAttempts(t, ctx, c, svc, pods, addr, func() error {
		return expectMetricsOn(ctx, c, "node-2", eventsPort, metricIs("localtraffic_exposure_attempts_counted", nodeLabels("node-2"), 1))
	})

	ev := oneEpisodeEvent(t, ctx, c, svc, converge, "one Event regarding the Service", "writer-node-1", lost)
	t.Logf("Event %s: %s (the client lost %d)", ev.Name, ev.Note, lost)

	// The leader goes; node-2's writer takes the Lease and writes nothing again.
	eventually(t, converge, "the Lease keeps node-2's cursor", func() error {
		l, err := admin.CoordinationV1().Leases(cluster.ExporterNamespace).Get(ctx, eventsLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var cursors map[string]struct{ Seq uint64 }
		if err := json.Unmarshal([]byte(l.Annotations["localtraffic.io/event-cursors"]), &cursors); err != nil || cursors["node-2"].Seq < 1 {
			return fmt.Errorf("cursors %q (%v)", l.Annotations["localtraffic.io/event-cursors"], err)
		}
		return nil
	})
	c.Node("node-1").StopExporterOn(eventsPort)
	eventually(t, converge, "node-2's writer leads", func() error {
		return errors.Join(leaseHolder(ctx, c, "writer-node-2"),
			expectMetricsOn(ctx, c, "node-2", eventsPort, metricIs("localtraffic_event_writer_leader", nodeLabels("node-2"), 1)))
	})
	// Several polls of the new leader: the episode is still in node-2's ring, and the cursor says it is written.
	stillOneEvent(t, ctx, c, ns, "the leader changed")
	if err := expectMetricsOn(ctx, c, "node-2", eventsPort,
		metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": "node-2", "result": "written"}, 0),
		metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": "node-2", "result": "skipped"}, 0),
		// node-1's exporter is gone but still listed: unreachable, logged, no stall.
		metricIs("localtraffic_event_writer_peers_unreachable", nodeLabels("node-2"), 1)); err != nil {
		errorln(t, err)
	}
}

// TestEventsAcrossAPeerRestart: an episode that ended before its exporter restarted, and that the leader had
// not read yet, still gets its one Event. node-1's writer leads, its peers Service listing node-1 alone; node-2's
// exporter (with a state file) records a rollout episode with real traffic, as in TestEventsOneWriterPerCluster,
// and is restarted once its state file holds the ended episode. Only then is node-2 listed: the leader reads the
// new process's episodes from its start and must write exactly one Event for it. The leader having taken it,
// node-2 is restarted again: the episode is not served again (the leader counts nothing skipped) and the Event
// stays the only one.
func TestEventsAcrossAPeerRestart(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const ns = "e2e-events-restart"
	svc, pods := eventsScenario(t, c, ns, "shop", "node-1")
	admin := c.Admin()
	if err := startWriter(ctx, c, ns, "node-1"); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { c.Node("node-1").StopExporterOn(eventsPort) })
	eventually(t, converge, "node-1's writer leads", func() error { return leaseHolder(ctx, c, "writer-node-1") })

	state := filepath.Join(t.TempDir(), "node-2.json")
	node2 := func() {
		t.Helper()
		if err := c.Node("node-2").StartExporterOn(ctx, eventsPort, "--state.file="+state,
			"--arrivals.quiet-period="+eventsQuiet.String()); err != nil {
			fatalln(t, err)
		}
	}
	node2()
	t.Cleanup(func() { c.Node("node-2").StopExporterOn(eventsPort) })
	addr := nodePortAddr(c.Node("node-2"), svc)
	lost := node2LosesAttempts(t, ctx, c, svc, pods, addr, func() error {
		return expectMetricsOn(ctx, c, "node-2", eventsPort, metricIs("localtraffic_exposure_attempts_counted", nodeLabels("node-2"), 1))
	})
	untaken := func(want int) func() error {
		return func() error {
			st, err := readStateFile(state)
			if err != nil {
				return err
			}
			if n := len(st.Exposure.Finished); n != want {
				return fmt.Errorf("the state file holds %d ended episodes no reader took, want %d", n, want)
			}
			return nil
		}
	}
	eventually(t, converge, "node-2's state file holds the ended episode", untaken(1))
	c.Node("node-2").StopExporterOn(eventsPort)
	node2()
	t.Log("node-2's exporter restarted; listing it among the peers")

	slices := admin.DiscoveryV1().EndpointSlices(ns)
	slice, err := slices.Get(ctx, "peers-peers", metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{c.Node("node-2").IP}, NodeName: new("node-2"),
		Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		fatalln(t, err)
	}
	ev := oneEpisodeEvent(t, ctx, c, svc, converge, "one Event for the episode that ended before node-2's restart", "writer-node-1", lost)
	t.Logf("Event %s: %s (the client lost %d)", ev.Name, ev.Note, lost)

	// Taken: the next write of node-2's state file carries it no more, and a restart serves it no more.
	eventually(t, converge, "node-2's state file no longer holds the taken episode", untaken(0))
	c.Node("node-2").StopExporterOn(eventsPort)
	node2()
	stillOneEvent(t, ctx, c, ns, "node-2's second restart")
	if err := expectMetricsOn(ctx, c, "node-1", eventsPort,
		metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": "node-1", "result": "written"}, 1),
		metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": "node-1", "result": "skipped"}, 0)); err != nil {
		errorln(t, err)
	}
}

// stillOneEvent lets the writer poll its peers several times (every second) after what happened, then holds
// ns to the one Event it had.
func stillOneEvent(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, after string) {
	t.Helper()
	time.Sleep(4 * time.Second)
	evs, err := writerEvents(ctx, c, ns)
	if err != nil {
		fatalln(t, err)
	}
	if len(evs) != 1 {
		errorf(t, "%d Events after %s, want still 1: %v", len(evs), after, evs)
	}
}

// eventsScenario sets up an Event writer's scenario in ns: the overlay's RBAC, the Lease removed at the end, a
// Local NodePort Service name with a ready replica on node-1 and node-2 and the Deployment the writer names from
// them, and the peers Service listing the nodes peers.
func eventsScenario(t *testing.T, c *cluster.Cluster, ns, name string, peers ...string) (*corev1.Service, []*cluster.Pod) {
	t.Helper()
	applyEventsRBAC(t, c)
	t.Cleanup(func() {
		_ = c.Admin().CoordinationV1().Leases(cluster.ExporterNamespace).Delete(context.Background(), eventsLease, metav1.DeleteOptions{})
	})
	svc := newService(t, c, ns, name, corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	deploymentOf(t, c, svc)
	peersService(t, c, ns, "peers", peers...)
	return svc, pods
}

// startWriter starts node's second exporter as an Event writer of ns's peers Service (eventsScenario).
func startWriter(ctx context.Context, c *cluster.Cluster, ns, node string) error {
	return c.Node(node).StartExporterOn(ctx, eventsPort, "--state.file=", "--arrivals.quiet-period="+eventsQuiet.String(),
		"--events.write", "--events.lease-namespace="+cluster.ExporterNamespace, "--events.identity=writer-"+node,
		"--events.peers-service="+ns+"/peers", "--events.peers-scheme=http", "--events.poll-interval=1s")
}

// applyEventsRBAC applies the Event writer's RBAC as deploy/overlays/events ships it, and removes it at the end:
// the other tests hold the exporter to its read-only grants.
func applyEventsRBAC(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	objs, err := cluster.ReadManifests(filepath.Join(repoDir(t), "deploy", "overlays", "events"))
	if err != nil {
		fatalln(t, err)
	}
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Kustomization" {
			rbac = append(rbac, o)
		}
	}
	if len(rbac) != 4 {
		fatalf(t, "deploy/overlays/events has %d RBAC objects, want 4", len(rbac))
	}
	if err := c.Apply(testContext(t), rbac); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		ctx, r := context.Background(), c.Admin().RbacV1()
		for _, o := range rbac {
			var err error
			switch o.GetKind() {
			case "Role":
				err = r.Roles(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			case "RoleBinding":
				err = r.RoleBindings(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			case "ClusterRole":
				err = r.ClusterRoles().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			case "ClusterRoleBinding":
				err = r.ClusterRoleBindings().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				errorf(t, "delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
}

// peersService is a selectorless Service ns/name whose EndpointSlice lists the writers' exporters on nodes at
// eventsPort, as the DaemonSet's Service lists its pods.
func peersService(t *testing.T, c *cluster.Cluster, ns, name string, nodes ...string) {
	t.Helper()
	ctx := testContext(t)
	_, err := c.Admin().CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "metrics", Port: eventsPort}}}},
		metav1.CreateOptions{})
	if err != nil {
		fatalln(t, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-peers", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("metrics"), Port: new(int32(eventsPort))}},
	}
	for _, n := range nodes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{c.Node(n).IP}, NodeName: new(n),
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	if _, err := c.Admin().DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.Admin().DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), slice.Name, metav1.DeleteOptions{})
	})
}

func leaseHolder(ctx context.Context, c *cluster.Cluster, want string) error {
	l, err := c.Admin().CoordinationV1().Leases(cluster.ExporterNamespace).Get(ctx, eventsLease, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != want {
		return fmt.Errorf("the Lease's holder is %v, want %s", h, want)
	}
	return nil
}

// node2LosesAttempts makes node-2's exposure episode with real traffic: once node-2 serves svc's NodePort at addr
// from its local pod (pods[1]) and counted says its meter counts attempts, a client connects every 200 ms while
// that pod stops serving (pods[0] on node-1 stays ready), until node-2 has dropped at least five of its attempts.
// It returns how many the client lost.
func node2LosesAttempts(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service, pods []*cluster.Pod,
	addr string, counted func() error) int {
	t.Helper()
	eventually(t, converge, "node-2 serves its NodePort, counting attempts", func() error {
		return errors.Join(wantServedLocally(c.Request(ctx, addr), "node-2"), counted())
	})
	cl := startRepeatingClient(ctx, c, addr, 200*time.Millisecond)
	time.Sleep(time.Second)
	setEndpoints(t, c, svc, []cluster.Endpoint{{Pod: pods[0]},
		{Pod: pods[1], Ready: cluster.Bool(false), Serving: cluster.Bool(false), Terminating: cluster.Bool(true)}})
	eventually(t, converge, "node-2 drops what the client still sends", func() error {
		if cl.lost() < 5 {
			return fmt.Errorf("%d attempts lost so far", cl.lost())
		}
		return nil
	})
	return cl.stop()
}

// oneEpisodeEvent waits up to within for the writer's one Event in svc's namespace and holds it to node-2's
// rollout episode at svc's NodePort: regarding svc, related to node-2, a Warning from instance, its attempts
// between 1 and the client's lost + 2. The meter's count taken at the drop may miss the attempts of its last
// 200 ms block, which the episode then counts though they were served (docs/exposure.md, "Error bounds", "The
// meter's lag"): one at the client's pace, two at a boundary.
func oneEpisodeEvent(t *testing.T, ctx context.Context, c *cluster.Cluster, svc *corev1.Service, within time.Duration,
	what, instance string, lost int) eventsv1.Event {
	t.Helper()
	var ev eventsv1.Event
	eventually(t, within, what, func() error {
		evs, err := writerEvents(ctx, c, svc.Namespace)
		if err != nil {
			return err
		}
		if len(evs) != 1 {
			return fmt.Errorf("%d Events, want 1: %v", len(evs), evs)
		}
		ev = evs[0]
		return nil
	})
	// The writer names the workload from the Service's pods in the API (deploymentOf), read with the overlay's
	// grants: the note as without them would fail here.
	m := regexp.MustCompile(`^rollout deployment/` + regexp.QuoteMeta(svc.Name) + `: node-2 dropped (\d+) connection attempts at NodePort (\d+)/TCP`).FindStringSubmatch(ev.Note)
	if m == nil || ev.Regarding.Kind != "Service" || ev.Regarding.Name != svc.Name || ev.Regarding.UID != svc.UID ||
		ev.Type != corev1.EventTypeWarning || ev.ReportingInstance != instance || ev.Related == nil || ev.Related.Name != "node-2" {
		fatalf(t, "Event %s: note %q, regarding %+v, type %s, instance %s (want %s), related %+v", ev.Name, ev.Note, ev.Regarding,
			ev.Type, ev.ReportingInstance, instance, ev.Related)
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 || n > lost+2 || m[2] != strconv.Itoa(int(svc.Spec.Ports[0].NodePort)) {
		errorf(t, "the Event says %s attempts at NodePort %s; the client lost %d at %d", m[1], m[2], lost, svc.Spec.Ports[0].NodePort)
	}
	return ev
}

// deploymentOf puts in the API what a Deployment's rollout leaves for the writer to read: a Pod selected by svc,
// controlled by a ReplicaSet that a Deployment svc.Name controls. The e2e backends are network namespaces, not
// API Pods, and the cluster runs no controller-manager: the objects only describe them, which is all the
// writer reads.
func deploymentOf(t *testing.T, c *cluster.Cluster, svc *corev1.Service) {
	t.Helper()
	ctx := testContext(t)
	// Without controller-manager no ServiceAccount controller makes the namespace's default one, which the
	// apiserver's admission wants a Pod's.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.Admin().CoreV1().ServiceAccounts(svc.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}
	labels := map[string]string{"app": svc.Name}
	for k, v := range svc.Spec.Selector {
		labels[k] = v
	}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app"}}}}
	ctrl := true
	rs, err := c.Admin().AppsV1().ReplicaSets(svc.Namespace).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-5d", Labels: labels, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1",
			Kind: "Deployment", Name: svc.Name, UID: "00000000-0000-0000-0000-00000000d001", Controller: &ctrl}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}, metav1.CreateOptions{})
	if err != nil {
		fatalln(t, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rs.Name + "-x1", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &ctrl}}}, Spec: tmpl.Spec}
	if _, err := c.Admin().CoreV1().Pods(svc.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = c.Admin().CoreV1().Pods(svc.Namespace).Delete(bg, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		_ = c.Admin().AppsV1().ReplicaSets(svc.Namespace).Delete(bg, rs.Name, metav1.DeleteOptions{})
	})
}

// writerEvents lists the exporters' Events in ns.
func writerEvents(ctx context.Context, c *cluster.Cluster, ns string) ([]eventsv1.Event, error) {
	l, err := c.Admin().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range l.Items {
		if e.ReportingController == "localtraffic-exporter" {
			out = append(out, e)
		}
	}
	return out, nil
}

// repeatingClient connects to one address every interval from the outside client, counting what was not
// answered.
type repeatingClient struct {
	mu       sync.Mutex
	failed   int
	cancel   context.CancelFunc
	done     chan struct{}
	inFlight sync.WaitGroup
}

func startRepeatingClient(ctx context.Context, c *cluster.Cluster, addr string, every time.Duration) *repeatingClient {
	ctx, cancel := context.WithCancel(ctx)
	cl := &repeatingClient{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cl.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			cl.inFlight.Go(func() {
				// Cancelled at stop, an attempt in flight was sent long after the drop: lost too.
				if r := c.Request(ctx, addr); r.Verdict != cluster.OK {
					cl.mu.Lock()
					cl.failed++
					cl.mu.Unlock()
				}
			})
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return cl
}

func (cl *repeatingClient) lost() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.failed
}

// stop ends the client and returns how many of its attempts were lost (those in flight then give up, and count).
// It waits for every attempt in flight to return: on a loaded machine a cancelled one can take over a second,
// and one counted late was an attempt the node lost all the same.
func (cl *repeatingClient) stop() int {
	cl.cancel()
	<-cl.done
	cl.inFlight.Wait()
	return cl.lost()
}

// TestEventsShippedPath: the Event writer as deploy/overlays/events ships it. On node-1 and node-2 the overlay's
// pod as runPodAsShipped runs it (the exporter on 127.0.0.1 with --events.write and its pod's name and namespace,
// kube-rbac-proxy with its manifest's args and TLS on the node's address; only a 1 s poll and a 3 s quiet period
// added, for time), the overlay's RBAC applied as rendered, the overlay's Service and the EndpointSlice the
// EndpointSlice controller would write for it. So the leader finds its peers at the Service's target port, asks
// them over https with the exporter ServiceAccount's own token, and each peer's kube-rbac-proxy checks it with a
// TokenReview and a SubjectAccessReview for GET /episodes against the real apiserver. First without the overlay's
// nonResourceURL grant: every peer refuses the leader (peers_unreachable 2, one log line per peer saying why)
// and the episode node-2 then ends (as in TestEventsOneWriterPerCluster) is written nowhere. With the grant, once
// kube-rbac-proxy's cached denial expires (30 s after node-2's first, which the rest of the test overlaps: about
// 33 s in all), exactly one Event for it. kube-rbac-proxy serves a certificate from a test CA for both nodes'
// addresses, as a cluster owner would give it, and the exporters verify their peers with --events.peers-ca-file.
func TestEventsShippedPath(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	const ns = "e2e-events-shipped"
	objs := renderDeploy(t, c, "overlays/events")
	ds := renderedDaemonSet(t, c, "overlays/events")
	ctr := &ds.Spec.Template.Spec.Containers[0]
	// Verified TLS between the peers: the CA's certificate (testPKI's ca.crt) goes to the exporters, the serving
	// certificate to each node's kube-rbac-proxy.
	pki := t.TempDir()
	_, certFile, keyFile := testPKI(t, pki, c.Node("node-1").IP, c.Node("node-2").IP)
	caFile := filepath.Join(pki, "ca.crt")
	ctr.Args = append(ctr.Args, "--arrivals.quiet-period="+eventsQuiet.String(), "--events.poll-interval=1s",
		"--events.peers-ca-file="+caFile)
	proxy := &ds.Spec.Template.Spec.Containers[1]
	proxy.Args = append(proxy.Args, "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	admin := c.Admin()
	t.Cleanup(func() {
		_ = admin.CoordinationV1().Leases(cluster.ExporterNamespace).Delete(context.Background(), eventsLease, metav1.DeleteOptions{})
	})

	// The overlay's RBAC as rendered, its ClusterRole first without the /episodes rule.
	var rbac []*unstructured.Unstructured
	var role, exportersSvc *unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetName() == "localtraffic-exporter-events" && o.GetKind() == "ClusterRole":
			role = o
			rbac = append(rbac, o)
		case o.GetName() == "localtraffic-exporter-events":
			rbac = append(rbac, o)
		case o.GetKind() == "Service" && o.GetName() == ds.Name:
			exportersSvc = o
		}
	}
	if len(rbac) != 4 || role == nil || exportersSvc == nil {
		fatalf(t, "deploy/overlays/events renders %d objects of the writer's RBAC (want 4), ClusterRole %v, Service %v", len(rbac), role != nil, exportersSvc != nil)
	}
	denied := role.DeepCopy()
	rules, _, _ := unstructured.NestedSlice(denied.Object, "rules")
	var kept []any
	for _, r := range rules {
		if _, ok := r.(map[string]any)["nonResourceURLs"]; !ok {
			kept = append(kept, r)
		}
	}
	if len(kept) != len(rules)-1 {
		fatalf(t, "the overlay's ClusterRole has %d rules, %d without nonResourceURLs: want exactly one /episodes rule", len(rules), len(kept))
	}
	if err := unstructured.SetNestedSlice(denied.Object, kept, "rules"); err != nil {
		fatalln(t, err)
	}
	var first []*unstructured.Unstructured
	for _, o := range rbac {
		if o == role {
			o = denied
		}
		first = append(first, o)
	}
	if err := c.Apply(ctx, first); err != nil {
		fatalln(t, err)
	}
	var typedSvc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(exportersSvc.Object, &typedSvc); err != nil {
		fatalln(t, err)
	}
	if _, err := admin.CoreV1().Services(typedSvc.Namespace).Create(ctx, &typedSvc, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		ctx, r := context.Background(), admin.RbacV1()
		_ = r.Roles(cluster.ExporterNamespace).Delete(ctx, "localtraffic-exporter-events", metav1.DeleteOptions{})
		_ = r.RoleBindings(cluster.ExporterNamespace).Delete(ctx, "localtraffic-exporter-events", metav1.DeleteOptions{})
		_ = r.ClusterRoles().Delete(ctx, "localtraffic-exporter-events", metav1.DeleteOptions{})
		_ = r.ClusterRoleBindings().Delete(ctx, "localtraffic-exporter-events", metav1.DeleteOptions{})
		_ = admin.CoreV1().Services(exportersSvc.GetNamespace()).Delete(ctx, exportersSvc.GetName(), metav1.DeleteOptions{})
	})

	svc := newService(t, c, ns, "web", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	pods := startPods(t, c, svc, "node-1", "node-2")
	setEndpoints(t, c, svc, ready(pods...))
	deploymentOf(t, c, svc)

	// node-2's pod first, listed from the start: its kube-rbac-proxy's first denial, whose cache the grant must
	// outlive, comes while node-1's pod starts and the episode is made.
	start := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), what) }
	nodes := []*cluster.Node{c.Node("node-2"), c.Node("node-1")}
	exportersSlice(t, c, ds, exportersSvc, nodes)
	shipped := map[string]*shippedPod{}
	for _, n := range nodes {
		shipped[n.Name] = runPodAsShipped(t, c, ds, n, nil)
		step(n.Name + "'s pod ready")
	}

	reader := metricsReaderToken(t, c)
	scrape := func(node string, checks ...func(cluster.Metrics) error) error {
		code, body, err := getAs(ctx, c.Node(node), shipped[node].metricsBase+"/metrics", reader)
		if err != nil || code != 200 {
			return fmt.Errorf("scrape %s through kube-rbac-proxy: %d %v", node, code, err)
		}
		m, err := cluster.ParseMetrics(body)
		if err != nil {
			return err
		}
		var errs []error
		for _, ch := range checks {
			errs = append(errs, ch(m))
		}
		return errors.Join(errs...)
	}
	var leader *cluster.Node
	eventually(t, converge, "one shipped exporter leads", func() error {
		l, err := admin.CoordinationV1().Leases(cluster.ExporterNamespace).Get(ctx, eventsLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if h := l.Spec.HolderIdentity; h != nil && *h == shippedPodName(ds, n) {
				leader = n
				return scrape(n.Name, metricIs("localtraffic_event_writer_leader", nodeLabels(n.Name), 1))
			}
		}
		return fmt.Errorf("the Lease's holder is %v, no shipped pod", l.Spec.HolderIdentity)
	})
	leaderLog := func() string { return shipped[leader.Name].proc.logs.String() }
	refused := func(n *cluster.Node) string {
		return fmt.Sprintf(`"peer":%q,"url":"https://%s/episodes","err":"forbidden`, n.Name, net.JoinHostPort(n.IP, "9746"))
	}
	eventually(t, converge, "without the /episodes grant every peer refuses the leader", func() error {
		var errs []error
		for _, n := range nodes {
			if !strings.Contains(leaderLog(), refused(n)) {
				errs = append(errs, fmt.Errorf("no line %s in the leader's log", refused(n)))
			}
		}
		return errors.Join(append(errs, scrape(leader.Name, metricIs("localtraffic_event_writer_peers_unreachable", nodeLabels(leader.Name), 2)))...)
	})
	step(leader.Name + "'s pod leads, refused by every peer")

	// The episode, made as TestEventsOneWriterPerCluster makes it.
	addr := nodePortAddr(c.Node("node-2"), svc)
	lost := node2LosesAttempts(t, ctx, c, svc, pods, addr, func() error {
		return scrape("node-2", metricIs("localtraffic_exposure_attempts_counted", nodeLabels("node-2"), 1))
	})
	step("node-2 dropped the client's attempts")
	// node-2's own /episodes, from its loopback (where only the pod itself reaches the exporter).
	eventually(t, converge, "node-2's episode ended", func() error {
		code, body, err := getAs(ctx, c.Node("node-2"), "http://127.0.0.1:9746/episodes", "")
		if err != nil || code != 200 {
			return fmt.Errorf("node-2's /episodes: %d %v", code, err)
		}
		var pg struct{ Episodes []json.RawMessage }
		if err := json.Unmarshal([]byte(body), &pg); err != nil || len(pg.Episodes) != 1 {
			return fmt.Errorf("node-2's /episodes: %v: %s", err, tail(body, 300))
		}
		return nil
	})
	time.Sleep(2 * time.Second) // two polls of the leader after it
	if evs, err := writerEvents(ctx, c, ns); err != nil || len(evs) != 0 {
		fatalf(t, "without the /episodes grant: %d Events (%v), want none: %v", len(evs), err, evs)
	}
	if err := scrape(leader.Name, metricIs("localtraffic_event_writer_peers_unreachable", nodeLabels(leader.Name), 2),
		metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": leader.Name, "result": "written"}, 0)); err != nil {
		errorln(t, err)
	}
	for _, n := range nodes {
		if k := strings.Count(leaderLog(), refused(n)); k != 1 {
			errorf(t, "the leader logged %d lines about peer %s forbidding it, want 1 (a peer's failure is logged when it begins):\n%s", k, n.Name, tail(leaderLog(), 3000))
		}
	}
	step("the episode ended, no Event")

	// The grant as shipped: once kube-rbac-proxy's cached denial expires, the episode's one Event.
	if err := c.Apply(ctx, []*unstructured.Unstructured{role}); err != nil {
		fatalln(t, err)
	}
	ev := oneEpisodeEvent(t, ctx, c, svc, converge, "one Event regarding the Service, through kube-rbac-proxy",
		shippedPodName(ds, leader), lost)
	step(fmt.Sprintf("Event %s from %s: %s (the client lost %d)", ev.Name, ev.ReportingInstance, ev.Note, lost))
	eventually(t, converge, "the leader reaches every peer", func() error {
		return scrape(leader.Name, metricIs("localtraffic_event_writer_peers_unreachable", nodeLabels(leader.Name), 0),
			metricIs("localtraffic_event_writer_events_total", cluster.Labels{"node": leader.Name, "result": "written"}, 1))
	})
	if !strings.Contains(leaderLog(), `"msg":"event writer: peer answers again","peer":"node-2"`) {
		errorf(t, "the leader did not log node-2 answering again:\n%s", tail(leaderLog(), 3000))
	}
	time.Sleep(2 * time.Second)
	if evs, err := writerEvents(ctx, c, ns); err != nil || len(evs) != 1 {
		errorf(t, "%d Events (%v) two polls later, want still 1", len(evs), err)
	}
}

// exportersSlice is the EndpointSlice the EndpointSlice controller writes for the exporters' Service svc with ds's
// pods on nodes: each pod's address (the node's: hostNetwork), its node and Pod, and the Service's port resolved
// through its targetPort's name to the container port that declares it (kube-rbac-proxy's).
func exportersSlice(t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, svc *unstructured.Unstructured, nodes []*cluster.Node) {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 {
		fatalf(t, "the exporters' Service has %d ports, want 1", len(ports))
	}
	sp := ports[0].(map[string]any)
	name, _ := sp["name"].(string)
	target, _ := sp["targetPort"].(string)
	var port int32
	for _, ctr := range ds.Spec.Template.Spec.Containers {
		for _, cp := range ctr.Ports {
			if cp.Name == target {
				port = cp.ContainerPort
			}
		}
	}
	if port == 0 {
		fatalf(t, "no container of the DaemonSet declares the Service's targetPort %q", target)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.GetName() + "-shipped", Namespace: svc.GetNamespace(), Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.GetName(), discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(name), Port: new(port), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, n := range nodes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{n.IP}, NodeName: new(n.Name),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ds.Namespace, Name: shippedPodName(ds, n)},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)}})
	}
	ctx := testContext(t)
	if _, err := c.Admin().DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().DiscoveryV1().EndpointSlices(slice.Namespace).Delete(context.Background(), slice.Name, metav1.DeleteOptions{})
	})
}
