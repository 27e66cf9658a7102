package dataplane

import (
	"net/netip"
	"testing"
)

func TestDropsTo(t *testing.T) {
	perDest := PortState{Programmed: true, Drop: true, Drops: []DropRule{{Port: 30090}, {Address: "192.0.2.10", Port: 80}}}
	cases := []struct {
		name    string
		st      PortState
		address string
		port    int32
		want    bool
	}{
		{"the NodePort's rule", perDest, "", 30090, true},
		{"an address's rule", perDest, "192.0.2.10", 80, true},
		{"another address", perDest, "192.0.2.20", 80, false},
		{"the address on another port", perDest, "192.0.2.10", 443, false},
		{"another NodePort", perDest, "", 30091, false},
		{"a rule for all destinations", PortState{Programmed: true, Drop: true, Drops: []DropRule{{AllDestinations: true}}}, "192.0.2.99", 80, true},
		{"a drop said without destinations", PortState{Programmed: true, Drop: true}, "", 30090, true},
		{"forwarding", PortState{Programmed: true, LocalEndpoints: 1}, "", 30090, false},
		{"rejecting", PortState{Programmed: true, Reject: true}, "", 30090, false},
		{"absent", PortState{}, "", 30090, false},
	}
	for _, c := range cases {
		if got := c.st.DropsTo(c.address, c.port); got != c.want {
			t.Errorf("%s: DropsTo(%q, %d) = %v, want %v", c.name, c.address, c.port, got, c.want)
		}
	}
}

// hashName is a reader's name of an endpoint: the one API endpoint it stands for.
type hashName struct{ of netip.AddrPort }

func (h hashName) Is(_ ServicePort, ep netip.AddrPort) bool { return h.of == ep }
func (h hashName) String() string                           { return "HASH" }

func TestEndpoint(t *testing.T) {
	sp := ServicePort{Namespace: "shop", Name: "web", Port: "http", Protocol: "TCP"}
	ep := netip.MustParseAddrPort("10.244.1.5:8080")
	mapped := netip.AddrPortFrom(netip.AddrFrom16(ep.Addr().As16()), ep.Port())
	cases := []struct {
		name   string
		e      Endpoint
		is     []netip.AddrPort
		isNot  []netip.AddrPort
		spells string
	}{
		{"address and port", Endpoint{Addr: ep}, []netip.AddrPort{ep, mapped}, []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:9090")}, "10.244.1.5:8080"},
		{"address only", Endpoint{Addr: netip.AddrPortFrom(ep.Addr(), 0)}, []netip.AddrPort{ep, netip.MustParseAddrPort("10.244.1.5:9090")}, []netip.AddrPort{netip.MustParseAddrPort("10.244.1.6:8080")}, "10.244.1.5"},
		{"a reader's name", Endpoint{Name: hashName{ep}}, []netip.AddrPort{ep, mapped}, []netip.AddrPort{netip.MustParseAddrPort("10.244.1.6:8080")}, "HASH"},
		{"neither", Endpoint{}, nil, []netip.AddrPort{ep}, "?"},
	}
	for _, c := range cases {
		for _, a := range c.is {
			if !c.e.Is(sp, a) {
				t.Errorf("%s: not %v", c.name, a)
			}
		}
		for _, a := range c.isNot {
			if c.e.Is(sp, a) {
				t.Errorf("%s: is %v", c.name, a)
			}
		}
		if got := c.e.String(); got != c.spells {
			t.Errorf("%s: String %q, want %q", c.name, got, c.spells)
		}
	}
	if got := sp.String(); got != "shop/web:http" {
		t.Errorf("ServicePort.String %q", got)
	}
	if got := (ServicePort{Namespace: "shop", Name: "web"}).String(); got != "shop/web" {
		t.Errorf("unnamed ServicePort.String %q", got)
	}
}

// TestKindRead: a read's errors name the dataplane read: Cilium's service table on a Cilium node, kube-proxy's
// rules wherever else anything is read.
func TestKindRead(t *testing.T) {
	for kind, want := range map[Kind]string{
		KindCilium: "Cilium's service table", KindKubeProxy: "kube-proxy's rules", KindIPVS: "kube-proxy's rules", "": "kube-proxy's rules",
	} {
		if got := kind.Read(); got != want {
			t.Errorf("%q: %q, want %q", kind, got, want)
		}
	}
}
