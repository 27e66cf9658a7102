package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletportforward "k8s.io/cri-streaming/pkg/streaming/portforward"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// The kubelet's port-forward for the mirror pods, beside their logs on the kubelet port: `kubectl port-forward`
// (and any client of pods/portforward) goes through the real apiserver, which authorizes it and connects to the
// node's kubelet port; the kubelet's own streaming server code (k8s.io/cri-streaming) answers there, and a mirror
// pod's host network is the node's namespace, so a forwarded port is dialled on the node's loopback — what
// containerd and CRI-O do for a hostNetwork pod.

// portForward serves GET and POST /portForward/{namespace}/{pod} for the mirror pods of node.
func (c *Cluster) portForward(n *Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pod, err := c.admin.CoreV1().Pods(r.PathValue("namespace")).Get(r.Context(), r.PathValue("pod"), metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != n.Name || pod.Annotations[MirrorLogAnnotation] == "" || !pod.Spec.HostNetwork {
			http.Error(w, fmt.Sprintf("no host-network mirror pod %s/%s on %s (%v)", r.PathValue("namespace"), r.PathValue("pod"), n.Name, err), http.StatusNotFound)
			return
		}
		kubeletportforward.ServePortForward(w, r, hostLoopback{ns: n.NS}, pod.Namespace+"/"+pod.Name, string(pod.UID),
			&kubeletportforward.V4Options{}, 4*time.Hour, 30*time.Second, []string{kubeletportforward.ProtocolV1Name})
	}
}

// hostLoopback forwards to localhost:port in a node's network namespace.
type hostLoopback struct{ ns string }

func (h hostLoopback) PortForward(ctx context.Context, _ string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := netns.Dialer{NS: h.ns}.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to 127.0.0.1:%d in %s: %w", port, h.ns, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	<-done
	return nil
}
