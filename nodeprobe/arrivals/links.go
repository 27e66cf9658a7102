package arrivals

import (
	"fmt"
	"strings"
)

// LinkMatch names the interfaces whose arrivals are not external: kube-proxy's BridgeInterface local detector
// (one name) and its InterfaceNamePrefix detector (every interface whose name starts with Name), which send a
// packet received there to every endpoint of a Service, as pod traffic.
type LinkMatch struct {
	Name string
	// Prefix: Name is a prefix (iptables' `-i name+`, nftables' `iifname "name*"`).
	Prefix bool
}

func (l LinkMatch) String() string {
	if l.Prefix {
		return l.Name + "*"
	}
	return l.Name
}

func (l LinkMatch) matches(name string) bool {
	if l.Prefix {
		return strings.HasPrefix(name, l.Name)
	}
	return name == l.Name
}

func (l LinkMatch) validate() error {
	// IFNAMSIZ is 16 with the terminating NUL: a longer name matches no interface, and a typo should not
	// silently count a pod's traffic as a client's.
	if l.Name == "" || len(l.Name) > 15 || strings.ContainsAny(l.Name, "/ \t\n") {
		return fmt.Errorf("%w: internal link %q", ErrInvalidWatch, l.Name)
	}
	return nil
}

func compareLinkMatch(a, b LinkMatch) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	switch {
	case a.Prefix == b.Prefix:
		return 0
	case a.Prefix:
		return 1
	}
	return -1
}

// linkNameTTL is how long an interface index's name is trusted: indexes are not reused until the kernel's
// counter wraps, but a link can be renamed (a CNI plugin creating a veth under a temporary name), so a name
// is looked up again after this long. In unix nanoseconds, the packets' clock.
const linkNameTTL = int64(10e9)

// linkNames resolves the interface a packet arrived on to its name, with a cache: the meter asks only while a
// Watch names internal links, and then once per interface per linkNameTTL, not per packet.
type linkNames struct {
	resolve func(ifindex int32) (string, error)
	cache   map[int32]linkName
}

type linkName struct {
	name string // "" when the lookup failed (the link is gone)
	at   int64
}

// name returns the name of interface ifindex as of at (unix nanoseconds); "" when it cannot be told.
func (l *linkNames) name(ifindex int32, at int64) string {
	if c, ok := l.cache[ifindex]; ok && at-c.at < linkNameTTL && c.at <= at {
		return c.name
	}
	if l.resolve == nil {
		return ""
	}
	n, err := l.resolve(ifindex)
	if err != nil {
		n = ""
	}
	if l.cache == nil {
		l.cache = map[int32]linkName{}
	}
	if len(l.cache) > maxLinkCache {
		clear(l.cache) // bounded: a node creating and deleting many veths must not grow it without end
	}
	l.cache[ifindex] = linkName{name: n, at: at}
	return n
}

// maxLinkCache bounds the cache of interface names: far more links than a node has pods.
const maxLinkCache = 4096
