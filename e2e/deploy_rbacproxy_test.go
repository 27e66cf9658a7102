package e2e

// The metrics endpoint's gate: the shipped pod — the exporter on 127.0.0.1 and kube-rbac-proxy
// on the node's address, both with their manifest's args — in a node's network namespace, against the harness's
// real kube-apiserver (TokenReview, SubjectAccessReview, the shipped RBAC).

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// shippedPod is the DaemonSet's pod running on a node: the exporter in its sandbox and the kube-rbac-proxy sidecar.
type shippedPod struct {
	exporter, proxy corev1.Container
	proc            *podProcess
	// metricsBase is https://<node IP>:<the proxy's metrics port>, what Prometheus scrapes.
	metricsBase string
}

// runPodAsShipped gives node's metrics port to the shipped pod (stopping the harness's exporter, which holds it,
// and restarting it afterwards): the exporter as startAsPod runs it, kube-rbac-proxy with its container's args
// (the kubelet's $(VAR) expansion, NODE_IP the node's address) authenticated as the pod's ServiceAccount. It
// returns once the DaemonSet's readiness probe passes, as the kubelet would send it (no token, HTTPS to the pod's
// IP, the certificate not verified), and checks every liveness probe.
func runPodAsShipped(t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, node *cluster.Node, caps []corev1.Capability) *shippedPod {
	t.Helper()
	ctx := testContext(t)
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 2 || spec.Containers[1].Name != "kube-rbac-proxy" {
		fatalf(t, "the DaemonSet's containers are not the exporter and kube-rbac-proxy: %d", len(spec.Containers))
	}
	if spec.ServiceAccountName != cluster.ExporterServiceAccount || ds.Namespace != cluster.ExporterNamespace {
		fatalf(t, "the sidecar runs as %s/%s, the harness authenticates it as %s/%s", ds.Namespace, spec.ServiceAccountName,
			cluster.ExporterNamespace, cluster.ExporterServiceAccount)
	}
	pod := &shippedPod{exporter: spec.Containers[0], proxy: spec.Containers[1]}
	if len(pod.proxy.Ports) == 0 {
		fatalln(t, "kube-rbac-proxy declares no port")
	}
	pod.metricsBase = "https://" + net.JoinHostPort(node.IP, strconv.Itoa(int(pod.proxy.Ports[0].ContainerPort)))

	node.StopExporter()
	t.Cleanup(func() {
		if err := node.StartExporter(context.Background()); err != nil {
			errorf(t, "restart the harness exporter: %v", err)
			return
		}
		if err := node.WaitExporter(context.Background(), time.Minute); err != nil {
			errorf(t, "restart the harness exporter: %v", err)
		}
	})
	pod.proc = startAsPod(t, c, ds, node, caps)
	env := containerEnv(t, ds, pod.proxy, node)
	var args []string
	for _, a := range pod.proxy.Args {
		args = append(args, expandKubeletVars(a, env))
	}
	stop, err := node.StartKubeRBACProxy(ctx, "pod", args...)
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-rbac-proxy on %s:\n%s", node.Name, node.KubeRBACProxyLog("pod", 3000))
		}
	})

	eventually(t, 90*time.Second, "readiness probe", func() error {
		select {
		case <-pod.proc.Done():
			return fmt.Errorf("exporter exited:\n%s", tail(pod.proc.logs.String(), 4000))
		default:
		}
		return kubeletProbe(ctx, node, pod.exporter, pod.exporter.ReadinessProbe)
	})
	for _, ctr := range []corev1.Container{pod.exporter, pod.proxy} {
		if err := kubeletProbe(ctx, node, ctr, ctr.LivenessProbe); err != nil {
			errorf(t, "%s liveness probe: %v", ctr.Name, err)
		}
	}
	return pod
}

// kubeletProbe sends a probe as the kubelet does for a hostNetwork pod: to the pod's IP (the node's), the port by
// number or by the container's own port name, HTTPS without verifying the certificate, no credentials; 200-399
// passes. A TCP probe passes when the port accepts.
func kubeletProbe(ctx context.Context, node *cluster.Node, ctr corev1.Container, p *corev1.Probe) error {
	if p == nil {
		return fmt.Errorf("%s has no such probe", ctr.Name)
	}
	port := func(ps corev1.ProbeHandler) (int, error) {
		var v = ps.HTTPGet
		name := ""
		if v != nil {
			if v.Port.IntValue() > 0 {
				return v.Port.IntValue(), nil
			}
			name = v.Port.String()
		} else if ps.TCPSocket != nil {
			if ps.TCPSocket.Port.IntValue() > 0 {
				return ps.TCPSocket.Port.IntValue(), nil
			}
			name = ps.TCPSocket.Port.String()
		}
		for _, cp := range ctr.Ports {
			if cp.Name == name {
				return int(cp.ContainerPort), nil
			}
		}
		return 0, fmt.Errorf("%s: no port named %q in the container (the kubelet looks only there)", ctr.Name, name)
	}
	n, err := port(p.ProbeHandler)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(node.IP, strconv.Itoa(n))
	if p.TCPSocket != nil {
		conn, err := node.Dialer().DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if p.HTTPGet == nil {
		return fmt.Errorf("%s: probe %+v not simulated", ctr.Name, p)
	}
	scheme := strings.ToLower(string(p.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	code, body, err := getAs(ctx, node, scheme+"://"+addr+p.HTTPGet.Path, "")
	if err != nil {
		return err
	}
	if code < 200 || code >= 400 {
		return fmt.Errorf("%s GET %s: %d %s", ctr.Name, p.HTTPGet.Path, code, strings.TrimSpace(tail(body, 300)))
	}
	return nil
}

// getAs fetches url from inside node's network namespace with a bearer token ("" none), not verifying a server
// certificate (kube-rbac-proxy's is self-signed, as the shipped monitors accept).
func getAs(ctx context.Context, node *cluster.Node, url, token string) (int, string, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext:       node.Dialer().DialContext,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
	}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(body), err
}

// serviceAccountToken creates namespace/name if needed and returns a fresh token of it (TokenRequest API).
func serviceAccountToken(t *testing.T, c *cluster.Cluster, namespace, name string) string {
	t.Helper()
	ctx := testContext(t)
	if err := c.EnsureNamespace(ctx, namespace); err != nil {
		fatalln(t, err)
	}
	_, err := c.Admin().CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}
	exp := int64(24 * 3600) // beyond the longest test (a live Prometheus scrapes with it)
	tr, err := c.Admin().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// metricsReaderToken is a token of the Prometheus ServiceAccount the prometheus-operator overlay lets through
// kube-rbac-proxy: the overlay's ClusterRoleBinding (to deploy/base's metrics-reader ClusterRole, which the harness
// applied with the rest of deploy/base's RBAC) applied as shipped, its subject created.
func metricsReaderToken(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	var binding *unstructured.Unstructured
	for _, o := range renderDeploy(t, c, "overlays/prometheus-operator") {
		if o.GetKind() == "ClusterRoleBinding" && o.GetName() == deployName+"-metrics-reader" {
			binding = o
		}
	}
	if binding == nil {
		fatalln(t, "overlays/prometheus-operator binds no metrics reader")
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if len(subjects) != 1 {
		fatalf(t, "metrics-reader binding subjects %v: want Prometheus' ServiceAccount", subjects)
	}
	sa := subjects[0].(map[string]any)
	token := serviceAccountToken(t, c, sa["namespace"].(string), sa["name"].(string))
	if err := c.Apply(testContext(t), []*unstructured.Unstructured{binding}); err != nil {
		fatalln(t, err)
	}
	return token
}

// TestDeployKubeRBACProxy: the shipped pod's metrics are not open to the node network. On the node's address only
// kube-rbac-proxy answers, over TLS: without a token 401, with the token of a ServiceAccount the RBAC does not
// allow GET /metrics 403, with the token of the Prometheus ServiceAccount the prometheus-operator overlay binds 200
// and the metrics. The kubelet's probes pass without a token, and only they: the landing page wants one too, and
// plain HTTP to the node's port reaches no exporter.
func TestDeployKubeRBACProxy(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	ds := renderedDaemonSet(t, c, "base")
	node := c.Nodes()[0]
	pod := runPodAsShipped(t, c, ds, node, nil)
	metrics := pod.metricsBase + "/metrics"

	stranger := serviceAccountToken(t, c, "e2e-monitoring", "no-metrics-rbac")
	prometheus := metricsReaderToken(t, c)
	for _, tc := range []struct {
		what, path, token string
		code              int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a token that is not one", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the RBAC", "/metrics", stranger, http.StatusForbidden},
		{"Prometheus' ServiceAccount", "/metrics", prometheus, http.StatusOK},
		{"the landing page without a token", "/", "", http.StatusUnauthorized},
		{"the landing page as Prometheus (granted /metrics only)", "/", prometheus, http.StatusForbidden},
		{"the readiness path without a token (the kubelet's probe)", "/readyz", "", http.StatusOK},
	} {
		code, body, err := getAs(ctx, node, pod.metricsBase+tc.path, tc.token)
		if err != nil {
			errorf(t, "%s: GET %s: %v", tc.what, tc.path, err)
			continue
		}
		if code != tc.code {
			errorf(t, "%s: GET %s: %d, want %d: %s", tc.what, tc.path, code, tc.code, tail(body, 300))
		}
		if tc.code != http.StatusOK && strings.Contains(body, "localtraffic_") {
			errorf(t, "%s: GET %s answered %d with metrics", tc.what, tc.path, code)
		}
	}
	code, body, err := getAs(ctx, node, metrics, prometheus)
	if err != nil || code != http.StatusOK {
		fatalf(t, "scrape as Prometheus: %d %v", code, err)
	}
	m, err := cluster.ParseMetrics(body)
	if err != nil {
		fatalln(t, err)
	}
	if err := m.Expect("localtraffic_informer_synced", cluster.Labels{"node": node.Name, "resource": "services"}, 1); err != nil {
		errorf(t, "the exporter's metrics through the proxy: %v", err)
	}

	// Plain HTTP on the node's port meets kube-rbac-proxy's TLS listener, not the exporter; and nothing but the
	// proxy's own /healthz listens on its endpoints port.
	plain := strings.Replace(metrics, "https://", "http://", 1)
	if code, body, err := getAs(ctx, node, plain, ""); err == nil && (code == http.StatusOK || strings.Contains(body, "localtraffic_")) {
		errorf(t, "plain HTTP %s: %d with metrics: the exporter is on the node's address", plain, code)
	}
	health := ""
	for _, cp := range pod.proxy.Ports {
		if cp.Name != pod.proxy.Ports[0].Name {
			health = "https://" + net.JoinHostPort(node.IP, strconv.Itoa(int(cp.ContainerPort)))
		}
	}
	if code, body, err := getAs(ctx, node, health+"/metrics", prometheus); err != nil || code != http.StatusNotFound || strings.Contains(body, "localtraffic_") {
		errorf(t, "kube-rbac-proxy's endpoints port %s/metrics: %d %v: want 404, no metrics there", health, code, err)
	}
}
