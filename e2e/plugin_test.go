package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// kubectl-localtraffic against the live apiserver of the controller cluster (real scheduler, controllers and node
// agents): the drill, and the scheduler scenarios flagged from the manifests before the replica goes Pending or
// the rollout parks.

// plugin is the built binary and the cluster it talks to.
type plugin struct {
	bin, kubeconfig, nodesFile string
	// ns: the network namespace the plugin runs in (the host's when empty), as an operator's shell beside the
	// test's Prometheus; kubeconfig must reach the apiserver from there.
	ns string
}

// pluginResult is one run: the exit status and what it printed.
type pluginResult struct {
	code        int
	out, errOut string
}

// auditReport is the part of `audit -o json` the tests read.
type auditReport struct {
	Services []struct {
		Service  struct{ Namespace, Name string } `json:"service"`
		Findings []struct {
			ID       string   `json:"id"`
			Severity string   `json:"severity"`
			Nodes    []string `json:"nodes"`
			Message  string   `json:"message"`
		} `json:"findings"`
	} `json:"services"`
}

func (r auditReport) finding(id string) (nodes []string, msg string, ok bool) {
	for _, s := range r.Services {
		for _, f := range s.Findings {
			if f.ID == id {
				return f.Nodes, f.Message, true
			}
		}
	}
	return nil, "", false
}

// worst is the highest severity of the auditReport ("" when clean).
func (r auditReport) worst() string {
	rank := map[string]int{"info": 1, "warning": 2, "critical": 3}
	w := ""
	for _, s := range r.Services {
		for _, f := range s.Findings {
			if rank[f.Severity] > rank[w] {
				w = f.Severity
			}
		}
	}
	return w
}

// newPlugin builds ./cmd/kubectl-localtraffic of the repository and writes the cluster's Nodes, as the
// apiserver returns them, to a file for --nodes-file.
func newPlugin(t *testing.T, ctx context.Context, c *cluster.Cluster) plugin {
	t.Helper()
	mod, err := cluster.ModuleDir()
	if err != nil {
		fatalln(t, err)
	}
	dir := t.TempDir()
	p := plugin{bin: filepath.Join(dir, "kubectl-localtraffic"), kubeconfig: c.AdminKubeconfig(), nodesFile: filepath.Join(dir, "nodes.yaml")}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", p.bin, "./cmd/kubectl-localtraffic")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		fatalf(t, "build kubectl-localtraffic: %v\n%s", err, b)
	}
	nodes, err := c.Admin().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fatalln(t, err)
	}
	nodes.APIVersion, nodes.Kind = "v1", "NodeList"
	for i := range nodes.Items {
		nodes.Items[i].APIVersion, nodes.Items[i].Kind = "v1", "Node"
	}
	b, err := sigsyaml.Marshal(nodes)
	if err != nil {
		fatalln(t, err)
	}
	if err := os.WriteFile(p.nodesFile, b, 0o644); err != nil {
		fatalln(t, err)
	}
	return p
}

func (p plugin) run(t *testing.T, ctx context.Context, stdin string, args ...string) pluginResult {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := netns.Command(cctx, p.ns, p.bin, append(args, "--kubeconfig", p.kubeconfig)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := pluginResult{out: out.String(), errOut: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		fatalf(t, "kubectl-localtraffic %v: %v", args, err)
	}
	t.Logf("$ kubectl-localtraffic %s  (exit %d)\n%s%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	return r
}

func (p plugin) audit(t *testing.T, ctx context.Context, stdin string, args ...string) (auditReport, int) {
	t.Helper()
	r := p.run(t, ctx, stdin, append([]string{"audit", "-o", "json"}, args...)...)
	var rep auditReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		fatalf(t, "audit -o json: %v\n%s%s", err, r.out, r.errOut)
	}
	return rep, r.code
}

// statusBlackholes runs status -o json and returns the exit status and the blackholing nodes of ns/name (the
// document's dropping node names: all of them on a cluster this size).
func (p plugin) statusBlackholes(t *testing.T, ctx context.Context, ns, name string) (int, []string, error) {
	t.Helper()
	r := p.run(t, ctx, "", "status", "-n", ns, name, "-o", "json")
	var st struct {
		Items []struct {
			Dropping      int      `json:"dropping"`
			DroppingNodes []string `json:"droppingNodes"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 || st.Items[0].Dropping != len(st.Items[0].DroppingNodes) {
		return r.code, nil, fmt.Errorf("status -o json (exit %d): %v %s%s", r.code, err, r.out, r.errOut)
	}
	return r.code, append([]string{}, st.Items[0].DroppingNodes...), nil
}

// statusForms runs status in the default, -o wide and -o yaml forms against the drill's pinned Deployment and
// checks each against the nodes that really drop (want, sorted) and the one that serves (pinned).
func (p plugin) statusForms(t *testing.T, ctx context.Context, pinned string, want []string) {
	t.Helper()
	receiving := len(want) + 1
	r := p.run(t, ctx, "", "status", "-A")
	// A CANNOT-TELL column when a node would drop what only it can tell reaches it (the control plane, excluded
	// from load balancers, for a NodePort its clients may still send to).
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+%s\s+NodePort\s+Failing\s+%d\s+1\s+%d\s+(\d+\s+)?%s$`,
		drill.Namespace, drill.Service, receiving, len(want), regexp.QuoteMeta(strings.Join(want, ","))))
	if r.code != 1 || !strings.HasPrefix(r.out, "NAMESPACE ") || !row.MatchString(r.out) {
		errorf(t, "status -A: exit %d, want 1 and the row %s", r.code, row)
	}
	r = p.run(t, ctx, "", "status", "-n", drill.Namespace, "-o", "wide")
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if r.code != 1 || len(lines) != 2 {
		fatalf(t, "status -o wide: exit %d, %d lines, want 1 and a header and a row", r.code, len(lines))
	}
	header, cells := strings.Fields(lines[0]), regexp.MustCompile(`\s{2,}`).Split(lines[1], -1)
	if len(header) != len(cells) {
		fatalf(t, "status -o wide: %d headers, %d cells", len(header), len(cells))
	}
	for i, h := range header {
		node := strings.ToLower(h)
		switch {
		case node == pinned && !strings.HasPrefix(cells[i], "ok "):
			errorf(t, "-o wide: %s shows %q, want ok", node, cells[i])
		case slices.Contains(want, node) && cells[i] != "DROP":
			errorf(t, "-o wide: %s shows %q, want DROP", node, cells[i])
		}
	}
	if !slices.Contains(header, "DROPS") || !slices.Contains(cells, "NodePort 30090/TCP") {
		errorf(t, "-o wide: no DROPS column naming the NodePort")
	}
	r = p.run(t, ctx, "", "status", "-n", drill.Namespace, "-o", "yaml")
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace, Name string
			} `json:"metadata"`
			Status        string   `json:"status"`
			Receiving     int      `json:"receiving"`
			Serving       int      `json:"serving"`
			DroppingNodes []string `json:"droppingNodes"`
		} `json:"items"`
	}
	if err := sigsyaml.Unmarshal([]byte(r.out), &doc); err != nil || doc.APIVersion != "localtraffic.io/v1alpha1" || doc.Kind != "ServiceStatusList" ||
		len(doc.Items) != 1 || doc.Items[0].Kind != "ServiceStatus" || doc.Items[0].Metadata.Name != drill.Service ||
		doc.Items[0].Status != "Failing" || doc.Items[0].Receiving != receiving || doc.Items[0].Serving != 1 ||
		!slices.Equal(doc.Items[0].DroppingNodes, want) {
		errorf(t, "status -o yaml: exit %d, %v: %+v", r.code, err, doc)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := []string{}
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestPluginDrill: the drill's manifest audited before it is applied (against the cluster's own Nodes), then
// status and audit against the live apiserver while the pinned Deployment runs — the blackholing nodes they
// name are the ones the exporters' localtraffic_blackhole and the client's real requests show — and after
// drill.md's fix: clean, exit 0.
func TestPluginDrill(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	p := newPlugin(t, ctx, c)
	sh, tr := liveDrillOperator(t, c)
	pinned := c.Nodes()[0].Name
	blackholed := workers(c)
	delete(blackholed, pinned)
	want := sortedKeys(blackholed)

	// Before it ships: the manifest the drill applies, as CI would see it.
	rep, code := p.audit(t, ctx, drill.LiveManifest(pinned), "-f", "-", "--nodes-file", p.nodesFile)
	if nodes, _, ok := rep.finding("LT101"); code != 1 || !ok || !slices.Equal(nodes, want) {
		errorf(t, "manifest audit: exit %d, LT101 nodes %v, want exit 1 and %v", code, nodes, want)
	}

	if err := drill.ApplyLive(ctx, sh, tr, pinned); err != nil {
		fatalln(t, err)
	}
	// The client's requests and the exporters agree on the blackholing workers; then the plugin names the same.
	observeAgrees(t, ctx, c, sh, tr, blackholed, "the pinned Deployment")
	eventually(t, converge, "status names the blackholing nodes", func() error {
		code, holes, err := p.statusBlackholes(t, ctx, drill.Namespace, drill.Service)
		if err != nil {
			return err
		}
		if code != 1 || !slices.Equal(holes, want) {
			return fmt.Errorf("status exit %d, blackholes %v; want exit 1 and %v", code, holes, want)
		}
		return nil
	})
	p.statusForms(t, ctx, pinned, want)
	// As the operator types it: kubectl finds the plugin on PATH, which reads kubectl's own KUBECONFIG.
	out, err := sh.RunShown(ctx, tr, "PATH="+filepath.Dir(p.bin)+":$PATH kubectl localtraffic status -n kubelings checkout || echo \"exit status $?\"")
	if err != nil || !regexp.MustCompile(`kubelings\s+checkout\s+NodePort\s+Failing\s`).MatchString(out) || !strings.Contains(out, "exit status 1") {
		errorf(t, "kubectl localtraffic status: %v\n%s", err, out)
	}
	rep, code = p.audit(t, ctx, "", "-n", drill.Namespace)
	now, _, okNow := rep.finding("LT100")
	pin, _, okPin := rep.finding("LT101")
	if code != 1 || !okNow || !okPin || !slices.Equal(now, want) || !slices.Equal(pin, want) {
		errorf(t, "live audit: exit %d, LT100 %v, LT101 %v; want exit 1 and %v for both", code, now, pin, want)
	}
	p.run(t, ctx, "", "audit", "-n", drill.Namespace)

	for _, cmd := range drill.FixCommands() {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		_, err := sh.RunShown(cctx, tr, cmd)
		cancel()
		if err != nil {
			fatalln(t, err)
		}
	}
	observeAgrees(t, ctx, c, sh, tr, map[string]bool{}, "after the fix")
	eventually(t, converge, "status clean after the fix", func() error {
		code, holes, err := p.statusBlackholes(t, ctx, drill.Namespace, drill.Service)
		if err != nil {
			return err
		}
		if code != 0 || len(holes) != 0 {
			return fmt.Errorf("status exit %d, blackholes %v", code, holes)
		}
		return nil
	})
	rep, code = p.audit(t, ctx, "", "-n", drill.Namespace)
	if code != 0 || rep.worst() == "warning" || rep.worst() == "critical" {
		errorf(t, "audit after the fix: exit %d, worst %q", code, rep.worst())
	}
	p.run(t, ctx, "", "audit", "-n", drill.Namespace)
}

// manifestOf renders the scenario's Service and Deployment as a CI job would see them.
func manifestOf(t *testing.T, svc *corev1.Service, d *appsv1.Deployment) string {
	t.Helper()
	s, dd := svc.DeepCopy(), d.DeepCopy()
	s.APIVersion, s.Kind = "v1", "Service"
	dd.APIVersion, dd.Kind = "apps/v1", "Deployment"
	var b strings.Builder
	for _, o := range []any{s, dd} {
		y, err := sigsyaml.Marshal(o)
		if err != nil {
			fatalln(t, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}

// TestPluginSchedulerScenarios: the spread without Honor (a replica more than there are workers) and the
// maxSurge rollout under that spread are flagged from their manifests before anything is scheduled; then the
// real scheduler and Deployment controller do what the findings said: a replica Pending, a parked rollout. The
// live audit keeps flagging them, and status shows no blackhole meanwhile.
func TestPluginSchedulerScenarios(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)
	p := newPlugin(t, ctx, c)
	controlPlane := ""
	for _, n := range c.Nodes() {
		if n.ControlPlane {
			controlPlane = n.Name
		}
	}

	t.Run("spread without Honor", func(t *testing.T) {
		const ns, name = "e2e-plugin-spread", "pspread"
		d := deployment(ns, name, ctrlWorkers+1, 1, appsv1.DeploymentStrategy{}, hostnameSpread(name, false))
		rep, code := p.audit(t, ctx, manifestOf(t, cluster.NewService(ns, name, corev1.ServiceTypeNodePort, cluster.WithNodePort(30195)), d), "-f", "-", "--nodes-file", p.nodesFile)
		nodes, msg, ok := rep.finding("LT104")
		if code != 1 || !ok || !slices.Equal(nodes, []string{controlPlane}) || !strings.Contains(msg, "1 of 4 replicas stay Pending") {
			fatalf(t, "manifest audit: exit %d, LT104 %v %q", code, nodes, msg)
		}
		localNodePortService(t, c, ns, name, 30195)
		createDeployment(t, c, d)
		waitOneReadyPerWorkerAndOnePending(t, ctx, c, ns, name, "one replica per worker and one Pending, as the audit said")
		rep, _ = p.audit(t, ctx, "", "-n", ns)
		if _, _, ok := rep.finding("LT104"); !ok {
			errorln(t, "live audit no longer flags the spread")
		}
		statusEventuallyClean(t, ctx, p, ns, name, "status clean with one replica per worker")
	})

	t.Run("maxSurge parks", func(t *testing.T) {
		const ns, name = "e2e-plugin-surge", "psurge"
		d := deployment(ns, name, ctrlWorkers, 1, rollingUpdate(1, 0), hostnameSpread(name, false))
		deadline := int32(15)
		d.Spec.ProgressDeadlineSeconds = &deadline
		rep, code := p.audit(t, ctx, manifestOf(t, cluster.NewService(ns, name, corev1.ServiceTypeNodePort, cluster.WithNodePort(30196)), d), "-f", "-", "--nodes-file", p.nodesFile)
		if _, msg, ok := rep.finding("LT105"); code != 1 || !ok || !strings.Contains(msg, "the rollout parks") {
			fatalf(t, "manifest audit: exit %d, LT105 %v %q", code, ok, msg)
		}
		localNodePortService(t, c, ns, name, 30196)
		createDeployment(t, c, d)
		waitPlacement(t, ctx, c, ns, name, onePerWorker(c, 1))
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/rollout":"%d"}}}}}`, time.Now().UnixNano())
		if _, err := c.Admin().AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			fatalln(t, err)
		}
		waitOneReadyPerWorkerAndOnePending(t, ctx, c, ns, name, "the surge pod Pending, the old replicas serving: the rollout parks as the audit said")
		rep, _ = p.audit(t, ctx, "", "-n", ns)
		if _, _, ok := rep.finding("LT105"); !ok {
			errorln(t, "live audit no longer flags the surge deadlock")
		}
		statusEventuallyClean(t, ctx, p, ns, name, "status clean while parked")
	})
}

// statusEventuallyClean waits until kubectl localtraffic status reports no blackhole for ns/name. A pod is
// Ready a moment before the EndpointSlice controller publishes its endpoint, and status reads the slices.
func statusEventuallyClean(t *testing.T, ctx context.Context, p plugin, ns, name, what string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() error {
		code, holes, err := p.statusBlackholes(t, ctx, ns, name)
		if err != nil || code != 0 || len(holes) != 0 {
			return fmt.Errorf("status: exit %d, blackholes %v, %v", code, holes, err)
		}
		return nil
	})
}

// waitOneReadyPerWorkerAndOnePending waits until each worker runs one ready replica and one pod is
// Unschedulable: what the audit predicted for both scenarios.
func waitOneReadyPerWorkerAndOnePending(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name, what string) {
	t.Helper()
	eventually(t, 3*time.Minute, what, func() error {
		pods, err := podsOf(ctx, c, ns, name)
		if err != nil {
			return err
		}
		pending := 0
		for i := range pods {
			if _, ok := unschedulable(&pods[i]); ok {
				pending++
			}
		}
		got := readyPerNode(pods)
		for n := range workers(c) {
			if got[n] != 1 {
				return fmt.Errorf("ready per node %v, %d Unschedulable; want 1 on each worker and 1 Pending", got, pending)
			}
		}
		if pending != 1 {
			return fmt.Errorf("ready per node %v, %d Unschedulable; want 1 on each worker and 1 Pending", got, pending)
		}
		return nil
	})
}
