package nodeprobe

import (
	"errors"
	"os"
	"slices"
	"testing"
)

type links []string

func (l links) LinkNames() ([]string, error) { return l, nil }

type failingLinks struct{}

func (failingLinks) LinkNames() ([]string, error) {
	return nil, errors.New("netlink: permission denied")
}

// Only a replacement's own link is evidence; the links every node has (or other CNIs') are not.
func TestFindReplacement(t *testing.T) {
	cases := []struct {
		links links
		want  string
	}{
		{links{"lo", "eth0", "cilium_host", "cilium_net", "cilium_vxlan"}, "Cilium (link cilium_host)"},
		{links{"lo", "eth0", "bpfout.cali", "bpfin.cali", "cali1234"}, "Calico eBPF (link bpfin.cali)"},
		{links{"lo", "breth0", "ovn-k8s-mp0", "genev_sys_6081"}, "OVN-Kubernetes (link ovn-k8s-mp0)"},
		{links{"lo", "eth0", "kube-bridge", "kube-dummy-if"}, "kube-router (link kube-dummy-if)"},
		// Calico in iptables mode, flannel, kube-proxy's own IPVS dummy: no replacement.
		{links{"lo", "eth0", "cali1234", "tunl0", "vxlan.calico"}, ""},
		{links{"lo", "eth0", "flannel.1", "cni0"}, ""},
		{links{"lo", "eth0", "kube-ipvs0"}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		r, ok, err := FindReplacement(c.links)
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]string{true: r.String()}[ok]; got != c.want {
			t.Errorf("%v: %q, want %q", c.links, got, c.want)
		}
	}
	if _, ok, err := FindReplacement(failingLinks{}); err == nil || ok {
		t.Errorf("a failed listing must be an error, not a finding: ok=%v err=%v", ok, err)
	}
}

// The real netlink listing sees this network namespace's links; every namespace has lo.
func TestNetlinkLinks(t *testing.T) {
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Skipf("no network namespaces here (%v): netlink is Linux's", err)
	}
	names, err := NetlinkLinks{}.LinkNames()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "lo") {
		t.Errorf("links %v lack lo", names)
	}
}
