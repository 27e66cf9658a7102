package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// CheckerIP is a second address of the outside client's namespace, on the same link as its own: a load
// balancer's health checker next to the clients, which the nodes see as another source.
const CheckerIP = "10.250.0.101"

// AddClientSource gives the outside client's link the extra address ip (in the bridge's /24, IPv4), so that
// connections can come from it (TCPCheck, netns.Dialer.Local). Adding an address it has already is not an
// error; RemoveClientSource takes it off.
func (c *Cluster) AddClientSource(ctx context.Context, ip string) error {
	out, err := netns.Output(ctx, c.ClientNS, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	if err != nil {
		return fmt.Errorf("client addresses: %w", err)
	}
	if strings.Contains(out, " "+ip+"/") {
		return nil
	}
	if err := netns.IP(ctx, "-n", c.ClientNS, "addr", "add", fmt.Sprintf("%s/%d", ip, bridgeCIDRBits), "dev", "eth0"); err != nil {
		return fmt.Errorf("add client source %s: %w", ip, err)
	}
	return nil
}

// RemoveClientSource takes the extra address ip off the outside client's link.
func (c *Cluster) RemoveClientSource(ctx context.Context, ip string) error {
	if err := netns.IP(ctx, "-n", c.ClientNS, "addr", "del", fmt.Sprintf("%s/%d", ip, bridgeCIDRBits), "dev", "eth0"); err != nil {
		return fmt.Errorf("remove client source %s: %w", ip, err)
	}
	return nil
}

// TCPCheck is a load balancer's TCP health check from src (an address of the outside client, see
// AddClientSource) to addr: a new connection, closed as soon as it is open. It returns nil when the
// connection opened, the dial's error otherwise (a timeout where the node drops it).
func (c *Cluster) TCPCheck(ctx context.Context, src, addr string, timeout time.Duration) error {
	conn, err := netns.Dialer{NS: c.ClientNS, Timeout: timeout, Local: src}.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}
