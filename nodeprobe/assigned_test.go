package nodeprobe

import (
	"fmt"
	"net"
	"testing"
)

func TestAssignedLeavesBindOnlyLinks(t *testing.T) {
	ip := net.ParseIP
	got := Assigned([]LinkAddr{
		{IP: ip("10.0.0.1"), Link: "eth0", Type: "device"},
		{IP: ip("192.0.2.10"), Link: "eth0", Type: "device"},                   // kube-vip ARP mode, keepalived
		{IP: ip("192.0.2.70"), Link: "kube-ipvs0", Type: "dummy", NoARP: true}, // IPVS: every node
		{IP: ip("192.0.2.71"), Link: "kube-dummy-if", Type: "dummy"},           // kube-router, whatever its flags
		{IP: ip("192.0.2.72"), Link: "vip0", Type: "dummy", NoARP: true},       // any NOARP dummy
		{IP: ip("192.0.2.73"), Link: "vip1", Type: "dummy"},                    // a dummy that answers ARP
		// On lo: a direct-server-return VIP, kube-vip's in BGP mode, a pod gateway. Whether anything is routed
		// here the arrivals meter observes; the address alone says nothing.
		{IP: ip("192.0.2.74"), Link: "lo", Type: "device"},
		{IP: ip("127.0.0.1"), Link: "lo", Type: "device"},
		{IP: ip("fe80::1"), Link: "eth0", Type: "device"},       // link-local: no client is routed to it
		{IP: ip("169.254.20.10"), Link: "eth0", Type: "device"}, // IPv4 link-local alike
		{IP: ip("fd00::1"), Link: "eth0", Type: "device"},
	})
	if fmt.Sprint(got) != "[10.0.0.1 192.0.2.10 192.0.2.73 fd00::1]" {
		t.Errorf("assigned %v", got)
	}
}

func TestNodePortAddrs(t *testing.T) {
	local := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1"), net.ParseIP("172.16.0.1"), net.ParseIP("fd00::1")}
	node := []string{"10.0.0.1", "fd00::1"}
	for _, c := range []struct {
		npa  []string
		want string
	}{
		{nil, "[127.0.0.1 10.0.0.1 172.16.0.1 fd00::1]"},
		{[]string{"primary"}, "[10.0.0.1 fd00::1]"},
		{[]string{"172.16.0.0/16"}, "[172.16.0.1 fd00::1]"}, // a family without a CIDR matches every address
		{[]string{"192.168.0.0/16", "fd99::/64"}, "[]"},     // no address inside: no NodePort here
		{[]string{"all"}, "[127.0.0.1 10.0.0.1 172.16.0.1 fd00::1]"},
	} {
		if got := fmt.Sprint(NodePortAddrs(local, node, c.npa)); got != c.want {
			t.Errorf("%v: %s, want %s", c.npa, got, c.want)
		}
	}
}
