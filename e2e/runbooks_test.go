package e2e

// Runbooks that run: every command of docs/runbooks.md, placeholders substituted, runs with the
// real kubectl and the plugin built from this repository against the shared cluster, in the situation of a pinned
// LoadBalancer Service, and must succeed. The commands are read from the markdown, so a runbook added later is
// covered by the same test; the conventions the parser reads are written at the top of docs/runbooks.md.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// runbookCommand is one command of docs/runbooks.md.
type runbookCommand struct {
	section string // the runbook (## heading); "" for the commands before the first
	part    string // the runbook's part ("Do this now", "Confirm", ...: its bold paragraph); "" before the first
	line    int    // where it starts in the file
	text    string // as written, continuation lines joined with their newlines
	// where: "" the operator's machine (kubectl, reaches the nodes' addresses), "node" a shell on the node,
	// "iptables"/"nftables" on a node in that kube-proxy mode.
	where string
	exit  int    // the exit status its `# exit N` comment declares (0 also passes)
	needs string // the cloud CLI its `# needs: <cli>` names: not run
}

var (
	exitMarker  = regexp.MustCompile(`(?:^|\s)#\s*exit (\d+)\b`)
	runbookPart = regexp.MustCompile(`^\*\*([A-Z][^*]*?)\.\*\*`)
	needsMarker = regexp.MustCompile(`(?:^|\s)#\s*needs: (\S+)`)
	// cloudCLIs are the CLIs a `# needs:` marker may name.
	cloudCLIs = map[string]bool{"aws": true, "gcloud": true, "az": true}
	// placeholder finds what the test substitutes (longest names first in the alternation).
	placeholder = regexp.MustCompile(`\b(HEALTH_CHECK_NODE_PORT|NODE_IPV6|NODE_IP|NODE_PORT|NODE|SELECTOR|NS|SVC)\b`)
)

// parseRunbooks reads the fenced sh blocks of a runbooks document into commands.
func parseRunbooks(md string) ([]runbookCommand, error) {
	var cmds []runbookCommand
	section, part, where := "", "", ""
	inBlock := false
	var pending *runbookCommand
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(line, "## "):
			section, part = strings.TrimPrefix(line, "## "), ""
			continue
		case !inBlock && runbookPart.MatchString(line):
			part = runbookPart.FindStringSubmatch(line)[1]
			continue
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			if trimmed != "```sh" {
				return nil, fmt.Errorf("line %d: a fenced block that is not sh (%q): the test runs sh blocks only", n, trimmed)
			}
			inBlock, where = true, ""
			continue
		case inBlock && trimmed == "```":
			if pending != nil {
				return nil, fmt.Errorf("line %d: the block ends inside a continued command", n)
			}
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if pending != nil {
			pending.text += "\n" + line
		} else {
			if trimmed == "" {
				continue
			}
			if strings.HasPrefix(trimmed, "#") {
				switch {
				case strings.HasPrefix(trimmed, "# On the node (iptables mode)"):
					where = "iptables"
				case strings.HasPrefix(trimmed, "# On the node (nftables mode)"):
					where = "nftables"
				case strings.HasPrefix(trimmed, "# On the node"):
					where = "node"
				case strings.HasPrefix(trimmed, "# From "):
					where = ""
				}
				continue
			}
			pending = &runbookCommand{section: section, part: part, line: n, text: line, where: where}
		}
		if strings.HasSuffix(line, `\`) {
			continue
		}
		if m := exitMarker.FindStringSubmatch(pending.text); m != nil {
			pending.exit, _ = strconv.Atoi(m[1])
		}
		if m := needsMarker.FindStringSubmatch(pending.text); m != nil {
			pending.needs = m[1]
		}
		cmds = append(cmds, *pending)
		pending = nil
	}
	if inBlock {
		return nil, errors.New("the document ends inside a fenced block")
	}
	return cmds, sc.Err()
}

func readRunbooks(t *testing.T) []runbookCommand {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(repoDir(t), "docs", "runbooks.md"))
	if err != nil {
		fatalln(t, err)
	}
	cmds, err := parseRunbooks(string(md))
	if err != nil {
		fatalf(t, "docs/runbooks.md: %v", err)
	}
	return cmds
}

// TestRunbooksCommandsAreRunnable holds docs/runbooks.md to what TestRunbooksRun can run (no cluster needed): each
// runbook's Confirm part begins with `kubectl localtraffic status`, its "Do this now" part runs nothing but the
// exclude label (which a later command of the runbook removes: alerts/runbooks_test.go), a `# needs:` marker names
// a known cloud CLI and that CLI runs the command, and no command uses what does not exist (`kubectl logs
// --field-selector`, `port-forward ds/…`, which lands on a random node) or a placeholder the test does not know.
func TestRunbooksCommandsAreRunnable(t *testing.T) {
	cmds := readRunbooks(t)
	first := map[string]runbookCommand{}
	var sections []string
	needs := 0
	for _, c := range cmds {
		if _, ok := first[c.section]; !ok && c.part == "Confirm" {
			first[c.section] = c
		}
		if !slices.Contains(sections, c.section) {
			sections = append(sections, c.section)
		}
		// A mitigation the test runs changes the shared cluster: only the label, undone by the runbook itself and by
		// TestRunbooksRun's cleanup; the others (scale, the policy) stay in the text.
		if c.part == "Do this now" && c.text != "kubectl label node NODE "+excludeLabel+"=true" &&
			!strings.HasPrefix(c.text, "kubectl -n kube-system delete lease cilium-l2announce-NS-SVC --ignore-not-found") {
			errorf(t, "line %d: %q in Do this now: the test runs it; only the exclude label (or the lease that is not there) may change the cluster", c.line, c.text)
		}
		if c.needs != "" {
			needs++
			if !cloudCLIs[c.needs] || !strings.HasPrefix(c.text, c.needs+" ") {
				errorf(t, "line %d: `# needs: %s` on %q: want one of %v, and the command to be that CLI's", c.line, c.needs, c.text, cloudCLIs)
			}
		}
		if regexp.MustCompile(`kubectl[^"$|;]* logs [^"$|;]*--field-selector`).MatchString(c.text) || strings.Contains(c.text, "port-forward ds/") {
			errorf(t, "line %d: %q: kubectl logs has no --field-selector, and port-forward ds/… picks a random node: use the pod on the node (kubectl get pods --field-selector spec.nodeName=NODE -o name)", c.line, c.text)
		}
		if strings.Contains(c.text, "<") && strings.Contains(c.text, ">") && regexp.MustCompile(`<[a-zA-Z' ]+>`).MatchString(c.text) {
			errorf(t, "line %d: %q: a <placeholder> the test cannot substitute (use SELECTOR, NS, SVC, NODE, NODE_IP, ...)", c.line, c.text)
		}
	}
	runbooks := 0
	for _, s := range sections {
		if s == "" {
			continue
		}
		runbooks++
		if c := first[s]; !strings.HasPrefix(c.text, "kubectl localtraffic status") {
			errorf(t, "runbook %s confirms first with %q (line %d), want `kubectl localtraffic status`", s, c.text, c.line)
		}
	}
	if runbooks < 10 || len(cmds) < 50 || needs == 0 {
		errorf(t, "read %d commands in %d runbooks, %d needing a cloud CLI: the parser found too little", len(cmds), runbooks, needs)
	}
	// The parser has teeth: markers and contexts are read as documented.
	got, err := parseRunbooks("## A\n\n**Confirm.**\n\n```sh\nkubectl localtraffic status -A   # exit 1 while a node drops\n# On the node (nftables mode):\nnft list \\\n  ruleset\n# From your machine:\naws x   # needs: aws\n```\n")
	if err != nil || len(got) != 3 || got[0].exit != 1 || got[0].part != "Confirm" || got[1].where != "nftables" || got[1].text != "nft list \\\n  ruleset" ||
		got[2].where != "" || got[2].needs != "aws" {
		errorf(t, "parseRunbooks: %+v, %v", got, err)
	}
}

// TestRunbooksRun runs every command of docs/runbooks.md against the shared cluster, as an operator paged for a
// LoadBalancer Service (externalTrafficPolicy Local) whose only endpoint runs on node-1 would: NODE is node-2, where
// the shipped pod runs (the exporter on 127.0.0.1 behind kube-rbac-proxy on the node's address); kube-proxy's and
// the exporter's pods on the node are mirror pods of the harness's processes, whose logs `kubectl logs` reads
// through the apiserver; Prometheus' ServiceAccount is the one overlays/prometheus-operator binds. Commands run with
// the pinned kubectl and kubectl-localtraffic built from this repository first on PATH, in the outside client's
// namespace (which reaches the nodes' addresses) or, after an "On the node" marker, in the node's namespace (of
// that kube-proxy mode). Each must exit 0, or with the status its `# exit N` comment declares, and print no kubectl
// error.
func TestRunbooksRun(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	cmds := readRunbooks(t)
	installPrometheusOperatorCRDs(t, c)
	installMetalLBCRDs(t, c) // the announcer runbooks list MetalLB's status objects

	// The Service: LoadBalancer, Local, its only ready endpoint on node-1.
	nodes := c.Nodes()
	svc := newService(t, c, "e2e-runbooks", "web", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, nodes[0].Name)...))
	node := nodes[1]
	restoreExcludeLabel(t, c, node.Name)
	var nftNode *cluster.Node
	for _, n := range nodes {
		if n.ProxyMode == cluster.NFTables {
			nftNode = n
		}
	}
	if node.ProxyMode != cluster.IPTables || nftNode == nil {
		fatalf(t, "the shared cluster's node-2 is %s and it has nftables node %v: want an iptables NODE and an nftables node", node.ProxyMode, nftNode)
	}

	// The shipped pod on NODE: the exporter on 127.0.0.1:9746 behind kube-rbac-proxy with the DaemonSet's args.
	ds := renderedDaemonSet(t, c, "base")
	node.StopExporter()
	t.Cleanup(func() {
		node.StopExporterOn(cluster.ExporterPort)
		if err := node.StartExporter(context.Background()); err != nil {
			errorf(t, "restart the harness exporter: %v", err)
		} else if err := node.WaitExporter(context.Background(), time.Minute); err != nil {
			errorf(t, "restart the harness exporter: %v", err)
		}
	})
	if err := node.StartExporterOnLoopback(ctx, cluster.ExporterPort); err != nil {
		fatalln(t, err)
	}
	stop, err := node.StartKubeRBACProxy(ctx, "runbooks", shippedProxyArgsOn(t, ds, node, cluster.ExporterPort)...)
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(stop)
	metricsReaderToken(t, c) // monitoring/prometheus-k8s, bound as the overlay binds it
	eventually(t, time.Minute, "kube-rbac-proxy on "+node.Name, func() error {
		code, _, err := getAs(ctx, node, fmt.Sprintf("https://%s:%d/readyz", node.IP, cluster.ExporterPort), "")
		if err == nil && code != 200 {
			err = fmt.Errorf("/readyz %d", code)
		}
		return err
	})

	// The DaemonSet, its Service and ServiceMonitor as installed (no controller runs them here), and the mirror pods.
	var installed []byte
	for _, o := range renderDeploy(t, c, "overlays/prometheus-operator") {
		if k := o.GetKind(); k == "DaemonSet" || k == "Service" || k == "ServiceMonitor" {
			b, _ := o.MarshalJSON()
			installed = append(append(installed, b...), '\n')
		}
	}
	if _, err := kubectl(ctx, c, installed, "apply", "-f", "-"); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _, _ = kubectl(context.Background(), c, installed, "delete", "--ignore-not-found", "-f", "-") })
	stopLogs, err := c.ServeKubeletLogs(ctx)
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(stopLogs)
	createMirrorPods(t, c, ds, node)

	svc, err = c.Admin().CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	var selector []string
	for k, v := range svc.Spec.Selector {
		selector = append(selector, k+"="+v)
	}
	sort.Strings(selector)
	values := map[string]string{
		"NS": svc.Namespace, "SVC": svc.Name, "NODE": node.Name, "NODE_IP": node.IP, "NODE_IPV6": node.IP6,
		"NODE_PORT": strconv.Itoa(int(svc.Spec.Ports[0].NodePort)), "HEALTH_CHECK_NODE_PORT": strconv.Itoa(int(svc.Spec.HealthCheckNodePort)),
		"SELECTOR": strings.Join(selector, ","),
	}

	plugin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(plugin, "kubectl-localtraffic"), "./cmd/kubectl-localtraffic")
	build.Dir = repoDir(t)
	if out, err := build.CombinedOutput(); err != nil {
		fatalf(t, "build kubectl-localtraffic: %v\n%s", err, out)
	}
	home := filepath.Join(c.WorkDir, "runbooks-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		fatalln(t, err)
	}
	ran := 0
	for _, rc := range cmds {
		if rc.needs != "" {
			continue // TestRunbooksCommandsAreRunnable checks the marker
		}
		text := placeholder.ReplaceAllStringFunc(rc.text, func(p string) string { return values[p] })
		ns := c.ClientNS
		switch rc.where {
		case "node", "iptables":
			ns = node.NS
		case "nftables":
			ns = nftNode.NS
		}
		runCtx, cancel := context.WithTimeout(ctx, time.Minute)
		// As an operator's shell runs it: a pipeline's status is its last command's (the `# exit N` of a grep).
		cmd := netns.Command(runCtx, ns, "bash", "-c", text)
		cmd.Env = append(os.Environ(),
			"PATH="+plugin+":"+filepath.Dir(c.Binaries().Kubectl)+":/usr/sbin:/sbin:"+os.Getenv("PATH"),
			"KUBECONFIG="+c.AdminKubeconfigInNamespaces(), "HOME="+home)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			errorf(t, "docs/runbooks.md:%d (%s): %v", rc.line, rc.section, err)
			continue
		}
		ran++
		// What a pipeline's last command hides: kubectl's own errors (a pod not found, logs not served).
		kubectlErr := regexp.MustCompile(`(?m)^(Error from server|error: )`).FindString(out.String())
		if (code != 0 && code != rc.exit) || kubectlErr != "" {
			errorf(t, "docs/runbooks.md:%d (%s, on %s): exit %d\n$ %s\n%s", rc.line, rc.section, orElse(rc.where, "the operator's machine"), code, text, tail(out.String(), 1500))
		} else {
			t.Logf("docs/runbooks.md:%d: exit %d\n$ %s\n%s", rc.line, code, text, tail(out.String(), 400))
		}
	}
	if ran < 50 {
		errorf(t, "ran %d commands", ran)
	}
}

// restoreExcludeLabel puts node's exclude-from-external-load-balancers label back as it is now when the test ends:
// the runbooks' "Do this now" labels NODE and each runbook removes the label again, but a failed command between
// the two must not leave the shared cluster's node out of the load balancers for the tests after this one.
func restoreExcludeLabel(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	n, err := c.Admin().CoreV1().Nodes().Get(testContext(t), name, metav1.GetOptions{})
	if err != nil {
		fatalln(t, err)
	}
	value, had := n.Labels[excludeLabel]
	t.Cleanup(func() {
		arg := excludeLabel + "-"
		if had {
			arg = excludeLabel + "=" + value
		}
		if _, err := kubectl(context.Background(), c, nil, "label", "--overwrite", "node", name, arg); err != nil {
			errorf(t, "restore %s on %s: %v", excludeLabel, name, err)
		}
	})
}

func orElse(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// createMirrorPods gives node the pods an operator finds there: the exporter's (the DaemonSet's pod template: the
// exporter container's log is the loopback exporter's, kube-rbac-proxy's the proxy's) and kube-proxy's.
func createMirrorPods(t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, node *cluster.Node) {
	t.Helper()
	ctx := testContext(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + node.Name, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels,
			Annotations: map[string]string{
				cluster.MirrorLogAnnotation + ".kube-rbac-proxy": "kube-rbac-proxy-" + node.Name + "-runbooks",
			}},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	kp, kpLog, err := node.KubeProxyMirrorPod()
	if err != nil {
		fatalln(t, err)
	}
	for _, m := range []struct {
		pod *corev1.Pod
		log string
	}{{pod, fmt.Sprintf("exporter-%s-%d", node.Name, cluster.ExporterPort)}, {kp, kpLog}} {
		if err := c.CreateMirrorPod(ctx, m.pod, node, m.log); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() {
			if err := c.DeleteMirrorPod(context.Background(), m.pod.Namespace, m.pod.Name); err != nil {
				errorf(t, "delete mirror pod: %v", err)
			}
		})
	}
}
