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
	// Local is the source address (an IP literal of the namespace); "" lets the kernel choose.
	Local string
}

// DialContext connects from inside d.NS. Only IP literals are accepted ("10.250.0.12:80",
// "[fd00:250::12]:80"), dialled with the one matching family: resolving a name or racing address families
// would run parts of the dial on other goroutines, outside the namespace.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	family, err := tcpFamily(host)
	if err != nil {
		return nil, fmt.Errorf("dial %s from netns %q: %w", addr, d.NS, err)
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	var conn net.Conn
	err = Do(d.NS, func() error {
		var derr error
		nd := &net.Dialer{Timeout: timeout}
		if d.Local != "" {
			nd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(d.Local)}
		}
		conn, derr = nd.DialContext(ctx, family, addr)
		return derr
	})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// tcpFamily is "tcp4" or "tcp6" for an IP literal; anything else is an error.
func tcpFamily(host string) (string, error) {
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "", fmt.Errorf("need an IP literal, got %q", host)
	case ip.To4() != nil:
		return "tcp4", nil
	default:
		return "tcp6", nil
	}
}

// Listen opens a TCP listener inside namespace ns on an IP literal address (IPv4 or IPv6).
func Listen(ns, addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	family := "tcp4"
	if host != "" {
		if family, err = tcpFamily(host); err != nil {
			return nil, fmt.Errorf("listen on %s in netns %q: %w", addr, ns, err)
		}
	}
	var l net.Listener
	err = Do(ns, func() error {
		var lerr error
		l, lerr = net.Listen(family, addr)
		return lerr
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in netns %q: %w", addr, ns, err)
	}
	return l, nil
}
