package nodeprobe_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// fakeAddrs is an AddrLister with a fixed answer.
type fakeAddrs struct {
	addrs []string
	err   error
	calls int
}

func (f *fakeAddrs) LocalAddrs() ([]net.IP, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out := make([]net.IP, 0, len(f.addrs))
	for _, a := range f.addrs {
		out = append(out, net.ParseIP(a))
	}
	return out, nil
}

func TestPickLocalAddress(t *testing.T) {
	host := []string{"127.0.0.1", "::1", "10.0.0.5", "fd00::5", "192.168.1.20"}
	tests := []struct {
		name       string
		candidates []string
		want       string
	}{
		{"only candidate is local", []string{"10.0.0.5"}, "10.0.0.5"},
		{"first local wins", []string{"10.0.0.5", "192.168.1.20"}, "10.0.0.5"},
		{"first local wins in candidate order, not host order", []string{"192.168.1.20", "10.0.0.5"}, "192.168.1.20"},
		{"remote candidates are skipped", []string{"10.0.0.99", "192.168.1.20"}, "192.168.1.20"},
		{"IPv6", []string{"fd00::99", "fd00::5"}, "fd00::5"},
		{"IPv6 in another spelling matches", []string{"fd00:0:0:0:0:0:0:5"}, "fd00:0:0:0:0:0:0:5"},
		{"unparsable candidates are skipped", []string{"node-1.example", "", "10.0.0.5"}, "10.0.0.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeprobe.PickLocalAddress(&fakeAddrs{addrs: host}, tc.candidates)
			if err != nil {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPickLocalAddressNoneLocal(t *testing.T) {
	lister := &fakeAddrs{addrs: []string{"127.0.0.1", "10.0.0.5"}}
	// Another node's InternalIP: probing it would ask another machine.
	_, err := nodeprobe.PickLocalAddress(lister, []string{"10.0.0.6", "192.168.1.20"})
	if !errors.Is(err, nodeprobe.ErrNoLocalAddress) {
		t.Fatalf("error %v, want ErrNoLocalAddress", err)
	}
	if got := err.Error(); !strings.Contains(got, "10.0.0.6") || !strings.Contains(got, "192.168.1.20") {
		t.Errorf("error %q does not name the candidates it tried", got)
	}
}

func TestPickLocalAddressNoCandidates(t *testing.T) {
	for _, candidates := range [][]string{nil, {}} {
		lister := &fakeAddrs{addrs: []string{"127.0.0.1"}}
		_, err := nodeprobe.PickLocalAddress(lister, candidates)
		if !errors.Is(err, nodeprobe.ErrNoLocalAddress) {
			t.Errorf("candidates %#v: error %v, want ErrNoLocalAddress", candidates, err)
		}
		if lister.calls != 0 {
			t.Errorf("candidates %#v: listed the host's addresses %d times for nothing", candidates, lister.calls)
		}
	}
}

func TestPickLocalAddressListerError(t *testing.T) {
	listErr := errors.New("netlink: operation not permitted")
	_, err := nodeprobe.PickLocalAddress(&fakeAddrs{err: listErr}, []string{"10.0.0.5"})
	if !errors.Is(err, listErr) {
		t.Fatalf("error %v, want it to wrap the lister's error", err)
	}
	// Not knowing the host's addresses is not the same as knowing none of them is local.
	if errors.Is(err, nodeprobe.ErrNoLocalAddress) {
		t.Errorf("error %v claims no local address when the addresses could not be listed", err)
	}
}

func TestNetlinkAddrsIncludesLoopback(t *testing.T) {
	addrs, err := nodeprobe.NetlinkAddrs{}.LocalAddrs()
	if err != nil {
		t.Fatalf("listing this host's addresses: %v", err)
	}
	found := false
	for _, a := range addrs {
		if a == nil {
			t.Error("nil address in the list")
			continue
		}
		if a.Equal(net.IPv4(127, 0, 0, 1)) {
			found = true
		}
	}
	if !found {
		t.Errorf("127.0.0.1 not among this host's addresses %v", addrs)
	}
	// The real lister plugged into PickLocalAddress: loopback is local, a documentation address is not.
	got, err := nodeprobe.PickLocalAddress(nodeprobe.NetlinkAddrs{}, []string{"192.0.2.77", "127.0.0.1"})
	if err != nil || got != "127.0.0.1" {
		t.Errorf("PickLocalAddress(netlink) = %q, %v; want 127.0.0.1", got, err)
	}
}
