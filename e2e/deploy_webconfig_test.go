package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

const (
	// The example's credentials, as deploy/README.md documents them.
	exampleUser     = "prometheus"
	examplePassword = "change-me-example-only"
	// webTestPort keeps clear of the harness's exporter on 9746 in the same node namespace.
	webTestPort = 19746
)

// testPKI writes a CA (ca.crt) and a server certificate for ips (tls.crt, tls.key) into dir and returns the CA
// pool and the server certificate's file paths.
func testPKI(t *testing.T, dir string, ips ...string) (pool *x509.CertPool, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fatalln(t, err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "deploy-test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		fatalln(t, err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fatalln(t, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localtraffic-exporter"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localtraffic-exporter"},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		fatalln(t, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		fatalln(t, err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		fatalln(t, err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		fatalln(t, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		fatalln(t, err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, certFile, keyFile
}

// exampleWebConfig loads deploy/examples/web-config.yaml and points its certificate paths at the test's files
// (the example names the Secret's mount path inside the container). Everything else stays as shipped.
func exampleWebConfig(t *testing.T, certFile, keyFile string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoDir(t), "deploy", "examples", "web-config.yaml"))
	if err != nil {
		fatalln(t, err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		fatalf(t, "examples/web-config.yaml: %v", err)
	}
	tlsCfg, ok := cfg["tls_server_config"].(map[string]any)
	if !ok {
		fatalf(t, "examples/web-config.yaml has no tls_server_config: %v", cfg)
	}
	tlsCfg["cert_file"], tlsCfg["key_file"] = certFile, keyFile
	if _, ok := cfg["basic_auth_users"].(map[string]any)[exampleUser]; !ok {
		fatalf(t, "examples/web-config.yaml has no user %q", exampleUser)
	}
	return cfg
}

// startWithWebConfig runs the exporter in node's namespace on webTestPort with --web.config.file=cfg, as the
// shipped ServiceAccount, and returns once it accepts TCP connections.
func startWithWebConfig(t *testing.T, c *cluster.Cluster, node *cluster.Node, cfg map[string]any) {
	t.Helper()
	ctx := testContext(t)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		fatalln(t, err)
	}
	path := filepath.Join(t.TempDir(), "web-config.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		fatalln(t, err)
	}
	kubeconfig, err := c.ExporterKubeconfig(ctx)
	if err != nil {
		fatalln(t, err)
	}
	p, err := cluster.StartProcess(cluster.ProcessSpec{Name: "exporter-webconfig-" + node.Name, LogDir: t.TempDir(), NS: node.NS,
		Bin: c.Binaries().Exporter, Args: []string{"--kubeconfig=" + kubeconfig, "--node-name=" + node.Name,
			fmt.Sprintf("--web.listen-address=%s:%d", node.IP, webTestPort), "--web.config.file=" + path,
			"--state.file=" + filepath.Join(t.TempDir(), "state.json")}})
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		p.Stop(0)
		if t.Failed() {
			t.Logf("exporter output:\n%s", p.LogTail(4000))
		}
	})
	eventually(t, 60*time.Second, "exporter listening with --web.config.file", func() error {
		if done, err := p.Exited(); done {
			return fmt.Errorf("exporter exited (%v):\n%s", err, p.LogTail(4000))
		}
		conn, err := node.Dialer().DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", node.IP, webTestPort))
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// webGet requests path on the test exporter with an optional TLS config and basic auth credentials.
func webGet(t *testing.T, node *cluster.Node, scheme string, tlsCfg *tls.Config, user, password, path string) (int, string, error) {
	t.Helper()
	client := &http.Client{
		Transport: &http.Transport{DialContext: node.Dialer().DialContext, TLSClientConfig: tlsCfg, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, fmt.Sprintf("%s://%s:%d%s", scheme, node.IP, webTestPort, path), nil)
	if err != nil {
		fatalln(t, err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(body), err
}

// TestDeployWebConfigTLS: with a TLS-only web config the exporter serves /metrics over HTTPS to a client
// trusting the CA, refuses plain HTTP, and refuses TLS below the example's min_version (1.2).
func TestDeployWebConfigTLS(t *testing.T) {
	c := sharedCluster(t)
	node := c.Nodes()[1]
	pool, certFile, keyFile := testPKI(t, t.TempDir(), node.IP)
	cfg := exampleWebConfig(t, certFile, keyFile)
	delete(cfg, "basic_auth_users")
	startWithWebConfig(t, c, node, cfg)

	code, body, err := webGet(t, node, "https", &tls.Config{RootCAs: pool}, "", "", "/metrics")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "localtraffic_build_info") {
		fatalf(t, "HTTPS scrape: %d %v, want 200 with localtraffic_build_info", code, err)
	}
	// Plain HTTP on the TLS port: Go's TLS server answers 400 and nothing else; no metric leaks.
	code, body, err = webGet(t, node, "http", nil, "", "", "/metrics")
	if err == nil && (code != http.StatusBadRequest || strings.Contains(body, "localtraffic_")) {
		errorf(t, "plain HTTP: %d %q, want refused (400 or a failed request) without metrics", code, tail(body, 200))
	}
	// An untrusted server certificate fails at the client; TLS 1.1 fails at the server.
	if _, _, err := webGet(t, node, "https", &tls.Config{}, "", "", "/metrics"); err == nil {
		errorln(t, "a client without the CA accepted the server certificate")
	}
	if _, _, err := webGet(t, node, "https", &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}, "", "", "/metrics"); err == nil {
		errorln(t, "TLS 1.1 accepted; the example sets min_version TLS12")
	}
}

// TestDeployWebConfigExample runs the shipped example as is (TLS and basic auth): no credentials and a wrong
// password get 401 — on /metrics and on the probe paths, which is why the example overlay probes over TCP —
// and the documented credentials get the metrics.
func TestDeployWebConfigExample(t *testing.T) {
	c := sharedCluster(t)
	node := c.Nodes()[1]
	pool, certFile, keyFile := testPKI(t, t.TempDir(), node.IP)
	startWithWebConfig(t, c, node, exampleWebConfig(t, certFile, keyFile))
	tlsCfg := &tls.Config{RootCAs: pool}

	for _, tc := range []struct{ user, password, path string }{
		{"", "", "/metrics"},
		{exampleUser, "wrong-password", "/metrics"},
		{"admin", examplePassword, "/metrics"},
		{"", "", "/readyz"},
		{"", "", "/healthz"},
	} {
		code, body, err := webGet(t, node, "https", tlsCfg, tc.user, tc.password, tc.path)
		if err != nil || code != http.StatusUnauthorized || strings.Contains(body, "localtraffic_") {
			errorf(t, "user %q password %q %s: %d %v, want 401 without metrics", tc.user, tc.password, tc.path, code, err)
		}
	}
	code, body, err := webGet(t, node, "https", tlsCfg, exampleUser, examplePassword, "/metrics")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "localtraffic_build_info") {
		errorf(t, "documented credentials: %d %v, want 200 with localtraffic_build_info", code, err)
	}
	code, body, err = webGet(t, node, "http", nil, exampleUser, examplePassword, "/metrics")
	if err == nil && (code != http.StatusBadRequest || strings.Contains(body, "localtraffic_")) {
		errorf(t, "plain HTTP with the right password: %d %q, want refused", code, tail(body, 200))
	}
}
