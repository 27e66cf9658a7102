package nodeprobe

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"
	"time"
)

func TestReadKubeProxyConfig(t *testing.T) {
	// Real kube-proxy v1.37.2 /configz answers (e2e cluster, kubeconfig path shortened): iptables mode leaves
	// nodePortAddresses null, nftables mode defaults it to ["primary"]; both serve their health server on
	// 0.0.0.0:10256 and omit featureGates when none is set.
	realIPTables, err := os.ReadFile("testdata/configz-v1.37.2-iptables.json")
	if err != nil {
		t.Fatal(err)
	}
	realNFTables, err := os.ReadFile("testdata/configz-v1.37.2-nftables.json")
	if err != nil {
		t.Fatal(err)
	}
	// Real v1.37.2 run as k3s runs it: --healthz-bind-address=127.0.0.1:10256, and
	// --feature-gates=AllowServiceExternalIPs=false (e2e TestFidelityKubeProxyConfigz).
	realLoopback, err := os.ReadFile("testdata/configz-v1.37.2-healthz-loopback-no-externalips.json")
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultKubeProxyConfig()
	with := func(mod func(*KubeProxyConfig)) KubeProxyConfig {
		c := def
		mod(&c)
		return c
	}
	cases := []struct {
		name string
		body string
		want KubeProxyConfig
		err  bool
	}{
		{"real v1.37.2 iptables", string(realIPTables), with(func(c *KubeProxyConfig) {
			c.BindAddress = "0.0.0.0"
			c.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"10.244.0.0/16"}}
		}), false},
		{"real v1.37.2 nftables", string(realNFTables), with(func(c *KubeProxyConfig) {
			c.BindAddress, c.NodePortAddresses = "0.0.0.0", []string{"primary"}
			c.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"10.244.0.0/16"}}
		}), false},
		{"real v1.37.2, health server on loopback, AllowServiceExternalIPs off", string(realLoopback), with(func(c *KubeProxyConfig) {
			c.BindAddress, c.HealthzBindAddress, c.ExternalIPs = "0.0.0.0", "127.0.0.1:10256", false
			c.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/32"}}
		}), false},
		// The local detector: its mode and settings as kube-proxy's flags set them.
		{"no cluster CIDR", `{"kubeproxy.config.k8s.io":{"detectLocalMode":"ClusterCIDR","clusterCIDR":""}}`,
			with(func(c *KubeProxyConfig) { c.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR} }), false},
		{"bridge interface", `{"kubeproxy.config.k8s.io":{"detectLocalMode":"BridgeInterface","detectLocal":{"bridgeInterface":"cbr0","interfaceNamePrefix":""}}}`,
			with(func(c *KubeProxyConfig) {
				c.DetectLocal = &LocalDetector{Mode: LocalModeBridgeInterface, BridgeInterface: "cbr0"}
			}), false},
		{"interface name prefix", `{"kubeproxy.config.k8s.io":{"detectLocalMode":"InterfaceNamePrefix","detectLocal":{"interfaceNamePrefix":"cali"}}}`,
			with(func(c *KubeProxyConfig) {
				c.DetectLocal = &LocalDetector{Mode: LocalModeInterfaceNamePrefix, InterfaceNamePrefix: "cali"}
			}), false},
		{"node CIDR", `{"kubeproxy.config.k8s.io":{"detectLocalMode":"NodeCIDR","clusterCIDR":"10.0.0.0/8"}}`,
			with(func(c *KubeProxyConfig) {
				c.DetectLocal = &LocalDetector{Mode: LocalModeNodeCIDR, ClusterCIDRs: []string{"10.0.0.0/8"}}
			}), false},
		{"unset", `{"kubeproxy.config.k8s.io":{"mode":"nftables","nodePortAddresses":null}}`, def, false},
		{"keywords kept", `{"kubeproxy.config.k8s.io":{"nodePortAddresses":["primary","localhost",""]}}`,
			with(func(c *KubeProxyConfig) { c.NodePortAddresses = []string{"primary", "localhost"} }), false},
		{"cidrs", `{"kubeproxy.config.k8s.io":{"nodePortAddresses":["10.0.0.0/8","fd00::/64"]}}`,
			with(func(c *KubeProxyConfig) { c.NodePortAddresses = []string{"10.0.0.0/8", "fd00::/64"} }), false},
		// k3s and RKE2: the health server on loopback only.
		{"health server on loopback", `{"kubeproxy.config.k8s.io":{"healthzBindAddress":"127.0.0.1:10256"}}`,
			with(func(c *KubeProxyConfig) { c.HealthzBindAddress = "127.0.0.1:10256" }), false},
		{"health server disabled", `{"kubeproxy.config.k8s.io":{"healthzBindAddress":""}}`,
			with(func(c *KubeProxyConfig) { c.HealthzBindAddress = "" }), false},
		{"AllowServiceExternalIPs off", `{"kubeproxy.config.k8s.io":{"featureGates":{"AllowServiceExternalIPs":false,"Other":true}}}`,
			with(func(c *KubeProxyConfig) { c.ExternalIPs = false }), false},
		{"AllowServiceExternalIPs on", `{"kubeproxy.config.k8s.io":{"featureGates":{"AllowServiceExternalIPs":true}}}`, def, false},
		// Older releases registered the internal configuration type, whose fields carried no json tags: the keys
		// were Go field names (encoding/json matches them without regard to case).
		{"internal type's keys", `{"kubeproxy.config.k8s.io":{"Mode":"iptables","NodePortAddresses":["192.168.0.0/16"],"HealthzBindAddress":"[::1]:10256","DetectLocalMode":"ClusterCIDR","DetectLocal":{"ClusterCIDRs":["10.42.0.0/16","fd42::/56"]}}}`,
			with(func(c *KubeProxyConfig) {
				c.NodePortAddresses, c.HealthzBindAddress = []string{"192.168.0.0/16"}, "[::1]:10256"
				c.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"10.42.0.0/16", "fd42::/56"}}
			}), false},
		{"another component", `{"kubelet.config.k8s.io":{}}`, KubeProxyConfig{}, true},
		{"garbage", `<html>`, KubeProxyConfig{}, true},
	}
	for _, c := range cases {
		if !c.err && c.want.DetectLocal == nil {
			c.want.DetectLocal = &LocalDetector{Mode: LocalModeClusterCIDR} // the default mode, no CIDR set
		}
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, c.body) }))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := ReadKubeProxyConfig(ctx, NewHTTPClient(), srv.URL+"/configz")
			if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v (detector %+v), %v; want %+v (detector %+v), error %v", got, got.DetectLocal, err, c.want, c.want.DetectLocal, c.err)
			}
		})
	}
}

// kube-proxy's node IPs: the first of each family among InternalIPs then ExternalIPs, the primary family's
// replaced by a specific --bind-address.
func TestKubeProxyNodeIPs(t *testing.T) {
	cases := []struct {
		addrs []string
		bind  string
		want  []string
	}{
		{[]string{"10.0.0.5", "10.0.0.6", "fd00::5"}, "0.0.0.0", []string{"10.0.0.5", "fd00::5"}},
		// IPv6 only as an ExternalIP: still the node IP of the family.
		{[]string{"10.0.0.5", "203.0.113.5", "2001:db8::5"}, "", []string{"10.0.0.5", "2001:db8::5"}},
		{[]string{"10.0.0.5", "fd00::5"}, "10.0.0.9", []string{"10.0.0.9", "fd00::5"}},
		{[]string{"10.0.0.5", "fd00::5"}, "::", []string{"10.0.0.5", "fd00::5"}},
		{nil, "", nil},
	}
	for _, c := range cases {
		if got := KubeProxyNodeIPs(c.addrs, c.bind); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v bind %q: %v, want %v", c.addrs, c.bind, got, c.want)
		}
	}
}

type staticAddrs []string

func (s staticAddrs) LocalAddrs() ([]net.IP, error) {
	var out []net.IP
	for _, a := range s {
		out = append(out, net.ParseIP(a))
	}
	return out, nil
}

// Where kube-proxy's health server really listens: the address its healthzBindAddress names (k3s, RKE2: loopback),
// or the node's own address when it binds every address.
func TestKubeProxyHealthAddress(t *testing.T) {
	local := staticAddrs{"127.0.0.1", "::1", "10.0.0.5", "fd00::5"}
	nodeIPs := []string{"10.0.0.5", "fd00::5"}
	cases := []struct {
		bind, want string
		err        error
	}{
		{"0.0.0.0:10256", "10.0.0.5:10256", nil},
		{"[::]:10256", "10.0.0.5:10256", nil},
		{"127.0.0.1:10256", "127.0.0.1:10256", nil},
		{"[::1]:10256", "[::1]:10256", nil},
		{"10.0.0.5:12345", "10.0.0.5:12345", nil},
		{"127.0.0.1", "127.0.0.1:10256", nil},
		{"", "", ErrHealthServerDisabled},
	}
	for _, c := range cases {
		got, err := KubeProxyHealthAddress(KubeProxyConfig{HealthzBindAddress: c.bind}, local, nodeIPs)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("%q: %q, %v; want %q, %v", c.bind, got, err, c.want, c.err)
		}
	}
	for _, bad := range []string{"node-1:10256", "127.0.0.1:http"} {
		if _, err := KubeProxyHealthAddress(KubeProxyConfig{HealthzBindAddress: bad}, local, nodeIPs); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// Every address, but none of the node's is here: nothing to probe that would be kube-proxy's.
	if _, err := KubeProxyHealthAddress(DefaultKubeProxyConfig(), staticAddrs{"127.0.0.1"}, nodeIPs); !errors.Is(err, ErrNoLocalAddress) {
		t.Errorf("no local node IP: %v", err)
	}
}

func TestPickFamilyAddress(t *testing.T) {
	local := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.5"), net.ParseIP("fe80::1"), net.ParseIP("fd00::5"), net.ParseIP("192.168.1.5")}
	nodeIPs := []string{"10.0.0.5", "fd00::5"}
	cases := []struct {
		name, family string
		candidates   []string
		cidrs        []string
		want         string
	}{
		{"primary IPv4", "IPv4", nodeIPs, nil, "10.0.0.5"},
		{"primary IPv6", "IPv6", nodeIPs, nil, "fd00::5"},
		{"no InternalIP of the family", "IPv6", []string{"10.0.0.5"}, nil, ""},
		{"InternalIP not on this host", "IPv4", []string{"10.9.9.9"}, nil, ""},
		{"CIDRs containing the InternalIP", "IPv4", nodeIPs, []string{"10.0.0.0/8"}, "10.0.0.5"},
		{"CIDRs elsewhere: another local address", "IPv4", nodeIPs, []string{"192.168.0.0/16"}, "192.168.1.5"},
		{"CIDRs of the other family only: the family serves all its addresses", "IPv6", nodeIPs, []string{"10.0.0.0/8"}, "fd00::5"},
		{"link-local never chosen", "IPv6", nil, []string{"fe80::/10"}, ""},
		// kube-proxy's keywords (1.37), expanded as it expands them.
		{"primary", "IPv4", nodeIPs, []string{"primary"}, "10.0.0.5"},
		{"primary, node IP not here", "IPv4", []string{"10.9.9.9"}, []string{"primary"}, ""},
		{"localhost IPv4", "IPv4", nodeIPs, []string{"localhost"}, "127.0.0.1"},
		{"localhost IPv6", "IPv6", nodeIPs, []string{"localhost"}, ""}, // ::1 is not among local here
		{"all", "IPv6", nodeIPs, []string{"all"}, "fd00::5"},
		{"a CIDR and primary", "IPv4", nodeIPs, []string{"192.168.0.0/16", "primary"}, "10.0.0.5"},
		// The node IP of a family is the first address of that family among InternalIPs, then ExternalIPs.
		{"node IP of the family from an ExternalIP", "IPv6", []string{"10.0.0.5", "fd00::5"}, []string{"primary"}, "fd00::5"},
	}
	for _, c := range cases {
		if got := PickFamilyAddress(local, c.candidates, c.family, c.cidrs); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The CIDR kube-proxy's detector takes each family's pod traffic from: the first of the family (ClusterCIDR
// mode from --cluster-cidr, NodeCIDR mode from the Node's podCIDRs); none in the interface modes.
func TestLocalDetectorFamilyCIDR(t *testing.T) {
	pod := []string{"10.244.3.0/24", "fd00:244:3::/64"}
	for _, c := range []struct {
		d            LocalDetector
		want4, want6 string
	}{
		{LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"10.244.0.0/16", "10.96.0.0/12", "fd00:244::/32"}}, "10.244.0.0/16", "fd00:244::/32"},
		{LocalDetector{Mode: LocalModeClusterCIDR, ClusterCIDRs: []string{"fd00:244::/32"}}, "", "fd00:244::/32"},
		{LocalDetector{Mode: LocalModeClusterCIDR}, "", ""},
		{LocalDetector{Mode: LocalModeNodeCIDR, ClusterCIDRs: []string{"10.0.0.0/8"}}, "10.244.3.0/24", "fd00:244:3::/64"},
		{LocalDetector{Mode: LocalModeBridgeInterface, BridgeInterface: "cbr0", ClusterCIDRs: []string{"10.0.0.0/8"}}, "", ""},
		{LocalDetector{Mode: "Bogus", ClusterCIDRs: []string{"10.0.0.0/8"}}, "", ""},
	} {
		if got := c.d.FamilyCIDR("IPv4", pod); got != c.want4 {
			t.Errorf("%+v IPv4: %q, want %q", c.d, got, c.want4)
		}
		if got := c.d.FamilyCIDR("IPv6", pod); got != c.want6 {
			t.Errorf("%+v IPv6: %q, want %q", c.d, got, c.want6)
		}
	}
}
