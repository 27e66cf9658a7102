package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The churn TestRulesModelEqualsFullReadUnderChurn makes, and how long it looks.
const (
	driftServices = 20               // Local Services, half NodePort, half LoadBalancer with an ingress IP
	driftEvery    = 2 * time.Second  // one API change each
	driftChurnFor = 70 * time.Second // about 35 changes: as many kube-proxy syncs on every node
	// driftSlack: how much longer than the churn the on-node tests compare, so that they start and end
	// around it whatever their start's skew (their comparison at rest comes after).
	driftSlack = 10 * time.Second
	// driftMinGenerations: the rule generations each on-node test must have compared (kube-proxy's commits:
	// an iptables-mode sync is two, nftables mode's one). Under half the changes leaves room for a slow
	// machine, where kube-proxy coalesces changes into fewer syncs.
	driftMinGenerations = 15
)

// TestRulesModelEqualsFullReadUnderChurn: the rules the exporter keeps between kube-proxy's syncs (kept
// tables vouched for by nf_tables change notifications, re-read only where a notified change touched them)
// stay equal to a full read through an API churn, on node-2 (iptables mode with the host's default backend:
// nft on Debian; the shared cluster has no legacy node) and node-4 (nftables mode).
//
// Twenty Local Services (NodePort, and LoadBalancer with ingress IPs) have endpoints on the measured nodes and
// elsewhere; every two seconds for 70 s one changes: its endpoints on node-2 and node-4 appear or go (some not
// ready, some serving while terminating), its remote endpoints move, now and then a load balancer IP moves or
// a Service is created or deleted. Meanwhile nodeprobe/kernelrules' TestOnNodeWatchEqualsFull runs in each
// measured node's namespace (the package's test binary, as TestScaleRules runs it): the exporter's reader
// with its Watch running, read at every changed call and every commit of the rules, compared with a full
// read of the same generation, and once more at rest; beside it a reader with a notification buffer so small
// that syncs overrun it, which must resynchronise and agree too. Each must compare at least driftMinGenerations
// generations and find no difference. The cluster's own exporters must say notifications vouched for their
// rules (localtraffic_rules_watch_state{state="notified"} 1, or polled for a legacy node) and not have
// resynchronised during the churn (localtraffic_rules_resyncs_total unchanged).
func TestRulesModelEqualsFullReadUnderChurn(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	start := time.Now()
	const ns = "e2e-drift"
	measured := []*cluster.Node{c.Node("node-2"), c.Node("node-4")}

	// The test binary builds while the Services are written.
	type built struct {
		bin string
		err error
	}
	binc, binDir := make(chan built, 1), t.TempDir()
	go func() {
		bin, err := cluster.BuildRulesTest(ctx, binDir)
		binc <- built{bin, err}
	}()

	ch := newDriftChurn(t, c, ns, measured)
	for _, n := range measured {
		if err := n.WaitKubeProxySynced(ctx, converge); err != nil {
			fatalln(t, err)
		}
	}
	// The exporters' states before the churn: each must have read the Services' rules, vouched for as its
	// backend allows.
	resyncs0 := map[string]float64{}
	for _, n := range c.Nodes() {
		eventually(t, converge, n.Name+"'s exporter reads the rules", func() error {
			m, err := c.Metrics(ctx, n.Name)
			if err != nil {
				return err
			}
			if err := expectWatchState(m, n); err != nil {
				return err
			}
			v, ok, err := m.Value("localtraffic_rules_resyncs_total", nodeLabels(n.Name))
			if err == nil && !ok {
				err = fmt.Errorf("no localtraffic_rules_resyncs_total")
			}
			resyncs0[n.Name] = v
			return err
		})
	}
	b := <-binc
	if b.err != nil {
		fatalln(t, b.err)
	}
	t.Logf("%d Services, kube-proxy synced and the on-node test built in %s", driftServices, time.Since(start).Round(time.Second))

	runs := startDriftRuns(t, c, b.bin, measured)
	churnStart := time.Now()
	changes := ch.run(ctx, driftChurnFor)
	t.Logf("churn: %d API changes in %s (%s)", changes, time.Since(churnStart).Round(time.Second), ch.summary())
	for _, r := range runs {
		err := r.wait(ctx, driftChurnFor+driftSlack+3*time.Minute)
		t.Logf("%s (%s): TestOnNodeWatchEqualsFull:\n%s", r.node.Name, r.node.ProxyMode, r.out.String())
		if err != nil {
			errorf(t, "%s: the on-node comparison failed: %v", r.node.Name, err)
		}
	}

	for _, n := range c.Nodes() {
		m, err := c.Metrics(ctx, n.Name)
		if err != nil {
			fatalln(t, err)
		}
		if err := expectWatchState(m, n); err != nil {
			errorf(t, "after the churn: %v", err)
		}
		if v, _, err := m.Value("localtraffic_rules_resyncs_total", nodeLabels(n.Name)); err != nil || v != resyncs0[n.Name] {
			errorf(t, "%s: localtraffic_rules_resyncs_total %v after the churn, %v before (%v): the exporter's rules drifted or lost notifications",
				n.Name, v, resyncs0[n.Name], err)
		}
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Second))
}

// expectWatchState wants the node's exporter to say that change notifications vouched for its last read of
// the rules (the nft backend, nftables mode), or the polled signal (the legacy backend).
func expectWatchState(m cluster.Metrics, n *cluster.Node) error {
	want := "notified"
	for _, s := range m.Series("localtraffic_rules_info", nodeLabels(n.Name)) {
		for _, l := range s.GetLabel() {
			if l.GetName() == "backend" && l.GetValue() == "legacy" {
				want = "polled"
			}
		}
	}
	v, ok, err := m.Value("localtraffic_rules_watch_state", cluster.Labels{"node": n.Name, "state": want})
	if err != nil || !ok || v != 1 {
		return fmt.Errorf("%s (%s): localtraffic_rules_watch_state{state=%q} %v (present %v, %v), want 1:\n%s",
			n.Name, n.ProxyMode, want, v, ok, err, m.Grep("localtraffic_rules_watch_state", "localtraffic_rules_info"))
	}
	return nil
}

// driftChurn is the API churn: Services whose endpoints, load balancer IPs and existence change.
type driftChurn struct {
	t        *testing.T
	c        *cluster.Cluster
	ns       string
	measured []*cluster.Node
	rnd      *rand.Rand
	// pools: made-up pods per node (no network namespace: kube-proxy programs what the slices say, and no
	// packet is sent to them).
	pools    map[string][]*cluster.Pod
	services []*corev1.Service             // the ones that exist
	eps      map[string][]cluster.Endpoint // each one's endpoints, by name
	extra    int                           // Services created by the churn so far
	lbIPs    int                           // load balancer IPs handed out so far
	counts   map[string]int                // changes by kind
}

// newDriftChurn creates the Services with their first endpoints; a cleanup deletes every one still there.
func newDriftChurn(t *testing.T, c *cluster.Cluster, ns string, measured []*cluster.Node) *driftChurn {
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	ch := &driftChurn{t: t, c: c, ns: ns, measured: measured, rnd: rand.New(rand.NewPCG(1, 2)),
		pools: map[string][]*cluster.Pod{}, eps: map[string][]cluster.Endpoint{}, counts: map[string]int{}}
	for _, n := range c.Nodes() {
		base := netip.MustParsePrefix(n.PodCIDR).Addr().As4()
		for k := range 4 {
			ip := base
			ip[3] = byte(200 + k) // above the harness's pods, which count up from .10
			ch.pools[n.Name] = append(ch.pools[n.Name], &cluster.Pod{Namespace: ns, Name: fmt.Sprintf("drift-%s-%d", n.Name, k),
				Node: n.Name, IP: netip.AddrFrom4(ip).String()})
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, svc := range ch.services {
			if err := ch.delete(ctx, svc); err != nil {
				errorf(t, "cleanup: %v", err)
			}
		}
	})
	for i := range driftServices {
		typ := corev1.ServiceTypeNodePort
		if i%2 == 1 {
			typ = corev1.ServiceTypeLoadBalancer
		}
		if err := ch.create(ctx, fmt.Sprintf("s%02d", i), typ); err != nil {
			fatalln(t, err)
		}
	}
	return ch
}

// create creates a Service with endpoints drawn at random and, for a LoadBalancer, an ingress IP.
func (ch *driftChurn) create(ctx context.Context, name string, typ corev1.ServiceType) error {
	created, err := ch.c.Admin().CoreV1().Services(ch.ns).Create(ctx, cluster.NewService(ch.ns, name, typ), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Service %s/%s: %w", ch.ns, name, err)
	}
	ch.services = append(ch.services, created)
	if typ == corev1.ServiceTypeLoadBalancer {
		if err := ch.c.SetLoadBalancerIngress(ctx, ch.ns, name, cluster.VIPIngress(ch.lbIP())); err != nil {
			return err
		}
	}
	return ch.setEndpoints(ctx, name)
}

// setEndpoints draws the named Service's next endpoints and writes them.
func (ch *driftChurn) setEndpoints(ctx context.Context, name string) error {
	eps := ch.endpoints(ch.eps[name])
	ch.eps[name] = eps
	return ch.c.SetEndpoints(ctx, ch.ns, name, eps)
}

// delete deletes a Service and its EndpointSlices (gone already is fine).
func (ch *driftChurn) delete(ctx context.Context, svc *corev1.Service) error {
	if err := ch.c.DeleteEndpoints(ctx, svc.Namespace, svc.Name); err != nil {
		return err
	}
	err := ch.c.Admin().CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// lbIP hands out the next load balancer IP of 192.0.2.200–249 (TEST-NET-1; the other tests use lower ones),
// each to one Service at a time.
func (ch *driftChurn) lbIP() string {
	ch.lbIPs++
	return fmt.Sprintf("192.0.2.%d", 200+ch.lbIPs%50)
}

// endpoints draws a Service's next endpoints after prev: on each measured node none, or one or two, flipped
// half the time (appearing where there were none, going where there were), some not ready or serving while
// terminating; on the other nodes one or two, moving every time.
func (ch *driftChurn) endpoints(prev []cluster.Endpoint) []cluster.Endpoint {
	var eps []cluster.Endpoint
	for _, n := range ch.c.Nodes() {
		pool := ch.pools[n.Name]
		k := 1 + ch.rnd.IntN(2)
		if isMeasured(ch.measured, n) {
			local := false
			for _, ep := range prev {
				local = local || ep.Pod.Node == n.Name
			}
			if ch.rnd.IntN(2) == 0 {
				local = !local
			}
			if !local {
				k = 0
			}
		}
		for _, i := range ch.rnd.Perm(len(pool))[:k] {
			ep := cluster.Endpoint{Pod: pool[i]}
			switch ch.rnd.IntN(6) {
			case 0: // failing its readiness probe
				ep.Ready, ep.Serving = cluster.Bool(false), cluster.Bool(false)
			case 1: // being deleted, still serving
				ep.Ready, ep.Serving, ep.Terminating = cluster.Bool(false), cluster.Bool(true), cluster.Bool(true)
			}
			eps = append(eps, ep)
		}
	}
	return eps
}

func isMeasured(measured []*cluster.Node, n *cluster.Node) bool {
	for _, m := range measured {
		if m.Name == n.Name {
			return true
		}
	}
	return false
}

// run changes one thing every driftEvery for d and returns how many changes it made; a failed change fails
// the test.
func (ch *driftChurn) run(ctx context.Context, d time.Duration) int {
	tick := time.NewTicker(driftEvery)
	defer tick.Stop()
	end := time.Now().Add(d)
	n := 0
	for step := 0; time.Now().Before(end); step++ {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		var err error
		kind := ""
		switch {
		case step%10 == 9 && ch.extra > 0 && len(ch.services) > driftServices:
			kind = "Service deleted"
			i := driftServices + ch.rnd.IntN(len(ch.services)-driftServices)
			svc := ch.services[i]
			ch.services = append(ch.services[:i], ch.services[i+1:]...)
			err = ch.delete(ctx, svc)
		case step%10 == 9 || step%10 == 4 && ch.extra == 0:
			kind = "Service created"
			typ := corev1.ServiceTypeNodePort
			if ch.extra%2 == 1 {
				typ = corev1.ServiceTypeLoadBalancer
			}
			err = ch.create(ctx, fmt.Sprintf("extra-%02d", ch.extra), typ)
			ch.extra++
		case step%10 == 6:
			kind = "load balancer IP moved"
			svc := ch.services[1+2*ch.rnd.IntN(driftServices/2)]
			err = ch.c.SetLoadBalancerIngress(ctx, ch.ns, svc.Name, cluster.VIPIngress(ch.lbIP()))
		default:
			kind = "endpoints changed"
			err = ch.setEndpoints(ctx, ch.services[ch.rnd.IntN(len(ch.services))].Name)
		}
		if err != nil {
			errorf(ch.t, "churn step %d (%s): %v", step, kind, err)
			continue
		}
		ch.counts[kind]++
		n++
	}
	return n
}

func (ch *driftChurn) summary() string {
	var parts []string
	for _, k := range []string{"endpoints changed", "load balancer IP moved", "Service created", "Service deleted"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, ch.counts[k]))
	}
	return strings.Join(parts, ", ")
}

// driftRun is TestOnNodeWatchEqualsFull running in one node's namespace.
type driftRun struct {
	node    *cluster.Node
	proc    *cluster.Process
	out     *lockedBuffer
	ready   chan struct{}
	scanned chan struct{} // closed once its output is read to the end
}

// startDriftRuns starts TestOnNodeWatchEqualsFull on every measured node at once and returns once each says
// it is ready (its watchers have their baseline): the churn starts then.
func startDriftRuns(t *testing.T, c *cluster.Cluster, bin string, nodes []*cluster.Node) []*driftRun {
	var runs []*driftRun
	t.Cleanup(func() {
		for _, r := range runs {
			r.proc.Stop(0) // one still running (the test failed before waiting for it) is killed
		}
	})
	for _, n := range nodes {
		r := &driftRun{node: n, out: &lockedBuffer{}, ready: make(chan struct{}), scanned: make(chan struct{})}
		pr, pw := io.Pipe()
		var err error
		r.proc, err = cluster.StartProcess(cluster.ProcessSpec{Name: "rules-drift-" + n.Name, LogDir: c.WorkDir, NS: n.NS, Bin: bin,
			Args: []string{"-rules.on-node", "-rules.drift-for=" + (driftChurnFor + driftSlack).String(),
				fmt.Sprintf("-rules.drift-min=%d", driftMinGenerations), "-test.run", "^TestOnNodeWatchEqualsFull$", "-test.v"},
			Stdout: pw, Stderr: pw})
		if err != nil {
			fatalln(t, err)
		}
		var once sync.Once
		go func() {
			defer close(r.scanned)
			s := bufio.NewScanner(pr)
			for s.Scan() {
				r.out.Write(append(s.Bytes(), '\n'))
				if strings.HasPrefix(s.Text(), "lt-drift: ready") {
					once.Do(func() { close(r.ready) })
				}
			}
		}()
		go func() {
			<-r.proc.Done()
			pw.Close()
		}()
		runs = append(runs, r)
	}
	for _, r := range runs {
		select {
		case <-r.ready:
		case <-r.proc.Done():
			fatalf(t, "%s: TestOnNodeWatchEqualsFull ended before it was ready: %v\n%s", r.node.Name, r.proc.Wait(), r.out.String())
		case <-time.After(converge):
			fatalf(t, "%s: TestOnNodeWatchEqualsFull not ready within %s:\n%s", r.node.Name, converge, r.out.String())
		}
	}
	return runs
}

// wait waits for the run to end, at most timeout, and returns its exit error.
func (r *driftRun) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-r.proc.Done():
		<-r.scanned
		return r.proc.Wait()
	case <-time.After(timeout):
		r.proc.Stop(0)
		return fmt.Errorf("still running after %s: killed", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
