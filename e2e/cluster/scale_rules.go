package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// SetNodePortRange restarts kube-apiserver with --service-node-port-range=r (e.g. "30000-40999"): the default
// range holds 2,768 node ports, too few for a node that sees 10,000 NodePort Services. Clients (kube-proxy,
// exporters) reconnect as after any API outage. Call it before creating Services.
func (c *Cluster) SetNodePortRange(ctx context.Context, r string) error {
	c.mu.Lock()
	args := append([]string(nil), c.apiserverArgs...)
	c.mu.Unlock()
	found := false
	for i, a := range args {
		if strings.HasPrefix(a, "--service-node-port-range=") {
			args[i], found = "--service-node-port-range="+r, true
		}
	}
	if !found {
		return errors.New("kube-apiserver has no --service-node-port-range flag to change")
	}
	c.StopAPIServer()
	c.mu.Lock()
	c.apiserverArgs = args
	c.mu.Unlock()
	return c.StartAPIServer(ctx)
}

// StartKubeProxyWithBackend restarts the node's kube-proxy (iptables mode) so that the `iptables`,
// `iptables-save`, `iptables-restore` (and ip6tables) it runs are the given backend's ("legacy" or "nft"):
// kube-proxy runs whatever `iptables` PATH finds (in the kube-proxy image a wrapper picks the backend; here the
// host's alternatives, nft on Debian). The rules of the other backend are cleaned first.
func (n *Node) StartKubeProxyWithBackend(ctx context.Context, backend string) error {
	if backend != "legacy" && backend != "nft" {
		return fmt.Errorf("iptables backend %q: want legacy or nft", backend)
	}
	n.StopKubeProxy()
	if err := n.CleanupRules(ctx); err != nil {
		return err
	}
	shim := filepath.Join(n.c.WorkDir, "iptables-"+backend)
	if err := os.MkdirAll(shim, 0o755); err != nil {
		return fmt.Errorf("iptables shim: %w", err)
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			script := fmt.Sprintf("#!/bin/sh\nexec %s-%s%s \"$@\"\n", fam, backend, suffix)
			if err := os.WriteFile(filepath.Join(shim, fam+suffix), []byte(script), 0o755); err != nil {
				return fmt.Errorf("iptables shim: %w", err)
			}
		}
	}
	path := shim + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ProxyMode = IPTables
	kubeconfig := filepath.Join(n.c.WorkDir, "kube-proxy.kubeconfig")
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + n.Name,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + n.c.clusterCIDRs(),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		fmt.Sprintf("--healthz-bind-address=0.0.0.0:%d", KubeProxyHealthzPort),
		"--metrics-bind-address=127.0.0.1:10249",
		"--v=2",
	}
	// env(1) sets PATH and execs kube-proxy in place (the same pid, so stop and Pdeathsig reach it).
	p, err := startProcess(n.c.WorkDir, "kube-proxy-"+n.Name, n.NS, "env", append([]string{"PATH=" + path, n.c.bins.KubeProxy}, args...)...)
	if err != nil {
		return err
	}
	n.kubeProxy = p
	return nil
}

// ScaleServices describes many NodePort Services with externalTrafficPolicy Local, each with one EndpointSlice
// of made-up addresses (no pods: kube-proxy programs what the slices say). Every Service has one endpoint on a
// node that does not exist (so every other node drops its traffic: the filter table's "has no local endpoints"
// rules); every LocalEvery-th Service also has one endpoint on each of LocalNodes (nat's local-endpoint chains).
type ScaleServices struct {
	Namespace  string
	Count      int
	LocalEvery int
	LocalNodes []string
	// Workers writing concurrently; 0: 8 (more starve etcd on a 2-core machine: "request timed out").
	Workers int
}

// ScaleServiceName is the name of the i-th Service of a ScaleServices set.
func ScaleServiceName(i int) string { return fmt.Sprintf("s%05d", i) }

// ScalePortName is the port name of every ScaleServices Service.
const ScalePortName = "http"

// ScaleRemoteNode is the node name of the endpoint every ScaleServices Service has: no such node exists.
const ScaleRemoteNode = "elsewhere"

// HasLocal says whether the i-th Service of s has endpoints on LocalNodes.
func (s ScaleServices) HasLocal(i int) bool { return s.LocalEvery > 0 && i%s.LocalEvery == 0 }

// CreateScaleServices creates the Services and their slices, Workers at a time, through a client of its own
// (the admin client's 100 QPS would make 20,000 writes take minutes).
func (c *Cluster) CreateScaleServices(ctx context.Context, s ScaleServices) error {
	if err := c.EnsureNamespace(ctx, s.Namespace); err != nil {
		return err
	}
	cfg := c.AdminRESTConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("scale client: %w", err)
	}
	workers := s.Workers
	if workers <= 0 {
		workers = 8
	}
	next := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := createScaleService(ctx, client, s, i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var first error
feed:
	for i := range s.Count {
		select {
		case next <- i:
		case first = <-errc:
			break feed
		case <-ctx.Done():
			first = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errc)
	for err := range errc {
		first = errors.Join(first, err)
	}
	return first
}

func createScaleService(ctx context.Context, client kubernetes.Interface, s ScaleServices, i int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ScaleServiceName(i), Namespace: s.Namespace},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              map[string]string{"app": ScaleServiceName(i)}, // no controller here: slices are ours
			Ports: []corev1.ServicePort{{
				Name: ScalePortName, Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
	services := client.CoreV1().Services(s.Namespace)
	var created *corev1.Service
	err := retryTransient(ctx, func() error {
		var err error
		created, err = services.Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // an earlier attempt went through
			created, err = services.Get(ctx, svc.Name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create Service %s/%s: %w", s.Namespace, svc.Name, err)
	}
	slice := ScaleSlice(s, created, i, s.HasLocal(i))
	err = retryTransient(ctx, func() error {
		_, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create EndpointSlice %s/%s: %w", s.Namespace, slice.Name, err)
	}
	return nil
}

// retryTransient runs fn up to 6 times while it fails with what a busy apiserver or etcd answers (timeouts,
// throttling, "etcdserver: request timed out" inside an Invalid), waiting 1, 2, 4 … s in between.
func retryTransient(ctx context.Context, fn func() error) error {
	var err error
	for attempt, wait := 0, time.Second; attempt < 6; attempt, wait = attempt+1, wait*2 {
		if err = fn(); err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
	return err
}

func transient(err error) bool {
	if apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	msg := err.Error()
	for _, m := range []string{"request timed out", "Client.Timeout", "context deadline exceeded", "connection refused", "unexpected error when reading response body"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// ScaleSlice is the i-th Service's EndpointSlice: the remote endpoint, and with local one endpoint per LocalNodes.
func ScaleSlice(s ScaleServices, svc *corev1.Service, i int, local bool) *discoveryv1.EndpointSlice {
	port, proto, name := int32(8080), corev1.ProtocolTCP, ScalePortName
	ep := func(ip, node string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{}}
	}
	// Made-up addresses outside every CIDR the harness routes: nothing is ever sent to them.
	eps := []discoveryv1.Endpoint{ep(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1), ScaleRemoteNode)}
	if local {
		for k, n := range s.LocalNodes {
			eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", 201+k, i/250, i%250+1), n))
		}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SliceName(svc.Name),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		Endpoints:   eps,
	}
}

// SetScaleLocal rewrites the i-th Service's slice with or without its local endpoints (the remote one stays).
func (c *Cluster) SetScaleLocal(ctx context.Context, s ScaleServices, i int, local bool) error {
	slices := c.admin.DiscoveryV1().EndpointSlices(s.Namespace)
	name := ScaleServiceName(i)
	svc, err := c.admin.CoreV1().Services(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Service %s/%s: %w", s.Namespace, name, err)
	}
	existing, err := slices.Get(ctx, SliceName(name), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get EndpointSlice of %s/%s: %w", s.Namespace, name, err)
	}
	slice := ScaleSlice(s, svc, i, local)
	slice.ResourceVersion = existing.ResourceVersion
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update EndpointSlice of %s/%s: %w", s.Namespace, name, err)
	}
	return nil
}

// WaitKubeProxySynced waits until the node's kube-proxy has no Service or endpoint change pending and its last
// sync is not older than its last queued change (its own metrics on 127.0.0.1:10249 in the node's namespace).
func (n *Node) WaitKubeProxySynced(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext}, Timeout: 10 * time.Second}
	return waitFor(ctx, timeout, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10249/metrics", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		m, err := ParseMetrics(string(body))
		if err != nil {
			return err
		}
		get := func(name string) (float64, error) {
			var sum float64
			series := m.Series(name, nil)
			if len(series) == 0 {
				return 0, fmt.Errorf("kube-proxy on %s: no %s", n.Name, name)
			}
			for _, s := range series {
				sum = max(sum, value(s))
			}
			return sum, nil
		}
		for _, name := range []string{"kubeproxy_sync_proxy_rules_service_changes_pending", "kubeproxy_sync_proxy_rules_endpoint_changes_pending"} {
			v, err := get(name)
			if err != nil {
				return err
			}
			if v != 0 {
				return fmt.Errorf("kube-proxy on %s: %s = %s", n.Name, name, strconv.FormatFloat(v, 'f', -1, 64))
			}
		}
		last, err := get("kubeproxy_sync_proxy_rules_last_timestamp_seconds")
		if err != nil {
			return err
		}
		queued, err := get("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
		if err != nil {
			return err
		}
		if last < queued {
			return fmt.Errorf("kube-proxy on %s: last sync %.3f before the last queued change %.3f", n.Name, last, queued)
		}
		return nil
	})
}

// BuildRulesTest builds the test binary of the repository's nodeprobe/kernelrules package (the e2e module's parent)
// into dir: its BenchmarkOnNode and TestOnNode* read the rules of the namespace they run in (RunOnNode).
func BuildRulesTest(ctx context.Context, dir string) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kernelrules.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", out, "./nodeprobe/kernelrules")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nodeprobe/kernelrules test binary: %w: %s", err, b)
	}
	return out, nil
}

// CommandOnNode returns a command running bin inside the node's namespace (as
// a process of the node: an exporter there sees what it sees).
func (n *Node) CommandOnNode(ctx context.Context, bin string, args ...string) *exec.Cmd {
	return netns.Command(ctx, n.NS, bin, args...)
}
