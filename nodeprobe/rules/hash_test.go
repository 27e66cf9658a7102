package rules

import (
	"testing"
	"time"
)

func TestIPTablesChainHash(t *testing.T) {
	// Examples from kube-proxy's own tests (reference §2).
	cases := []struct {
		sp   ServicePort
		want string
	}{
		{ServicePort{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: "TCP"}, "XPGD46QRK7WJZT7O"},
		{ServicePort{Namespace: "default", Name: "nginx", Protocol: "TCP"}, "2CMXP7HKUVJN7L6M"},
	}
	for _, c := range cases {
		if got := IPTablesChainHash(c.sp); got != c.want {
			t.Errorf("IPTablesChainHash(%+v) = %s, want %s", c.sp, got, c.want)
		}
	}
}

func TestNewSnapshot(t *testing.T) {
	sp := ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "TCP"}
	want := PortState{Programmed: true, Drop: true, DropPackets: 42}
	s := NewSnapshot(ModeIPTables, BackendNFT, []string{FamilyIPv4}, time.Unix(1, 0), map[ServicePort]PortState{sp: want})
	if got := s.Port(sp); got != want {
		t.Errorf("Port = %+v, want %+v", got, want)
	}
	sp.Protocol = "tcp" // protocol case does not matter
	if got := s.Port(sp); got != want {
		t.Errorf("lower-case protocol: %+v", got)
	}
	if got := s.Port(ServicePort{Namespace: "kubelings", Name: "checkout", Port: "http", Protocol: "UDP"}); got != (PortState{}) {
		t.Errorf("other protocol: %+v", got)
	}
	if s.Mode != ModeIPTables || s.Backend != BackendNFT || s.Len() != 1 || !s.ReadAt.Equal(time.Unix(1, 0)) {
		t.Errorf("snapshot %+v", s)
	}
}
