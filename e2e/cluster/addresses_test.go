package cluster

import (
	"net"
	"testing"
)

func TestAddressPlanFamilies(t *testing.T) {
	for _, tc := range []struct {
		ip     string
		v6     bool
		fam    string
		prefix string
	}{
		{"10.250.0.12", false, "-4", "10.250.0.12/32"},
		{"fd00:250::12", true, "-6", "fd00:250::12/128"},
		{"2001:DB8::0010", true, "-6", "2001:db8::10/128"},
		{"::ffff:192.0.2.1", false, "-4", "192.0.2.1/32"},
	} {
		if got := IsIPv6(tc.ip); got != tc.v6 {
			t.Errorf("IsIPv6(%q) = %v, want %v", tc.ip, got, tc.v6)
		}
		fam, prefix, err := hostRoute(tc.ip)
		if err != nil || fam != tc.fam || prefix != tc.prefix {
			t.Errorf("hostRoute(%q) = %q, %q, %v; want %q, %q", tc.ip, fam, prefix, err, tc.fam, tc.prefix)
		}
	}
	if _, _, err := hostRoute("node-2"); err == nil {
		t.Error("hostRoute accepted a name")
	}
	if got := HostPort(nodeIP6(2), 30090); got != "[fd00:250::12]:30090" {
		t.Errorf("HostPort = %q", got)
	}
	if got := HostPort(nodeIP(2), 30090); got != "10.250.0.12:30090" {
		t.Errorf("HostPort = %q", got)
	}
	// Every node's pod CIDRs and pod addresses lie inside the cluster CIDRs kube-proxy is given.
	_, cluster4, _ := net.ParseCIDR(ClusterCIDR)
	_, cluster6, _ := net.ParseCIDR(ClusterCIDR6)
	for i := 1; i <= 20; i++ {
		for _, x := range []struct {
			cidr, ip string
			in       *net.IPNet
		}{{podCIDR(i), podIP(i, 10), cluster4}, {podCIDR6(i), podIP6(i, 10), cluster6}} {
			base, n, err := net.ParseCIDR(x.cidr)
			if err != nil || !x.in.Contains(base) || !n.Contains(net.ParseIP(x.ip)) {
				t.Errorf("node %d: pod CIDR %s (%v) or pod IP %s outside %s", i, x.cidr, err, x.ip, x.in)
			}
		}
	}
}
