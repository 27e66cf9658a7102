package nodeagent

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// The agent hands out host offsets firstOffset…lastOffset of each pod CIDR: the lower half of a /24 is left
// to the harness's own StartPod (which counts up from .10), so both can place pods on one node.
const (
	firstOffset = 128
	lastOffset  = 254
)

// allocator hands out one host offset per pod and turns it into one address per pod CIDR (every family the
// node has), rotating so that a freed address is not reused at once (conntrack and kube-proxy's rules may still
// mention it for a moment).
type allocator struct {
	mu       *sync.Mutex
	prefixes []netip.Prefix
	used     map[int]bool
	next     int
}

func newAllocator(prefixes []netip.Prefix) allocator {
	return allocator{mu: &sync.Mutex{}, prefixes: prefixes, used: map[int]bool{}, next: firstOffset}
}

func (al *allocator) take() (int, []string, error) {
	al.mu.Lock()
	defer al.mu.Unlock()
	for range lastOffset - firstOffset + 1 {
		off := al.next
		al.next++
		if al.next > lastOffset {
			al.next = firstOffset
		}
		if al.used[off] {
			continue
		}
		addrs := make([]string, 0, len(al.prefixes))
		for _, p := range al.prefixes {
			a, err := nthAddr(p, off)
			if err != nil {
				return 0, nil, err
			}
			addrs = append(addrs, a.String())
		}
		al.used[off] = true
		return off, addrs, nil
	}
	return 0, nil, errors.New("no free pod address left")
}

func (al *allocator) release(off int) {
	al.mu.Lock()
	delete(al.used, off)
	al.mu.Unlock()
}

// nthAddr returns the address n past the prefix's network address, which must stay inside the prefix.
func nthAddr(p netip.Prefix, n int) (netip.Addr, error) {
	b := p.Addr().AsSlice()
	carry := n
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		sum := int(b[i]) + carry
		b[i] = byte(sum)
		carry = sum >> 8
	}
	a, ok := netip.AddrFromSlice(b)
	if !ok || carry != 0 || !p.Contains(a) {
		return netip.Addr{}, fmt.Errorf("pod CIDR %s has no host %d", p, n)
	}
	return a, nil
}
