package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// scaleObjects is the cluster docs/scale.md plans for: nodes Nodes, services Local NodePort Services in 100
// namespaces, each with one EndpointSlice of endpointsPer ready endpoints spread over the nodes.
func scaleObjects(nodes, services, endpointsPer int) []runtime.Object {
	objs := make([]runtime.Object, 0, nodes+2*services)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}}}})
	}
	for s := range services {
		ns, name := fmt.Sprintf("ns-%d", s%100), fmt.Sprintf("svc-%d", s)
		objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: fmt.Sprintf("10.96.%d.%d", s>>8&255, s&255),
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: int32(30000 + s%2768)}}}})
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		for e := range endpointsPer {
			n := (s*endpointsPer + e) % nodes
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("172.16.%d.%d", e, s&255)},
				NodeName: ptr.To(fmt.Sprintf("node-%d", n)), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		objs = append(objs, slice)
	}
	return objs
}

// BenchmarkStatusAtScale: `status -A`, in the default table, -o wide (the grid of every node) and -o json, against a fake API holding 5,000
// nodes, 2,000 Local Services and 100,000 endpoints (docs/performance.md has the figures and the command; the
// fake API's own copy of the objects is in the same process, so peak memory is an upper bound for the
// plugin's). Every Service drops on almost every node: the worst case for the output. The read sub-benchmark
// is the lists alone (what the fake API hands over), so the rest of each figure is the plugin's own work.
func BenchmarkStatusAtScale(b *testing.B) {
	cs := fake.NewClientset(scaleObjects(5000, 2000, 50)...)
	a := &cli.Env{In: strings.NewReader(""), Out: io.Discard, ErrOut: &bytes.Buffer{}, Getenv: func(string) string { return "" },
		Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if _, err := (statusQuery{}).load(context.Background(), cs, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, out := range []string{"table", "wide", "json"} {
		args := []string{"status", "-A"}
		if out != "table" {
			args = append(args, "-o", out)
		}
		b.Run(out, func(b *testing.B) {
			for b.Loop() {
				if code := execute(a, args); code != cli.ExitFindings {
					b.Fatalf("exit %d", code)
				}
			}
		})
	}
}
