package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// addNamespace creates a network namespace and records it for tear-down.
func (c *Cluster) addNamespace(ctx context.Context, name string) error {
	if err := netns.Add(ctx, name); err != nil {
		return err
	}
	c.mu.Lock()
	c.namespaces = append(c.namespaces, name)
	c.mu.Unlock()
	return nil
}

// sysctls writes net sysctls inside namespace ns (/proc/sys/net follows the writing thread's namespace).
func sysctls(ns string, kv map[string]string) error {
	return netns.Do(ns, func() error {
		for k, v := range kv {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", k, v, ns, err)
			}
		}
		return nil
	})
}

// routerSysctls make a namespace forward like a node: forwarding on, no reverse-path filter (pod replies and
// DNATed traffic arrive on interfaces the strict filter would reject).
var routerSysctls = map[string]string{
	"net/ipv4/ip_forward":              "1",
	"net/ipv4/conf/all/rp_filter":      "0",
	"net/ipv4/conf/default/rp_filter":  "0",
	"net/ipv4/conf/all/forwarding":     "1",
	"net/ipv4/conf/default/forwarding": "1",
}

// noICMPRateLimit makes every ICMP error a namespace sends immediate: Linux rate-limits destination
// unreachables per peer (about one a second after a burst of six), and a client whose connection attempt is
// answered by an unreachable sees "refused" while one whose answer was suppressed sees a timeout — the
// blackhole verdict. Only kube-proxy's drop rules may make a timeout here.
var noICMPRateLimit = map[string]string{
	"net/ipv4/icmp_ratelimit": "0",
}

var noICMPRateLimit6 = map[string]string{
	"net/ipv6/icmp/ratelimit": "0",
}

// routerSysctls6 add IPv6 forwarding to a dual-stack node.
var routerSysctls6 = map[string]string{
	"net/ipv6/conf/all/forwarding":     "1",
	"net/ipv6/conf/default/forwarding": "1",
}

// noDADSysctls turn off duplicate address detection in a namespace before its links are created: every
// address the harness assigns is unique by construction, and a tentative address (DAD takes about two seconds)
// can neither send nor receive. Link-local addresses the kernel generates on new veths are covered by the
// default entry; the addresses the harness adds also carry nodad.
var noDADSysctls = map[string]string{
	"net/ipv6/conf/all/accept_dad":     "0",
	"net/ipv6/conf/default/accept_dad": "0",
}

// addNamespace6 creates a namespace and, in a dual-stack cluster, prepares it for IPv6 (no DAD).
func (c *Cluster) addNamespace6(ctx context.Context, name string) error {
	if err := c.addNamespace(ctx, name); err != nil {
		return err
	}
	if !c.cfg.DualStack {
		return nil
	}
	return sysctls(name, noDADSysctls)
}

// attach connects namespace ns to the bridge with a veth pair: eth0 inside ns with ip/24 (and ip6/64 when
// given), brport on the bridge.
func (c *Cluster) attach(ctx context.Context, ns, brPort, ip, ip6 string) error {
	steps := [][]string{
		{"-n", c.BridgeNS, "link", "add", brPort, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", c.BridgeNS, "link", "set", brPort, "master", "br0", "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", ip, bridgeCIDRBits), "dev", "eth0"},
	}
	if ip6 != "" {
		steps = append(steps, []string{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", ip6, bridgeCIDRBits6), "dev", "eth0", "nodad"})
	}
	steps = append(steps, []string{"-n", ns, "link", "set", "eth0", "up"})
	for _, s := range steps {
		if err := netns.IP(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// routerSysctls makes namespace ns forward (both families on a dual-stack cluster) and send ICMP errors
// without rate limit.
func (c *Cluster) routerSysctls(ns string) error {
	sets := []map[string]string{routerSysctls, noICMPRateLimit}
	if c.cfg.DualStack {
		sets = append(sets, routerSysctls6, noICMPRateLimit6)
	}
	for _, kv := range sets {
		if err := sysctls(ns, kv); err != nil {
			return err
		}
	}
	return nil
}

// assignAddresses6 gives every node its IPv6 address and pod CIDR in a dual-stack cluster.
func (c *Cluster) assignAddresses6() {
	if !c.cfg.DualStack {
		return
	}
	for _, n := range c.nodes {
		n.IP6, n.PodCIDR6 = nodeIP6(n.Index), podCIDR6(n.Index)
	}
}

// setupNetwork builds the bridge, the control plane, client and node namespaces, and the pod routes between
// nodes.
func (c *Cluster) setupNetwork(ctx context.Context) error {
	c.assignAddresses6()
	if err := c.addNamespace6(ctx, c.BridgeNS); err != nil {
		return err
	}
	// No multicast snooping: without an MLD querier a snooping bridge may stop flooding the solicited-node
	// multicast that IPv6 neighbour discovery needs.
	if err := netns.IP(ctx, "-n", c.BridgeNS, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"); err != nil {
		return err
	}
	if err := netns.IP(ctx, "-n", c.BridgeNS, "link", "set", "br0", "up"); err != nil {
		return err
	}
	cpIP6, clIP6 := "", ""
	if c.cfg.DualStack {
		cpIP6, clIP6 = controlPlaneIP6, clientIP6
	}
	for _, x := range []struct{ ns, port, ip, ip6 string }{
		{c.ControlPlaneNS, "v-cp", controlPlaneIP, cpIP6},
		{c.ClientNS, "v-client", clientIP, clIP6},
	} {
		if err := c.addNamespace6(ctx, x.ns); err != nil {
			return err
		}
		if err := c.attach(ctx, x.ns, x.port, x.ip, x.ip6); err != nil {
			return err
		}
	}
	// The control plane doubles as the nodes' upstream router (their default gateway): it forwards, but has no
	// route for load balancer or external addresses, so what a node forwards there instead of handling it is
	// answered "unreachable" at once (refused, for the client) rather than lost.
	if err := c.routerSysctls(c.ControlPlaneNS); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.addNamespace6(ctx, n.NS); err != nil {
			return err
		}
		if err := c.routerSysctls(n.NS); err != nil {
			return err
		}
		if err := c.attach(ctx, n.NS, fmt.Sprintf("v-n%d", n.Index), n.IP, n.IP6); err != nil {
			return err
		}
		// A default route, as every real node has: traffic for a load balancer IP or externalIP that
		// kube-proxy does not DNAT is forwarded (through the FORWARD hook, where kube-proxy's "no local
		// endpoints" drop rules sit) instead of failing the route lookup before any rule sees it.
		if err := netns.IP(ctx, "-n", n.NS, "route", "add", "default", "via", controlPlaneIP); err != nil {
			return err
		}
		if n.IP6 != "" {
			if err := netns.IP(ctx, "-n", n.NS, "-6", "route", "add", "default", "via", controlPlaneIP6); err != nil {
				return err
			}
		}
		// The pods' gateway: an address on lo answers the pods' ARP on their veths (no dummy link here).
		if err := netns.IP(ctx, "-n", n.NS, "addr", "add", podGateway(n.Index)+"/32", "dev", "lo"); err != nil {
			return err
		}
	}
	// Pod network: every node (and the control plane) routes each other node's pod CIDR via that node. The
	// outside client gets no such route: like a real client outside the cluster it reaches only node and
	// load-balancer addresses.
	others := append([]string{c.ControlPlaneNS}, nodeNamespaces(c.nodes)...)
	for _, n := range c.nodes {
		for _, ns := range others {
			if ns == n.NS {
				continue
			}
			if err := netns.IP(ctx, "-n", ns, "route", "add", n.PodCIDR, "via", n.IP); err != nil {
				return err
			}
			if n.PodCIDR6 != "" {
				if err := netns.IP(ctx, "-n", ns, "-6", "route", "add", n.PodCIDR6, "via", n.IP6); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func nodeNamespaces(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.NS
	}
	return out
}
