package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// Pod is a backend: a network namespace wired to its node like a CNI plugin would (veth, /32 address, route
// via the node's pod gateway) with a real HTTP server listening inside it. The server runs in the harness
// process on sockets created in the pod's namespace, so a pod is no extra process to clean up.
type Pod struct {
	Namespace, Name, Node string
	// IP is the pod's address in its node's pod CIDR.
	IP string
	// IP6 is the pod's IPv6 address in its node's IPv6 pod CIDR; empty unless the cluster is dual-stack.
	IP6 string
	// Ports are the TCP ports the pod serves on.
	Ports []int
	// NS is the pod's network namespace.
	NS string

	listeners []net.Listener
	hostVeth  string
	node      *Node
}

// PodConfig describes a backend pod.
type PodConfig struct {
	Namespace, Name string
	// Node is the node the pod runs on.
	Node string
	// Ports to serve on; empty means BackendPort.
	Ports []int
	// IPs, when set, are the pod's addresses (one per pod CIDR of the node, as a node agent allocates them)
	// instead of the next addresses of the harness's plan: the first IPv4 one, and on a dual-stack node the
	// first IPv6 one.
	IPs []string
}

// BackendResponse is the body every pod's server answers with: "<namespace>/<name> on <node>\n". Tests use it
// to see which pod served a request.
func BackendResponse(namespace, name, node string) string {
	return fmt.Sprintf("%s/%s on %s\n", namespace, name, node)
}

// StartPod creates the pod's namespace and network and starts its HTTP servers.
func (c *Cluster) StartPod(ctx context.Context, cfg PodConfig) (*Pod, error) {
	n := c.Node(cfg.Node)
	if n == nil {
		return nil, fmt.Errorf("start pod %s/%s: no node %q", cfg.Namespace, cfg.Name, cfg.Node)
	}
	if len(cfg.Ports) == 0 {
		cfg.Ports = []int{BackendPort}
	}
	key := cfg.Namespace + "/" + cfg.Name
	c.mu.Lock()
	if _, dup := c.pods[key]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("start pod %s: already exists", key)
	}
	c.podSeq++
	seq := c.podSeq
	c.mu.Unlock()
	n.mu.Lock()
	n.podSeq++
	k := 9 + n.podSeq
	n.mu.Unlock()
	ip, ip6 := podIP(n.Index, k), podIP6OnNode(n, k)
	if len(cfg.IPs) > 0 {
		ip = firstIPv4(cfg.IPs)
		if ip == "" {
			return nil, fmt.Errorf("start pod %s: no IPv4 address in %v", key, cfg.IPs)
		}
		if ip6 != "" {
			ip6 = firstIPv6(cfg.IPs)
		}
	} else if k > 254 {
		return nil, fmt.Errorf("start pod %s: node %s is out of pod addresses", key, n.Name)
	}
	p := &Pod{
		Namespace: cfg.Namespace, Name: cfg.Name, Node: n.Name, Ports: cfg.Ports,
		IP:       ip,
		IP6:      ip6,
		NS:       fmt.Sprintf("%sp%d", c.prefix, seq),
		hostVeth: fmt.Sprintf("pod%d", seq),
		node:     n,
	}
	if err := c.addNamespace6(ctx, p.NS); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"-n", n.NS, "link", "add", p.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", p.NS},
		{"-n", p.NS, "addr", "add", p.IP + "/32", "dev", "eth0"},
		{"-n", p.NS, "link", "set", "eth0", "up"},
		{"-n", p.NS, "route", "add", podGateway(n.Index), "dev", "eth0", "scope", "link"},
		{"-n", p.NS, "route", "add", "default", "via", podGateway(n.Index), "dev", "eth0"},
		{"-n", n.NS, "link", "set", p.hostVeth, "up"},
		{"-n", n.NS, "route", "add", p.IP + "/32", "dev", p.hostVeth},
	}
	if p.IP6 != "" {
		// IPv6: the gateway is a link-local address on the host-side veth, so the pod's neighbour
		// solicitation for it is answered on the interface it arrives on.
		steps = append(steps,
			[]string{"-n", n.NS, "addr", "add", podGateway6 + "/64", "dev", p.hostVeth, "nodad"},
			[]string{"-n", p.NS, "addr", "add", p.IP6 + "/128", "dev", "eth0", "nodad"},
			[]string{"-n", p.NS, "-6", "route", "add", "default", "via", podGateway6, "dev", "eth0"},
			[]string{"-n", n.NS, "-6", "route", "add", p.IP6 + "/128", "dev", p.hostVeth},
		)
	}
	for _, s := range steps {
		if err := netns.IP(ctx, s...); err != nil {
			_ = netns.Delete(ctx, p.NS)
			return nil, fmt.Errorf("pod %s network: %w", key, err)
		}
	}
	body := BackendResponse(p.Namespace, p.Name, p.Node)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Pod", key)
		_, _ = w.Write([]byte(body))
	})
	for _, port := range cfg.Ports {
		for _, ip := range p.IPs() {
			l, err := netns.Listen(p.NS, net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				p.close()
				_ = netns.Delete(ctx, p.NS)
				return nil, err
			}
			p.listeners = append(p.listeners, l)
			srv := &http.Server{Handler: handler}
			go func() { _ = srv.Serve(l) }()
		}
	}
	c.mu.Lock()
	c.pods[key] = p
	c.mu.Unlock()
	return p, nil
}

// IPs returns the pod's addresses, IPv4 first.
func (p *Pod) IPs() []string {
	if p.IP6 == "" {
		return []string{p.IP}
	}
	return []string{p.IP, p.IP6}
}

// IPOf returns the pod's address of family f ("" when it has none).
func (p *Pod) IPOf(f corev1.IPFamily) string {
	if f == corev1.IPv6Protocol {
		return p.IP6
	}
	return p.IP
}

// podIP6OnNode is the IPv6 twin of podIP on a dual-stack node, "" on a single-stack one.
func podIP6OnNode(n *Node, k int) string {
	if n.IP6 == "" {
		return ""
	}
	return podIP6(n.Index, k)
}

func firstIPv4(ips []string) string {
	for _, s := range ips {
		if ip := net.ParseIP(s); ip != nil && ip.To4() != nil {
			return s
		}
	}
	return ""
}

// firstIPv6 is the first IPv6 address in ips, "" when there is none.
func firstIPv6(ips []string) string {
	for _, s := range ips {
		if IsIPv6(s) {
			return s
		}
	}
	return ""
}

func (p *Pod) close() {
	for _, l := range p.listeners {
		_ = l.Close()
	}
}

// DeletePod stops the pod's servers and removes its namespace (and so its veth and route).
func (c *Cluster) DeletePod(ctx context.Context, namespace, name string) error {
	key := namespace + "/" + name
	c.mu.Lock()
	p, ok := c.pods[key]
	delete(c.pods, key)
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("delete pod %s: not found", key)
	}
	p.close()
	if err := netns.Delete(ctx, p.NS); err != nil {
		return fmt.Errorf("delete pod %s: %w", key, err)
	}
	c.mu.Lock()
	for i, ns := range c.namespaces {
		if ns == p.NS {
			c.namespaces = append(c.namespaces[:i], c.namespaces[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	return nil
}

// Pod returns a running pod, or nil.
func (c *Cluster) Pod(namespace, name string) *Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[namespace+"/"+name]
}
