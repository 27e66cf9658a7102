package nodeprobe

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// AddrWatcher tells when the node's addresses or links change (NetlinkAddrs): the node model lists them again
// then, instead of every few seconds.
type AddrWatcher interface {
	// WatchAddrs calls changed, without blocking it for long, after every address or link change of the
	// namespace, until ctx ends; it returns an error at once when it cannot subscribe, and failed (nil: not
	// asked) when the subscription breaks later: the caller then lists on a schedule.
	WatchAddrs(ctx context.Context, changed func(), failed func(error)) error
}

// WatchAddrs implements AddrWatcher with netlink's address and link multicast groups (RTNLGRP_IPV4_IFADDR,
// RTNLGRP_IPV6_IFADDR, RTNLGRP_LINK), in the exporter's namespace (the host's, under hostNetwork). A lost
// message (the socket overran) is reported to failed like a broken subscription: something may have changed
// unseen.
func (NetlinkAddrs) WatchAddrs(ctx context.Context, changed func(), failed func(error)) error {
	done := make(chan struct{})
	var broken atomic.Bool
	fail := func(err error) {
		// Once ctx ends the subscription is closed on purpose: its sockets' last errors say nothing.
		if ctx.Err() == nil && broken.CompareAndSwap(false, true) && failed != nil {
			failed(err)
		}
	}
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) { fail(fmt.Errorf("address notifications: %w", err)) },
	}); err != nil {
		close(done)
		return fmt.Errorf("subscribing to address changes: %w", err)
	}
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { fail(fmt.Errorf("link notifications: %w", err)) },
	}); err != nil {
		close(done)
		return fmt.Errorf("subscribing to link changes: %w", err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-addrs:
				if !ok {
					fail(fmt.Errorf("address notifications ended"))
					return
				}
				changed()
			case _, ok := <-links:
				if !ok {
					fail(fmt.Errorf("link notifications ended"))
					return
				}
				changed()
			}
		}
	}()
	return nil
}
