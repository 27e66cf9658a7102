package pki

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
)

func TestServingCertificateVerifiesForItsAddresses(t *testing.T) {
	f, err := Write(t.TempDir(), []net.IP{net.ParseIP("10.250.0.2"), net.ParseIP("127.0.0.1")}, []string{"kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(f.CAPEM) {
		t.Fatal("CA PEM does not parse")
	}
	raw, err := os.ReadFile(f.ServingCert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"10.250.0.2", "127.0.0.1", "kubernetes"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.250.0.3"}); err == nil {
		t.Error("certificate verified for an address it does not name")
	}
	for _, p := range []string{f.SAPublicKey, f.SAPrivateKey, f.ServingKey} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
}
