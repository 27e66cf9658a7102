package nodeprobe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestWatchAddrsTellsOfChanges: in a network namespace of its own, an address added to a new link, and the
// link removed, each wake the watcher (the node model then lists the addresses again).
func TestWatchAddrsTellsOfChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace of its own (CI runs the unit tests as root)")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	ns := "ltaddr-" + hex.EncodeToString(b[:])
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan struct{}, 100)
	errc := make(chan error, 1)
	go func() {
		// The subscription's sockets belong to the namespace of the thread that opens them.
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- NetlinkAddrs{}.WatchAddrs(ctx, func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		}, func(err error) { t.Errorf("the subscription broke: %v", err) })
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no change told after %s", what)
		}
		for len(changes) > 0 {
			<-changes
		}
	}
	ip("-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	wait("a link added")
	ip("-n", ns, "addr", "add", "192.0.2.1/32", "dev", "v0")
	wait("an address added")
	ip("-n", ns, "link", "del", "v0")
	wait("the link removed")
}
