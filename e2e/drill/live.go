package drill

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// LiveManifest is what the live drill applies: the Service as drill.md describes it and a Deployment of three
// replicas pinned to node (the nodeSelector the fix removes). Its containers are stand-ins: the node agent
// answers HTTP on the container port with the pod's name, whatever the image.
func LiveManifest(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Service
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector:
    app: %[2]s
  ports:
  - name: http
    port: 80
    targetPort: %[3]d
    nodePort: %[4]d
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  replicas: %[5]d
  selector:
    matchLabels:
      app: %[2]s
  template:
    metadata:
      labels:
        app: %[2]s
    spec:
      nodeSelector:
        kubernetes.io/hostname: %[6]s
      terminationGracePeriodSeconds: 2
      containers:
      - name: %[2]s
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        args: ["netexec", "--http-port=%[3]d"]
        ports:
        - name: http
          containerPort: %[3]d
`, Namespace, Service, TargetPort, NodePort, Replicas, node)
}

// Shell runs operator commands with bash in the outside client's namespace: the pinned kubectl first on PATH,
// KUBECONFIG the harness's in-namespace admin kubeconfig, curl reaching nodes as an outside client does.
type Shell struct {
	c    *cluster.Cluster
	home string
}

// NewShell prepares a shell for c (its HOME, for kubectl's cache, lives in the cluster's work directory).
func NewShell(c *cluster.Cluster) (*Shell, error) {
	home := filepath.Join(c.WorkDir, "operator-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("operator home: %w", err)
	}
	return &Shell{c: c, home: home}, nil
}

// Run runs script (stdin as its standard input when not empty) and returns its combined output.
func (s *Shell) Run(ctx context.Context, script, stdin string) (string, error) {
	cmd := netns.Command(ctx, s.c.ClientNS, "bash", "-c", script)
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(s.c.Binaries().Kubectl)+":"+os.Getenv("PATH"),
		"KUBECONFIG="+s.c.AdminKubeconfigInNamespaces(),
		"HOME="+s.home,
	)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w\n%s", firstLine(script), err, out.String())
	}
	return out.String(), nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Transcript receives each command and its output as a person at the terminal would see them.
type Transcript struct{ W io.Writer }

// Show prints "$ command" and the output, indented.
func (t Transcript) Show(cmd, out string) {
	if t.W == nil {
		return
	}
	fmt.Fprintf(t.W, "    $ %s\n", strings.ReplaceAll(cmd, "\n", "\n      "))
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Fprintf(t.W, "    %s\n", l)
	}
}

// RunShown runs cmd in the shell and shows it in the transcript.
func (s *Shell) RunShown(ctx context.Context, t Transcript, cmd string) (string, error) {
	out, err := s.Run(ctx, cmd, "")
	t.Show(cmd, out)
	return out, err
}

// ApplyLive creates the Service and the Deployment pinned to node with kubectl apply, and waits for the
// rollout (kubectl rollout status).
func ApplyLive(ctx context.Context, s *Shell, t Transcript, node string) error {
	out, err := s.Run(ctx, "kubectl apply -f -", LiveManifest(node))
	t.Show("kubectl apply -f checkout.yaml   # Service NodePort 30090 (Local), Deployment 3 replicas, nodeSelector "+node, out)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err = s.RunShown(rctx, t, RolloutStatus)
	return err
}

// CleanupLive deletes the drill's namespace objects the live drill created and waits until the pods are gone.
func CleanupLive(ctx context.Context, c *cluster.Cluster) error {
	admin := c.Admin()
	bg := metav1.DeletePropagationBackground
	if err := admin.AppsV1().Deployments(Namespace).Delete(ctx, Service, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete drill Deployment: %w", err)
	}
	if err := admin.CoreV1().Services(Namespace).Delete(ctx, Service, metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete drill Service: %w", err)
	}
	return cluster.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, func() error {
		pods, err := admin.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + Service})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d drill pods left", len(pods.Items))
		}
		return nil
	})
}

// LiveRow is one worker's line of the live drill: what the drill's curl loop printed for its IP and what the
// node's exporter says.
type LiveRow struct {
	Node, IP string
	// Curl is the loop's word for the node: "ok" or "BLACKHOLE" ("" when the loop did not list the node).
	Curl string
	// Replicas is how many running replicas the node holds (from the API).
	Replicas int
	// Blackhole is the exporter's localtraffic_blackhole for kubelings/checkout on the node; Known is false
	// when it had no such series (or the scrape failed: ScrapeErr).
	Blackhole float64
	Known     bool
	ScrapeErr error
}

// Agrees reports whether the exporter's verdict matches the curl loop's.
func (r LiveRow) Agrees() bool {
	return r.Known && r.ScrapeErr == nil && r.Curl != "" && (r.Curl == "BLACKHOLE") == (r.Blackhole == 1)
}

// ParseTrafficLoop reads the curl loop's "<ip>: ok|BLACKHOLE" lines.
func ParseTrafficLoop(out string) map[string]string {
	res := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		ip, word, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": ")
		if ok && (word == "ok" || word == "BLACKHOLE") {
			res[ip] = word
		}
	}
	return res
}

// ObserveLive runs the drill's curl loop unchanged and scrapes every worker's exporter. It returns one row per
// worker (control-plane nodes are not in the loop, as in drill.md) and the loop's raw output.
func ObserveLive(ctx context.Context, c *cluster.Cluster, s *Shell) ([]LiveRow, string, error) {
	out, err := s.Run(ctx, ObserveTraffic, "")
	if err != nil {
		return nil, out, err
	}
	words := ParseTrafficLoop(out)
	replicas, err := RunningReplicas(ctx, c, Namespace, "app="+Service)
	if err != nil {
		return nil, out, err
	}
	var rows []LiveRow
	for _, n := range c.Nodes() {
		if n.ControlPlane {
			continue
		}
		r := LiveRow{Node: n.Name, IP: n.IP, Curl: words[n.IP], Replicas: replicas[n.Name]}
		m, err := c.Metrics(ctx, n.Name)
		if err != nil {
			r.ScrapeErr = err
		} else {
			v, ok, err := m.Value("localtraffic_blackhole", cluster.Labels{"node": n.Name, "namespace": Namespace, "service": Service})
			r.Blackhole, r.Known, r.ScrapeErr = v, ok, err
		}
		rows = append(rows, r)
	}
	return rows, out, nil
}

// RunningReplicas counts, per node, the Running pods matching selector that are not terminating.
func RunningReplicas(ctx context.Context, c *cluster.Cluster, namespace, selector string) (map[string]int, error) {
	pods, err := c.Admin().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	res := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			res[p.Spec.NodeName]++
		}
	}
	return res, nil
}

// PrintLive writes the rows as a table: node, IP, running replicas, the curl loop's word, the exporter's.
func PrintLive(w io.Writer, rows []LiveRow) {
	rows = append([]LiveRow(nil), rows...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tINTERNAL IP\tRUNNING REPLICAS\tDRILL'S CURL LOOP\tEXPORTER SAYS (localtraffic_blackhole)\t")
	for _, r := range rows {
		curl := r.Curl
		if curl == "" {
			curl = "(not listed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t\n", r.Node, r.IP, r.Replicas, curl, exporterWord(r.ScrapeErr, r.Known, r.Blackhole))
	}
	tw.Flush()
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
