package nodeprobe

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"
	"time"
)

func TestReadNodePortAddresses(t *testing.T) {
	// Real kube-proxy v1.37.2 /configz answers (e2e cluster, kubeconfig path shortened): iptables mode leaves
	// nodePortAddresses null, nftables mode defaults it to ["primary"].
	realIPTables, err := os.ReadFile("testdata/configz-v1.37.2-iptables.json")
	if err != nil {
		t.Fatal(err)
	}
	realNFTables, err := os.ReadFile("testdata/configz-v1.37.2-nftables.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		body string
		want []string
		err  bool
	}{
		{"real v1.37.2 iptables", string(realIPTables), nil, false},
		{"real v1.37.2 nftables", string(realNFTables), nil, false},
		{"unset", `{"kubeproxy.config.k8s.io":{"mode":"nftables","nodePortAddresses":null}}`, nil, false},
		{"primary", `{"kubeproxy.config.k8s.io":{"nodePortAddresses":["primary"]}}`, nil, false},
		{"cidrs", `{"kubeproxy.config.k8s.io":{"nodePortAddresses":["10.0.0.0/8","fd00::/64"]}}`, []string{"10.0.0.0/8", "fd00::/64"}, false},
		// Older releases registered the internal configuration type, whose fields carried no json tags: the keys
		// were Go field names (encoding/json matches them without regard to case).
		{"internal type's keys", `{"kubeproxy.config.k8s.io":{"Mode":"iptables","NodePortAddresses":["192.168.0.0/16"]}}`, []string{"192.168.0.0/16"}, false},
		{"another component", `{"kubelet.config.k8s.io":{}}`, nil, true},
		{"garbage", `<html>`, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, c.body) }))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := ReadNodePortAddresses(ctx, NewHTTPClient(), srv.URL+"/configz")
			if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, %v; want %v, error %v", got, err, c.want, c.err)
			}
		})
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
	}
	for _, c := range cases {
		if got := PickFamilyAddress(local, c.candidates, c.family, c.cidrs); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
