package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// The harness runs kube-proxy and the exporter as processes, not as pods of a kubelet. For what operators do with
// pods — find the one on a node with `kubectl get pods --field-selector spec.nodeName=...`, read its spec, `kubectl
// logs` it — a mirror pod stands for such a process: a Pod object bound to the node, Running, whose
// MirrorLogAnnotation names the process's log, and ServeKubeletLogs answers the kubelet's log API for it on the
// node's address, where the apiserver proxies `kubectl logs`, and its port-forward (kubeletportforward.go).

// MirrorLogAnnotation names the harness log (Cluster.LogTail's name) a mirror pod's containers log to;
// MirrorLogAnnotation + "." + <container> overrides it for one container.
const MirrorLogAnnotation = "e2e.localtraffic.io/log"

// KubeletPort is where a kubelet serves its API; the apiserver dials it on the node's InternalIP.
const KubeletPort = 10250

// ServeKubeletLogs serves GET /containerLogs/<namespace>/<pod>/<container> (tailLines honoured) on every node's
// address, port KubeletPort, over TLS, in the node's namespace, from the log MirrorLogAnnotation names on that
// pod, and /portForward/<namespace>/<pod> for host-network mirror pods (kubeletportforward.go). Nothing else of the
// kubelet's API is served. stop closes the listeners.
func (c *Cluster) ServeKubeletLogs(ctx context.Context) (stop func(), err error) {
	pkiDir := filepath.Join(c.WorkDir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "apiserver.crt"), filepath.Join(pkiDir, "apiserver.key"))
	if err != nil {
		return nil, fmt.Errorf("kubelet logs: serving certificate: %w", err)
	}
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for _, n := range c.nodes {
		l, err := netns.Listen(n.NS, net.JoinHostPort(n.IP, strconv.Itoa(KubeletPort)))
		if err != nil {
			stop()
			return nil, fmt.Errorf("kubelet logs on %s: %w", n.Name, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", c.containerLogs(n.Name))
		mux.HandleFunc("GET /portForward/{namespace}/{pod}", c.portForward(n))
		mux.HandleFunc("POST /portForward/{namespace}/{pod}", c.portForward(n))
		s := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() {
			_ = s.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
		}()
	}
	return stop, nil
}

func (c *Cluster) containerLogs(node string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pod, err := c.admin.CoreV1().Pods(r.PathValue("namespace")).Get(r.Context(), r.PathValue("pod"), metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != node || pod.Annotations[MirrorLogAnnotation] == "" {
			http.Error(w, fmt.Sprintf("no mirror pod %s/%s on %s (%v)", r.PathValue("namespace"), r.PathValue("pod"), node, err), http.StatusNotFound)
			return
		}
		log := pod.Annotations[MirrorLogAnnotation]
		if l := pod.Annotations[MirrorLogAnnotation+"."+r.PathValue("container")]; l != "" {
			log = l
		}
		f, err := os.Open(filepath.Join(c.WorkDir, log+".log"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		defer f.Close()
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if n, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil && n >= 0 && n < len(lines) {
			lines = lines[len(lines)-n:]
		}
		w.Header().Set("Content-Type", "text/plain")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}

// CreateMirrorPod creates pod bound to node, reports it Running and Ready on the node's address (hostNetwork), and
// names log as its containers' log. The caller deletes it (DeleteMirrorPod).
func (c *Cluster) CreateMirrorPod(ctx context.Context, pod *corev1.Pod, node *Node, log string) error {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = node.Name
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[MirrorLogAnnotation] = log
	// ServiceAccount admission wants the pod's ServiceAccount to exist; no controller-manager creates "default" here.
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	_, err := c.admin.CoreV1().ServiceAccounts(pod.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("mirror pod %s/%s: ServiceAccount %s: %w", pod.Namespace, pod.Name, sa, err)
	}
	pods := c.admin.CoreV1().Pods(pod.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("mirror pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	created.Status = HostNetworkRunning(node.IP)
	now := *created.Status.StartTime
	for _, ctr := range created.Spec.Containers {
		created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true,
			ContainerID: "e2e://" + log + "/" + ctr.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mirror pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// DeleteMirrorPod deletes a mirror pod at once (no kubelet confirms a graceful deletion); a missing one is no error.
func (c *Cluster) DeleteMirrorPod(ctx context.Context, namespace, name string) error {
	err := c.admin.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// KubeProxyMirrorPod is the pod kube-proxy on the node would be in a kubeadm cluster (kube-system, k8s-app=kube-proxy,
// NODE_NAME from the downward API) with the command line the harness runs it with; its log is kube-proxy's.
func (n *Node) KubeProxyMirrorPod() (*corev1.Pod, string, error) {
	n.mu.Lock()
	args := append([]string(nil), n.kubeProxyArgs...)
	n.mu.Unlock()
	if len(args) == 0 {
		return nil, "", errors.New("kube-proxy on " + n.Name + " was never started")
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-" + n.Name, Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-proxy"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "kube-proxy",
			HostNetwork:        true,
			Containers: []corev1.Container{{
				Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.37.2",
				Command: append([]string{"/usr/local/bin/kube-proxy"}, args...),
				Env:     []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
			}},
		},
	}, "kube-proxy-" + n.Name, nil
}

// HostNetworkRunning is the status a kubelet reports for a running, ready hostNetwork pod on the node with
// address ip (no kubelet runs in the harness: the tests that need such pods report it themselves).
func HostNetworkRunning(ip string) corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: ip, HostIPs: []corev1.HostIP{{IP: ip}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
}
