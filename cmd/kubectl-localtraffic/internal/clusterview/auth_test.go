package clusterview

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The plugin's API client takes a kubeconfig's credentials as kubectl does (client-go reads them only for an
// API server reached over TLS): an exec credential plugin (what
// EKS, GKE and AKS kubeconfigs use) and the OIDC auth provider. The API server here accepts only the token the
// credential carries.
func TestKubeClientAuthPlugins(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "credential-plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\n"+
		`echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-exec"}}'`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An ID token that has not expired is used as it is, without asking the issuer (client-go's oidc provider).
	claims := fmt.Sprintf(`{"iss":"https://issuer.invalid","sub":"oncall","aud":"kubernetes","exp":%d}`, time.Now().Add(time.Hour).Unix())
	idToken := b64(`{"alg":"RS256","typ":"JWT"}`) + "." + b64(claims) + ".c2lnbmF0dXJl"

	for _, tc := range []struct{ name, user, token string }{
		{"exec", fmt.Sprintf(`exec: {apiVersion: client.authentication.k8s.io/v1, command: %q, interactiveMode: Never}`, plugin), "from-exec"},
		{"oidc", fmt.Sprintf(`auth-provider: {name: oidc, config: {client-id: kubernetes, idp-issuer-url: "https://issuer.invalid", id-token: %q}}`, idToken), idToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer "+tc.token {
					http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`, http.StatusUnauthorized)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"node-a"}}]}`)
			}))
			defer srv.Close()
			kubeconfig := filepath.Join(t.TempDir(), "config")
			if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {%s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL, caData(srv), tc.user)), 0o600); err != nil {
				t.Fatal(err)
			}
			flags := genericclioptions.NewConfigFlags(false)
			flags.KubeConfig = &kubeconfig
			cs, err := KubeClient(flags)
			if err != nil {
				t.Fatalf("building the client: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing nodes with %s credentials: %v", tc.name, err)
			}
			if len(nodes.Items) != 1 {
				t.Errorf("got %d nodes, want 1", len(nodes.Items))
			}
		})
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// caData is the test server's certificate as a kubeconfig's certificate-authority-data.
func caData(srv *httptest.Server) string {
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}
