package kernelrules

import (
	"strings"
	"testing"
	"time"
)

func TestIPTablesChainHash(t *testing.T) {
	// Examples from kube-proxy's own tests (docs/kube-proxy.md, Chain hashes).
	cases := []struct {
		sp   ServicePort
		want string
	}{
		{ServicePort{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: "TCP"}, "XPGD46QRK7WJZT7O"},
		{ServicePort{Namespace: "default", Name: "nginx", Protocol: "TCP"}, "2CMXP7HKUVJN7L6M"},
	}
	for _, c := range cases {
		if got := iptablesChainHash(c.sp); got != c.want {
			t.Errorf("iptablesChainHash(%+v) = %s, want %s", c.sp, got, c.want)
		}
	}
}

func TestNewSnapshot(t *testing.T) {
	sp := ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	want := PortState{Programmed: true, Drop: true, DropPackets: 42}
	s := NewSnapshot(ModeIPTables, BackendNFT, []string{FamilyIPv4}, time.Unix(1, 0), map[ServicePort]PortState{sp: want})
	if got := s.Port(sp); !equalState(got, want) {
		t.Errorf("Port = %+v, want %+v", got, want)
	}
	if got := s.Family(sp, FamilyIPv4); !equalState(got, want) {
		t.Errorf("Family(IPv4) = %+v, want %+v", got, want)
	}
	if !s.HasFamily(FamilyIPv4) || s.HasFamily(FamilyIPv6) {
		t.Errorf("HasFamily IPv4 %v IPv6 %v", s.HasFamily(FamilyIPv4), s.HasFamily(FamilyIPv6))
	}
	sp.Protocol = "tcp" // protocol case does not matter
	if got := s.Port(sp); !equalState(got, want) {
		t.Errorf("lower-case protocol: %+v", got)
	}
	if got := s.Port(ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "UDP"}); !equalState(got, PortState{}) {
		t.Errorf("other protocol: %+v", got)
	}
	if s.Mode != ModeIPTables || s.Backend != BackendNFT || s.Len() != 1 || !s.ReadAt.Equal(time.Unix(1, 0)) {
		t.Errorf("snapshot %+v", s)
	}
}

func TestNewFamilySnapshot(t *testing.T) {
	sp := ServicePort{Namespace: "ns", Name: "dual", Port: "http", Protocol: "TCP"}
	v4 := PortState{Programmed: true, LocalEndpoints: 1}
	v6 := PortState{Programmed: true, Drop: true, DropPackets: 5, Drops: []DropRule{
		{Address: "2001:db8::7", Port: 80, Packets: 2, Counted: true},
		{Port: 30080, Packets: 3, Counted: true},
	}}
	s := NewFamilySnapshot(ModeIPTables, BackendNFT, time.Unix(1, 0), map[string]map[ServicePort]PortState{
		FamilyIPv6: {sp: v6}, FamilyIPv4: {sp: v4},
	})
	if got := s.Families; len(got) != 2 || got[0] != FamilyIPv4 || got[1] != FamilyIPv6 {
		t.Fatalf("families %v", got)
	}
	if got := s.Family(sp, FamilyIPv4); !equalState(got, v4) {
		t.Errorf("IPv4 %+v", got)
	}
	got6 := s.Family(sp, FamilyIPv6)
	if len(got6.Drops) != 2 || got6.Drops[0].Address != "" || got6.Drops[1].Address != "2001:db8::7" {
		t.Errorf("IPv6 drops not NodePort first: %+v", got6.Drops)
	}
	// The caller's slice was copied, and appending to a returned one does not
	// write into the snapshot.
	if v6.Drops[0].Address != "2001:db8::7" {
		t.Error("NewFamilySnapshot sorted the caller's slice")
	}
	_ = append(got6.Drops, DropRule{Address: "x"})
	if again := s.Family(sp, FamilyIPv6); len(again.Drops) != 2 {
		t.Errorf("snapshot changed by append: %+v", again.Drops)
	}
	m := s.Port(sp)
	if !m.Programmed || !m.Drop || m.LocalEndpoints != 1 || m.DropPackets != 5 || len(m.Drops) != 2 {
		t.Errorf("merged %+v", m)
	}
	if s.Len() != 1 {
		t.Errorf("Len %d, want 1 (one port in two families)", s.Len())
	}
}

// iptablesChainHash is the hash kube-proxy puts in KUBE-SVC/SVL/EXT/FW/XLB-<hash>
// chain names: the first 16 characters of base32(sha256("ns/name[:port]" + protocol)),
// protocol in lower case.
func iptablesChainHash(sp ServicePort) string {
	k := hashKey(sp.String(), strings.ToLower(sp.Protocol))
	return string(k[:])
}
