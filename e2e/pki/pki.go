// Package pki writes the certificates and keys a throwaway kube-apiserver needs: a CA, a serving certificate
// for the apiserver's addresses, and the service-account signing key pair.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files names what Write produced.
type Files struct {
	CACert, ServingCert, ServingKey string
	SAPublicKey, SAPrivateKey       string
	CAPEM                           []byte
}

// Write creates a CA and a serving certificate for ips and dnsNames in dir, plus an RSA key pair for
// service-account tokens (the apiserver's default signing algorithm is RS256).
func Write(dir string, ips []net.IP, dnsNames []string) (Files, error) {
	f := Files{
		CACert:       filepath.Join(dir, "ca.crt"),
		ServingCert:  filepath.Join(dir, "apiserver.crt"),
		ServingKey:   filepath.Join(dir, "apiserver.key"),
		SAPublicKey:  filepath.Join(dir, "sa.pub"),
		SAPrivateKey: filepath.Join(dir, "sa.key"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localtraffic-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("parse CA certificate: %w", err)
	}
	f.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(f.CACert, f.CAPEM, 0o644); err != nil {
		return f, fmt.Errorf("write CA: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("create serving certificate: %w", err)
	}
	if err := os.WriteFile(f.ServingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o644); err != nil {
		return f, fmt.Errorf("write serving certificate: %w", err)
	}
	if err := writeKey(f.ServingKey, srvKey); err != nil {
		return f, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return f, fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeKey(f.SAPrivateKey, saKey); err != nil {
		return f, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return f, fmt.Errorf("marshal service-account public key: %w", err)
	}
	if err := os.WriteFile(f.SAPublicKey, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return f, fmt.Errorf("write service-account public key: %w", err)
	}
	return f, nil
}

func writeKey(path string, key any) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return nil
}
