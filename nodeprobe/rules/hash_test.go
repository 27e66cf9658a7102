package rules

import "testing"

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
