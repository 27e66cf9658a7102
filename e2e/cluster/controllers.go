package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
	"github.com/localtraffic/localtraffic-exporter/e2e/nodeagent"
)

// KubeControllerManagerControllers are the controllers kube-controller-manager runs: the ones the issue's
// scenarios need (Deployment, ReplicaSet, DaemonSet, EndpointSlice, node lifecycle, HPA), the ServiceAccount
// controller (every namespace's "default" ServiceAccount, without which pods are refused), the token
// controller that --use-service-account-credentials pairs with, the garbage collector (old ReplicaSets
// and pods go when their owner is deleted, as kubectl delete expects) and the disruption controller (a
// PodDisruptionBudget's status, which the eviction API and so kubectl drain obey).
var KubeControllerManagerControllers = []string{
	"deployment", "replicaset", "daemonset", "endpointslice", "nodelifecycle", "horizontalpodautoscaling",
	"serviceaccount", "serviceaccount-token", "garbagecollector", "disruption",
}

const (
	controllerManagerPort = 10257
	schedulerPort         = 10259
)

// controllerTokens are the static tokens of kube-controller-manager, kube-scheduler and the node agents.
type controllerTokens struct {
	controllerManager, scheduler string
	nodes                        map[string]string
}

// controllerTokenLines returns the token-file lines for the controllers' own users (empty without controllers):
// system:kube-controller-manager and system:kube-scheduler, which the apiserver's bootstrap RBAC policy binds
// to their ClusterRoles, and system:node:<name> in group system:nodes for each node agent (Node authorizer).
func (c *Cluster) controllerTokenLines() string {
	if !c.cfg.Controllers {
		return ""
	}
	c.ctrlTokens = controllerTokens{controllerManager: randomToken(), scheduler: randomToken(), nodes: map[string]string{}}
	var b strings.Builder
	fmt.Fprintf(&b, "%s,system:kube-controller-manager,kube-controller-manager,\"\"\n", c.ctrlTokens.controllerManager)
	fmt.Fprintf(&b, "%s,system:kube-scheduler,kube-scheduler,\"\"\n", c.ctrlTokens.scheduler)
	for _, n := range c.nodes {
		t := randomToken()
		c.ctrlTokens.nodes[n.Name] = t
		fmt.Fprintf(&b, "%s,system:node:%s,node-%s,\"system:nodes\"\n", t, n.Name, n.Name)
	}
	return b.String()
}

// applyRole labels and taints a control-plane node as kubeadm does.
func (n *Node) applyRole(ctx context.Context) error {
	if !n.ControlPlane {
		return nil
	}
	nodes := n.c.admin.CoreV1().Nodes()
	obj, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("control-plane role of %s: %w", n.Name, err)
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels[ControlPlaneRole] = ""
	// kubeadm's label that keeps control-plane nodes out of external load balancers' target pools; the
	// harness has no cloud provider, so it documents intent only.
	obj.Labels[corev1.LabelNodeExcludeBalancers] = ""
	has := false
	for _, t := range obj.Spec.Taints {
		has = has || t.Key == ControlPlaneRole
	}
	if !has {
		obj.Spec.Taints = append(obj.Spec.Taints, corev1.Taint{Key: ControlPlaneRole, Effect: corev1.TaintEffectNoSchedule})
	}
	if _, err := nodes.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("control-plane role of %s: %w", n.Name, err)
	}
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler in the control-plane namespace, each with
// its own token, waits for their /healthz, starts one node agent per node and waits until every node is Ready
// and the node lifecycle controller has lifted the not-ready taint.
func (c *Cluster) startControllers(ctx context.Context) error {
	for _, b := range []string{c.bins.ControllerManager, c.bins.Scheduler} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("controllers need %w (rebuild with build-bins.sh)", err)
		}
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	pkiDir := filepath.Join(c.WorkDir, "pki")
	kcmConfig := filepath.Join(c.WorkDir, "kube-controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmConfig, c.APIServerURL, ca, "kube-controller-manager", c.ctrlTokens.controllerManager); err != nil {
		return err
	}
	schedConfig := filepath.Join(c.WorkDir, "kube-scheduler.kubeconfig")
	if err := writeKubeconfig(schedConfig, c.APIServerURL, ca, "kube-scheduler", c.ctrlTokens.scheduler); err != nil {
		return err
	}
	c.logf("control plane: kube-controller-manager (%s), kube-scheduler", strings.Join(KubeControllerManagerControllers, ","))
	kcm, err := c.startProcess("kube-controller-manager", c.ControlPlaneNS, c.bins.ControllerManager, append(componentFlags(kcmConfig, controllerManagerPort),
		"--cert-dir="+filepath.Join(c.WorkDir, "kcm-certs"),
		"--leader-elect=false",
		"--controllers="+strings.Join(KubeControllerManagerControllers, ","),
		// Each controller gets its ServiceAccount's token (kube-system/<controller>) and the bootstrap
		// policy's system:controller:<controller> role, as in a kubeadm cluster.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(pkiDir, "sa.key"),
		"--root-ca-file="+c.CAFile,
		// The harness assigns pod CIDRs itself (Node.PodCIDR), so the IPAM controller stays off.
		"--cluster-cidr="+ClusterCIDR,
		"--allocate-node-cidrs=false",
		"--v=1",
	)...)
	if err != nil {
		return err
	}
	c.track(kcm)
	sched, err := c.startProcess("kube-scheduler", c.ControlPlaneNS, c.bins.Scheduler, append(componentFlags(schedConfig, schedulerPort),
		"--leader-elect=false",
		"--v=1",
	)...)
	if err != nil {
		return err
	}
	c.track(sched)
	for _, x := range []struct {
		p    *Process
		port int
	}{{kcm, controllerManagerPort}, {sched, schedulerPort}} {
		if err := x.p.Await(ctx, 2*time.Minute, pollInterval, func() error {
			return httpsHealthz(ctx, c.ControlPlaneNS, x.port)
		}); err != nil {
			return err
		}
	}
	if err := c.startAgents(ca); err != nil {
		return err
	}
	return c.waitNodesSchedulable(ctx, 2*time.Minute)
}

// componentFlags are the flags kube-controller-manager and kube-scheduler share: one kubeconfig for the API
// and for delegating authentication and authorization, and the secure port on loopback only.
func componentFlags(kubeconfig string, port int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
	}
}

// httpsHealthz GETs https://127.0.0.1:<port>/healthz in namespace ns. The components serve a self-signed
// certificate, and /healthz needs no credentials.
func httpsHealthz(ctx context.Context, ns string, port int) error {
	d := netns.Dialer{NS: ns}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:       d.DialContext,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check of a self-signed test component
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// agentSet is the running node agents.
type agentSet struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *agentSet) stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
}

// startAgents starts one node agent per node in this process, each with its node's own token, reaching the
// apiserver through the host's loopback forwarder.
func (c *Cluster) startAgents(ca []byte) error {
	ctx, cancel := context.WithCancel(context.Background())
	set := &agentSet{cancel: cancel}
	c.mu.Lock()
	c.agents = set
	c.mu.Unlock()
	for _, n := range c.nodes {
		client, err := kubernetes.NewForConfig(&rest.Config{
			Host:            c.adminConfig.Host,
			BearerToken:     c.ctrlTokens.nodes[n.Name],
			TLSClientConfig: rest.TLSClientConfig{CAData: ca},
			QPS:             50,
			Burst:           100,
			Timeout:         30 * time.Second,
			UserAgent:       "e2e-nodeagent/" + n.Name,
		})
		if err != nil {
			return fmt.Errorf("node agent client for %s: %w", n.Name, err)
		}
		agent, err := nodeagent.New(nodeagent.Config{
			NodeName:      n.Name,
			Client:        client,
			Sandbox:       podSandbox{c: c, node: n.Name},
			LeaseDuration: 40 * time.Second,
			RenewInterval: 5 * time.Second,
			Logf:          c.logf,
		})
		if err != nil {
			return err
		}
		set.wg.Add(1)
		go func() {
			defer set.wg.Done()
			if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
				c.logf("%v", err)
			}
		}()
	}
	return nil
}

// waitNodesSchedulable waits until every node is Ready and carries no taint but the control-plane one.
func (c *Cluster) waitNodesSchedulable(ctx context.Context, timeout time.Duration) error {
	return waitFor(ctx, timeout, func() error {
		var errs []error
		for _, n := range c.nodes {
			obj, err := c.admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, cond := range obj.Status.Conditions {
				ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
			}
			if !ready {
				errs = append(errs, fmt.Errorf("%s not Ready", n.Name))
			}
			for _, t := range obj.Spec.Taints {
				if t.Key != ControlPlaneRole {
					errs = append(errs, fmt.Errorf("%s tainted %s:%s", n.Name, t.Key, t.Effect))
				}
			}
		}
		return errors.Join(errs...)
	})
}

// podSandbox runs a node agent's pods with the harness's own pod plumbing (pods.go): a network namespace on a
// veth from the node, HTTP servers answering BackendResponse on every container port.
type podSandbox struct {
	c    *Cluster
	node string
}

func (s podSandbox) Start(ctx context.Context, namespace, name string, addrs []string, ports []int) ([]string, error) {
	p, err := s.c.StartPod(ctx, PodConfig{Namespace: namespace, Name: name, Node: s.node, Ports: ports, IPs: addrs})
	if err != nil {
		return nil, err
	}
	// The addresses the pod was wired with (IPv4, and IPv6 on a dual-stack node): the agent reports them in
	// status.podIPs, and the EndpointSlice controller writes one slice per family from them.
	return p.IPs(), nil
}

func (s podSandbox) Stop(ctx context.Context, namespace, name string) error {
	if s.c.Pod(namespace, name) == nil {
		return nil
	}
	return s.c.DeletePod(ctx, namespace, name)
}
