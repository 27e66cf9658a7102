package netns

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Dialer opens TCP connections from inside a named network namespace.
type Dialer struct {
	NS      string
	Timeout time.Duration // connect timeout; 0 means 5s
}

// DialContext connects from inside d.NS. Only IPv4 literal addresses are accepted: resolving a name or racing
// address families would run parts of the dial on other goroutines, outside the namespace.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("dial %s from netns %q: need an IPv4 literal", addr, d.NS)
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	var conn net.Conn
	err = Do(d.NS, func() error {
		var derr error
		conn, derr = (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp4", addr)
		return derr
	})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Listen opens a TCP listener inside namespace ns.
func Listen(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(ns, func() error {
		var lerr error
		l, lerr = net.Listen("tcp4", addr)
		return lerr
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in netns %q: %w", addr, ns, err)
	}
	return l, nil
}
