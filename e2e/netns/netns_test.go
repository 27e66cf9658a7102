package netns

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
)

func TestOwnerPID(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"lte2e-123-node-1", 123, true},
		{"lte2e-42-p7", 42, true},
		{"lte2e-x-cp", 0, false},
		{"other-123-cp", 0, false},
	} {
		pid, ok := OwnerPID("lte2e-", tc.name)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("OwnerPID(%q) = %d, %v; want %d, %v", tc.name, pid, ok, tc.pid, tc.ok)
		}
	}
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive?")
	}
}

// TestDialAndListenInsideANamespace: a listener opened in a fresh namespace is reachable from that namespace
// and not from the host's, and the calling thread comes back to the host's namespace.
func TestDialAndListenInsideANamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces; CI runs as root")
	}
	ctx := context.Background()
	// Named like the harness's namespaces, so cluster.Reap removes it after a crash.
	name := "lte2e-" + strconv.Itoa(os.Getpid()) + "-nstest"
	if err := Add(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Delete(ctx, name) })
	if err := IP(ctx, "-n", name, "addr", "add", "10.123.0.1/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(name, "10.123.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	conn, err := Dialer{NS: name}.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hi" {
		t.Errorf("read %q, %v", buf, err)
	}
	conn.Close()
	// From the host the address does not exist: the dial fails (no route or refused), it never connects.
	if c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", l.Addr().String()); err == nil {
		c.Close()
		t.Error("the namespace's address answered from the host namespace")
	}
	// An unused port inside the namespace is refused, not timed out.
	_, err = Dialer{NS: name}.DialContext(ctx, "tcp", "10.123.0.1:1")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial of a closed port: %v, want ECONNREFUSED", err)
	}
}
