package cluster

import "testing"

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
	// The IPv6 pod CIDR of every node lies inside the cluster CIDR kube-proxy is given.
	if got := podCIDR6(3); got != "fd00:244:3::/64" {
		t.Errorf("podCIDR6(3) = %q", got)
	}
}
