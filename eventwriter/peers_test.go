package eventwriter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// Over https the ServiceAccount token goes with each ask, read from its file each time; the CA file verifies
// the peer's certificate, and a certificate it does not sign is refused. Over http no token is sent.
func TestPeersOverTLSWithToken(t *testing.T) {
	var gotAuth string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		_ = json.NewEncoder(w).Encode(exposure.Page{Instance: "i", Node: "n"})
	}))
	defer srv.Close()
	dir := t.TempDir()
	token, ca, other := filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(token, []byte("tok-1\n"))
	write(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	write(other, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: selfSigned(t)}))
	p := peer{key: "n", url: srv.URL + "/episodes"}

	for _, c := range []struct {
		name, ca string
		ok       bool
	}{{"the peer's CA", ca, true}, {"no CA: not verified", "", true}, {"another CA", other, false}} {
		pc, err := newPeerClient(Config{PeersScheme: "https", CAFile: c.ca, TokenFile: token})
		if err != nil {
			t.Fatal(err)
		}
		gotAuth = ""
		_, err = pc.page(context.Background(), p, 0)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
		}
		if c.ok && gotAuth != "Bearer tok-1" {
			t.Errorf("%s: Authorization %q", c.name, gotAuth)
		}
	}
	write(token, []byte("tok-2"))
	pc, _ := newPeerClient(Config{PeersScheme: "https", TokenFile: token})
	if _, err := pc.page(context.Background(), p, 0); err != nil || gotAuth != "Bearer tok-2" {
		t.Errorf("the rotated token: %q, %v", gotAuth, err)
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		_ = json.NewEncoder(w).Encode(exposure.Page{Instance: "i", Node: "n"})
	}))
	defer plain.Close()
	pc, _ = newPeerClient(Config{PeersScheme: "http", TokenFile: token})
	if _, err := pc.page(context.Background(), peer{url: plain.URL}, 0); err != nil || gotAuth != "" {
		t.Errorf("over http: Authorization %q, %v", gotAuth, err)
	}
}

// selfSigned is a CA certificate of its own (httptest's servers all share one).
func selfSigned(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
