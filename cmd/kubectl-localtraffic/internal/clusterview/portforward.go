package clusterview

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	//lint:ignore SA1019 client-go's port-forward and SPDY dialers (v0.37) still take and return these types.
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// maxMetricsBody bounds what one exporter's answer may be (a node's metrics for 2,000 Local Services are about
// 2 MB).
const maxMetricsBody = 64 << 20

// portForwarder reaches a pod's port through the API server's pods/portforward with the user's own credentials,
// as kubectl port-forward does (WebSockets, falling back to SPDY). Why not the API server's pod proxy: the API
// server authenticates the user and then drops the Authorization header, so kube-rbac-proxy behind the pod
// proxy sees no token and answers 401; and why not the node's address with the user's token: kube-rbac-proxy's
// certificate is self-signed as shipped, so the user's token would go to whatever answers on a node's address,
// and a laptop seldom reaches node addresses anyway. A port-forward lands on the pod's loopback, where the
// exporter listens behind kube-rbac-proxy; the API server authorizes it (get and create on pods/portforward in
// the exporter's namespace), a right stronger than kube-rbac-proxy's get on /metrics.
type portForwarder struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

// NewPortForwarder is the cli.Fetcher of the kubeconfig flags.
func NewPortForwarder(f *genericclioptions.ConfigFlags) (cli.Fetcher, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &portForwarder{cfg: cfg, cs: cs}, nil
}

func (p *portForwarder) dialer(pod *corev1.Pod) (httpstream.Dialer, error) {
	u := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(p.cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, p.cfg)
	if err != nil {
		return spdyDialer, nil //nolint:nilerr // SPDY alone still works with every API server that has no WebSockets
	}
	// As kubectl port-forward: WebSockets first, SPDY when the API server does not upgrade them.
	return portforward.NewFallbackDialer(ws, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	}), nil
}

// Get is a GET of path on the pod's port through a port-forward of its own, closed after the answer.
func (p *portForwarder) Get(ctx context.Context, pod *corev1.Pod, port int, scheme, path string) ([]byte, error) {
	d, err := p.dialer(pod)
	if err != nil {
		return nil, err
	}
	fctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	// Port 0 locally: the kernel picks a free one; only the loopback, only for this one request.
	fw, err := portforward.NewOnAddressesWithContext(fctx, d, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
	if err != nil {
		stop()
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		stop()
		<-done
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- err // for the deferred receive
		return nil, fmt.Errorf("port-forward to %s: %w", pod.Name, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("port-forward to %s: %w", pod.Name, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		return nil, fmt.Errorf("port-forward to %s: no local port: %v", pod.Name, err)
	}
	// The TLS of an exporter's own web config ends in the pod, at the far end of the API server's authenticated
	// tunnel: its certificate names the node, not 127.0.0.1, so it is not verified.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		DisableKeepAlives: true,
	}}
	u := url.URL{Scheme: scheme, Host: "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), Path: path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s%s through a port-forward to %s: %w", scheme+"://:"+strconv.Itoa(port), path, pod.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return nil, fmt.Errorf("reading %s from %s: %w", path, pod.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := fmt.Sprintf("GET %s on %s's port %d: %s", path, pod.Name, port, resp.Status)
		if resp.StatusCode == http.StatusUnauthorized {
			msg += " (the exporter's --web.config.file asks for credentials the plugin does not send)"
		}
		return nil, errors.New(msg)
	}
	return body, nil
}
