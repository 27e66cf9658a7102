package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
	"github.com/localtraffic/localtraffic-exporter/e2e/pki"
)

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Cluster) track(p *Process) {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
}

// startControlPlane starts etcd and kube-apiserver in the control-plane namespace, waits for /readyz, and
// builds the admin client, which reaches the apiserver through a loopback forwarder in the host namespace.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	certDir := filepath.Join(c.WorkDir, "pki")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	files, err := pki.Write(certDir, []net.IP{net.ParseIP(controlPlaneIP), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return err
	}
	c.CAFile = files.CACert
	c.adminToken = randomToken()
	c.proxyToken = randomToken()
	// Static tokens: the admin (system:masters) and kube-proxy, whose user is bound to system:node-proxier by
	// the apiserver's bootstrap RBAC policy.
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,system:kube-proxy,kube-proxy,\"\"\n", c.adminToken, c.proxyToken)
	// With controllers: kube-controller-manager, kube-scheduler and each node agent (system:node:<name>) get
	// tokens of their own, so the bootstrap policy and the Node authorizer check them as in a real cluster.
	tokens += c.controllerTokenLines()
	tokenFile := filepath.Join(certDir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}

	etcd, err := c.startProcess("etcd", c.ControlPlaneNS, c.bins.Etcd,
		"--name=e2e",
		"--data-dir="+filepath.Join(c.WorkDir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=e2e=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		// Throwaway data: skipping fsync keeps etcd from stalling the shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	c.track(etcd)
	if err := etcd.Await(ctx, 60*time.Second, pollInterval, func() error {
		return httpGetOK(ctx, netns.Dialer{NS: c.ControlPlaneNS}, "http://127.0.0.1:2379/health")
	}); err != nil {
		return err
	}

	admission, err := podSecurityFlags(c.WorkDir, c.cfg.PodSecurityDefault)
	if err != nil {
		return err
	}
	apiserver, err := c.startAPIServerProcess(append(admission,
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+controlPlaneIP,
		"--advertise-address="+controlPlaneIP,
		fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--tls-cert-file="+files.ServingCert,
		"--tls-private-key-file="+files.ServingKey,
		"--client-ca-file="+files.CACert,
		"--token-auth-file="+tokenFile,
		// Node: the node agents' requests go through the Node authorizer, as a kubelet's do.
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+files.SAPublicKey,
		"--service-account-signing-key-file="+files.SAPrivateKey,
		"--service-cluster-ip-range="+c.serviceCIDRs(),
		"--service-node-port-range=30000-32767",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir="+filepath.Join(c.WorkDir, "apiserver-certs"),
		// kubectl logs goes to a node's kubelet port on its InternalIP (the nodes' Hostname addresses resolve
		// nowhere); ServeKubeletLogs answers there for the mirror pods.
		"--kubelet-preferred-address-types=InternalIP",
		"--v=1",
	)...)
	if err != nil {
		return err
	}
	c.track(apiserver)
	c.apiserver = apiserver

	// The in-namespace kubeconfig (for kube-proxy and exporters inside the node namespaces) and the host
	// kubeconfig (for the harness, kubectl and other tools on the host) differ only in the server address.
	fwd, err := c.Forward(c.ControlPlaneNS, fmt.Sprintf("%s:%d", controlPlaneIP, apiserverPort))
	if err != nil {
		return err
	}
	c.nsKubecfg = filepath.Join(c.WorkDir, "admin.kubeconfig")
	if err := writeKubeconfig(c.nsKubecfg, c.APIServerURL, files.CAPEM, "admin", c.adminToken); err != nil {
		return err
	}
	c.hostKubecfg = filepath.Join(c.WorkDir, "admin-host.kubeconfig")
	if err := writeKubeconfig(c.hostKubecfg, "https://"+fwd, files.CAPEM, "admin", c.adminToken); err != nil {
		return err
	}
	c.adminConfig = &rest.Config{
		Host:            "https://" + fwd,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: files.CAPEM},
		QPS:             100,
		Burst:           200,
		Timeout:         30 * time.Second,
	}
	c.admin, err = kubernetes.NewForConfig(c.adminConfig)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return c.waitAPIServer(ctx, apiserver)
}

func (c *Cluster) waitAPIServer(ctx context.Context, apiserver *Process) error {
	return apiserver.Await(ctx, 3*time.Minute, pollInterval, func() error {
		body, err := c.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	})
}

// startAPIServerProcess starts kube-apiserver with args and keeps them for StartAPIServer.
func (c *Cluster) startAPIServerProcess(args ...string) (*Process, error) {
	c.apiserverArgs = args
	return c.startProcess("kube-apiserver", c.ControlPlaneNS, c.bins.APIServer, args...)
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10 s): an API outage for every client.
// etcd keeps running; StartAPIServer brings the same apiserver back.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	p.Stop(10 * time.Second)
}

// StartAPIServer starts kube-apiserver again with its original flags and waits for /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	if p := c.apiserver; p != nil {
		if done, _ := p.Exited(); !done {
			c.mu.Unlock()
			return errors.New("kube-apiserver already runs")
		}
	}
	c.mu.Unlock()
	p, err := c.startAPIServerProcess(c.apiserverArgs...)
	if err != nil {
		return err
	}
	c.track(p)
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	return c.waitAPIServer(ctx, p)
}

// writeKubeconfig writes a token kubeconfig for server.
func writeKubeconfig(path, server string, ca []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	// Write beside and rename: an exporter started a moment ago may be reading the file being replaced.
	tmp := fmt.Sprintf("%s.%d.tmp", path, time.Now().UnixNano())
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// Admin returns a clientset with cluster-admin rights (system:masters).
func (c *Cluster) Admin() *kubernetes.Clientset { return c.admin }

// AdminRESTConfig returns a copy of the admin client's configuration (for dynamic clients).
func (c *Cluster) AdminRESTConfig() *rest.Config { return rest.CopyConfig(c.adminConfig) }

// AdminKubeconfig returns the path of an admin kubeconfig usable from the host namespace (kubectl, tools):
// its server is a loopback forwarder into the control-plane namespace.
func (c *Cluster) AdminKubeconfig() string { return c.hostKubecfg }

// AdminKubeconfigInNamespaces returns the path of an admin kubeconfig whose server is the apiserver's own
// address, reachable from inside the harness's namespaces.
func (c *Cluster) AdminKubeconfigInNamespaces() string { return c.nsKubecfg }

// Forward listens on an ephemeral 127.0.0.1 port in the host namespace and forwards each connection to addr
// inside namespace ns. It returns the loopback address; the forwarder lives until Close.
func (c *Cluster) Forward(ns, addr string) (string, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("forwarder listen: %w", err)
	}
	c.mu.Lock()
	c.listeners = append(c.listeners, l)
	c.mu.Unlock()
	d := netns.Dialer{NS: ns}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := d.DialContext(context.Background(), "tcp", addr)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return l.Addr().String(), nil
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// httpGetOK GETs url through dialer and wants a 200.
func httpGetOK(ctx context.Context, d netns.Dialer, url string) error {
	_, err := httpGetBody(ctx, d, url)
	return err
}

// httpGetBody GETs url through dialer and returns the body of a 200 answer.
func httpGetBody(ctx context.Context, d netns.Dialer, url string) ([]byte, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body[:min(len(body), 4096)])
	}
	return body, nil
}
