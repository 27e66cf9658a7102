package arrivals

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Helpers for the tests on the real kernel: network namespaces the test creates, traffic sent between them.
// Nothing is sent to or configured in the namespace the test runs in.

// requireRoot skips as another user (and says why) and, as root, makes sure of ip and nft once per test
// binary: the project's one installer (scripts/install-deps.sh netfilter) installs their Debian packages when
// one is missing and does nothing otherwise.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and packet sockets; CI runs as root")
	}
	installOnce.Do(func() {
		// go test runs a package's tests in its directory.
		script := filepath.Join("..", "..", "scripts", "install-deps.sh")
		if out, err := exec.Command(script, "netfilter").CombinedOutput(); err != nil {
			installErr = fmt.Errorf("%s netfilter: %w\n%s", script, err, out)
		}
	})
	if installErr != nil {
		t.Fatalf("installing ip and nft: %v", installErr)
	}
}

// installOnce runs the installer once per test binary; installErr is what it said.
var (
	installOnce sync.Once
	installErr  error
)

// testNetns is a network namespace removed at the end of the test.
type testNetns struct {
	name string
}

func newTestNetns(t testing.TB, role string) testNetns {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	n := testNetns{name: "ltarr-" + hex.EncodeToString(b[:]) + "-" + role}
	run(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	n.ip(t, "link set lo up")
	return n
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ip runs `ip -n <ns> <args>`.
func (n testNetns) ip(t testing.TB, args string) {
	t.Helper()
	run(t, "ip", append([]string{"-n", n.name}, strings.Fields(args)...)...)
}

// exec runs a command inside the namespace.
func (n testNetns) exec(t testing.TB, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("in %s: %s %s: %v: %s", n.name, name, strings.Join(args, " "), err, out)
	}
}

func (n testNetns) sysctl(t testing.TB, kv string) { n.exec(t, "", "sysctl", "-qw", kv) }

// do runs fn on an OS thread inside the namespace: sockets fn creates belong to it for their lifetime.
func (n testNetns) do(t testing.TB, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if switching back failed it must not run other goroutines, and the
		// runtime ends a locked thread whose goroutine returns.
		h, err := netns.GetFromName(n.name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("entering %s: %v", n.name, err)
	}
}

// veth links a in n with b in m.
func veth(t testing.TB, n testNetns, a string, m testNetns, b string) {
	t.Helper()
	n.ip(t, fmt.Sprintf("link add %s type veth peer name %s netns %s", a, b, m.name))
}

// dialTCP sends one SYN from ns to dst and returns after the answer (RST or SYN-ACK) or timeout. A refused
// or accepted connection sends exactly one SYN; timeout stays under the kernel's 1 s initial RTO so a
// blackholed one does too.
func dialTCP(t testing.TB, ns testNetns, dst netip.AddrPort, timeout time.Duration) error {
	t.Helper()
	var err error
	ns.do(t, func() {
		var c net.Conn
		c, err = net.DialTimeout("tcp", dst.String(), timeout)
		if c != nil {
			_ = c.Close()
		}
	})
	return err
}

func sendUDP(t testing.TB, ns testNetns, dst netip.AddrPort, n int) {
	t.Helper()
	ns.do(t, func() {
		// Not connected: a connected socket fails its next write after the ICMP port unreachable.
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			t.Errorf("udp socket: %v", err)
			return
		}
		defer c.Close()
		for range n {
			if _, err := c.WriteToUDPAddrPort([]byte("arrival"), dst); err != nil {
				t.Errorf("udp to %v: %v", dst, err)
				return
			}
		}
	})
}

// sendSCTP sends one SCTP packet whose only chunk has type chunk (1 = INIT) through a raw IP socket: Go has
// no SCTP, and the test kernel may have no SCTP module.
func sendSCTP(t testing.TB, ns testNetns, dst netip.AddrPort, chunk byte) {
	t.Helper()
	b := make([]byte, 12+20)
	binary.BigEndian.PutUint16(b[0:], 40000)
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	b[12] = chunk
	binary.BigEndian.PutUint16(b[14:], 20)
	binary.BigEndian.PutUint32(b[16:], 0x11223344) // initiate tag
	binary.BigEndian.PutUint32(b[20:], 65535)      // a_rwnd
	binary.BigEndian.PutUint16(b[24:], 1)
	binary.BigEndian.PutUint16(b[26:], 1)
	binary.BigEndian.PutUint32(b[28:], 1)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	network := "ip4:sctp"
	if dst.Addr().Is6() {
		network = "ip6:sctp"
	}
	ns.do(t, func() {
		c, err := net.ListenPacket(network, "")
		if err != nil {
			t.Errorf("raw %s socket: %v", network, err)
			return
		}
		defer c.Close()
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.Addr().AsSlice()}); err != nil {
			t.Errorf("sctp to %v: %v", dst, err)
		}
	})
}

// sendFrame sends an IPv4 packet (from its header) out of link dev of ns in an Ethernet frame addressed to
// mac: a packet socket lets the test address a frame to a host that is not the receiver.
func sendFrame(t testing.TB, ns testNetns, dev string, mac net.HardwareAddr, pkt []byte) {
	t.Helper()
	ns.do(t, func() {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			t.Errorf("%s: %v", dev, err)
			return
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Errorf("packet socket: %v", err)
			return
		}
		defer unix.Close(fd)
		var be [2]byte
		binary.BigEndian.PutUint16(be[:], unix.ETH_P_IP)
		sa := &unix.SockaddrLinklayer{Protocol: binary.NativeEndian.Uint16(be[:]), Ifindex: ifi.Index, Halen: 6}
		copy(sa.Addr[:], mac)
		if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
			t.Errorf("sendto: %v", err)
		}
	})
}

// listenTCP accepts and closes connections on addr inside ns until the test ends.
func listenTCP(t testing.TB, ns testNetns, addr string) {
	t.Helper()
	var l net.Listener
	ns.do(t, func() {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			t.Fatalf("listen %s in %s: %v", addr, ns.name, err)
		}
	})
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

func linkMAC(t testing.TB, ns testNetns, dev string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	ns.do(t, func() {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			t.Fatalf("%s: %v", dev, err)
		}
		mac = ifi.HardwareAddr
	})
	return mac
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v", what, d)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// openIn opens a meter in ns, closed at the end of the test.
func openIn(t testing.TB, ns testNetns, cfg Config, gate func()) *Meter {
	t.Helper()
	var m *Meter
	ns.do(t, func() { m = newMeter(cfg, gate) })
	t.Cleanup(func() { _ = m.Close() })
	if s := m.Snapshot(); s.Status != StatusOK {
		t.Fatalf("meter in %s: %v: %v", ns.name, s.Status, s.Err)
	}
	return m
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func getenv(k, def string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return def
}
