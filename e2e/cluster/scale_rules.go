package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// StartKubeProxyWithBackend restarts the node's kube-proxy in iptables mode with the given iptables backend
// ("legacy" or "nft": KubeProxyOptions.IPTablesBackend), after cleaning the rules the previous one left (in the
// other backend's tables).
func (n *Node) StartKubeProxyWithBackend(ctx context.Context, backend string) error {
	if backend != "legacy" && backend != "nft" {
		return fmt.Errorf("iptables backend %q: want legacy or nft", backend)
	}
	n.StopKubeProxy()
	if err := n.CleanupRules(ctx); err != nil {
		return err
	}
	return n.StartKubeProxy(ctx, KubeProxyOptions{Mode: IPTables, IPTablesBackend: backend})
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
const ScalePortName = ServicePortName

// ScaleRemoteNode is the node name of the endpoint every ScaleServices Service has: no such node exists.
const ScaleRemoteNode = "elsewhere"

// HasLocal says whether the i-th Service of s has endpoints on LocalNodes.
func (s ScaleServices) HasLocal(i int) bool { return s.LocalEvery > 0 && i%s.LocalEvery == 0 }

// Bulk is the set for CreateBulk (from 0 to Count).
func (s ScaleServices) Bulk() Bulk {
	return Bulk{
		Namespace: s.Namespace,
		// A selector, but no controller here: the slices are ours.
		Service: func(i int) *corev1.Service {
			return NewService(s.Namespace, ScaleServiceName(i), corev1.ServiceTypeNodePort)
		},
		Slice: func(svc *corev1.Service, i int) *discoveryv1.EndpointSlice {
			return ScaleSlice(s, svc, i, s.HasLocal(i))
		},
		Workers: s.Workers,
	}
}

// ScaleSlice is the i-th Service's EndpointSlice: the remote endpoint, and with local one endpoint per LocalNodes.
func ScaleSlice(s ScaleServices, svc *corev1.Service, i int, local bool) *discoveryv1.EndpointSlice {
	ep := func(ip, node string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{}}
	}
	slice := harnessSlice(svc, SliceName(svc.Name), discoveryv1.AddressTypeIPv4)
	// Made-up addresses outside every CIDR the harness routes: nothing is ever sent to them.
	slice.Endpoints = append(slice.Endpoints, ep(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1), ScaleRemoteNode))
	if local {
		for k, n := range s.LocalNodes {
			slice.Endpoints = append(slice.Endpoints, ep(fmt.Sprintf("10.%d.%d.%d", 201+k, i/250, i%250+1), n))
		}
	}
	return slice
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
	return waitFor(ctx, timeout, func() error {
		body, err := httpGetBody(ctx, netns.Dialer{NS: n.NS}, "http://127.0.0.1:10249/metrics")
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
