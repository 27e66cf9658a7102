package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// metricsOf is what one node's exporter answers: node-2 blackholes kubelings/checkout and sees its clients
// dropped, node-3 blackholes it with nobody using it yet.
var metricsOf = map[string]string{
	"exporter-2": `# TYPE localtraffic_blackhole_reason gauge
localtraffic_blackhole_reason{namespace="kubelings",node="node-2",reason="traffic_lost",service="checkout"} 1
# TYPE localtraffic_arrivals_meter_state gauge
localtraffic_arrivals_meter_state{node="node-2",state="ok"} 1
localtraffic_arrivals_meter_state{node="node-2",state="disabled"} 0
`,
	"exporter-3": `# TYPE localtraffic_blackhole_reason gauge
localtraffic_blackhole_reason{namespace="kubelings",node="node-3",reason="no_traffic_seen",service="checkout"} 1
`,
}

// exporterFetch stands in for the port-forwards: each pod's answer by name, and what was asked of it.
type exporterFetch struct {
	mu    sync.Mutex
	asked []string // "pod scheme://:port/path"
}

func (f *exporterFetch) Get(_ context.Context, pod *corev1.Pod, port int, scheme, path string) ([]byte, error) {
	f.mu.Lock()
	f.asked = append(f.asked, fmt.Sprintf("%s %s://:%d%s", pod.Name, scheme, port, path))
	f.mu.Unlock()
	m, ok := metricsOf[pod.Name]
	if !ok {
		return nil, errors.New("port-forward: connection refused")
	}
	return []byte(m), nil
}

// shippedDaemonSet is deploy/base's DaemonSet as the repository ships it.
func shippedDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile("../../../../deploy/base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := sigsyaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

// exporterPods are the DaemonSet's pods on node-1..3, labelled as its template says.
func exporterPods(ds *appsv1.DaemonSet) []runtime.Object {
	var out []runtime.Object
	for _, n := range []string{"1", "2", "3"} {
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "exporter-" + n, Labels: ds.Spec.Template.Labels},
			Spec:       corev1.PodSpec{NodeName: "node-" + n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	return out
}

// allowPortForward answers the SelfSubjectAccessReviews for pods/portforward: get always, create when allowed.
func allowPortForward(cs *fake.Clientset, allowed bool) {
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = ra != nil && ra.Resource == "pods" && ra.Subresource == "portforward" && (allowed || ra.Verb == "get")
		return true, r, nil
	})
}

func exportersApp(cs *fake.Clientset, f cli.Fetcher, out, errOut *bytes.Buffer) *cli.Env {
	return &cli.Env{In: strings.NewReader(""), Out: out, ErrOut: errOut, Getenv: func(string) string { return "" },
		Client:  func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil },
		Forward: func(*genericclioptions.ConfigFlags) (cli.Fetcher, error) { return f, nil }}
}

// status --from-exporters finds deploy/base's exporter from its DaemonSet (pods by its selector, the exporter's
// own port and path from its container's flags: 127.0.0.1:9746, /metrics, plain HTTP behind kube-rbac-proxy) and
// reads each node's exporter into the OBSERVED column: node-2 loses traffic, node-3 has nobody reaching it yet,
// node-1's exporter does not answer (its node stays unknown, the error names it, the exit status is 1 for the
// blackholes found anyway). Only the exporter's own port of the DaemonSet's pods is forwarded to: not another
// controller's pod that carries the same labels.
func TestStatusFromExporters(t *testing.T) {
	ds := shippedDaemonSet(t)
	objs := append(drillObjects(true), ds)
	objs = append(objs, exporterPods(ds)...)
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "debug-copy", Labels: ds.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "debug-copy-5d8f", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	cs := fake.NewClientset(objs...)
	allowPortForward(cs, true)
	f := &exporterFetch{}
	var out, errOut bytes.Buffer
	a := exportersApp(cs, f, &out, &errOut)
	if code := execute(a, []string{"status", "-n", "kubelings", "--from-exporters"}); code != cli.ExitFindings {
		t.Fatalf("exit %d, want %d\n%s%s", code, cli.ExitFindings, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "OBSERVED") || !strings.Contains(out.String(), "traffic_lost: node-2; no_traffic_seen: node-3") {
		t.Errorf("no OBSERVED column naming node-2 and node-3:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "no report from the exporter on node-1: port-forward: connection refused") {
		t.Errorf("the unanswered exporter is not reported: %q", errOut.String())
	}

	sort.Strings(f.asked)
	want := []string{"exporter-1 http://:9746/metrics", "exporter-2 http://:9746/metrics", "exporter-3 http://:9746/metrics"}
	if !slices.Equal(f.asked, want) {
		t.Errorf("asked %v, want %v", f.asked, want)
	}
	// A pod that does not run leaves its node unobserved, and says so.
	pending, err := cs.CoreV1().Pods(ds.Namespace).Get(context.Background(), "exporter-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pending.Status.Phase = corev1.PodPending
	if _, err := cs.CoreV1().Pods(ds.Namespace).UpdateStatus(context.Background(), pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	execute(a, []string{"status", "-n", "kubelings", "--from-exporters"})
	if !strings.Contains(errOut.String(), "no report from the exporter on node-3: its exporter pod exporter-3 is not running (Pending)") {
		t.Errorf("the pending exporter pod is not reported: %q", errOut.String())
	}
	// Without the flag there is no column and no exporter read.
	out.Reset()
	f.asked = nil
	execute(a, []string{"status", "-n", "kubelings"})
	if strings.Contains(out.String(), "OBSERVED") || len(f.asked) > 0 {
		t.Errorf("OBSERVED or exporter reads %v without --from-exporters:\n%s", f.asked, out.String())
	}
}

// An install renamed and moved (a Helm nameOverride, another port and path, the port as a separate argument, a web
// config) is found from its DaemonSet all the same. The API's view is clean, but the exporters that answered report
// blackholes (node-2, node-3): what they observe fails the command.
func TestStatusFromExportersReadsTheInstall(t *testing.T) {
	ds := shippedDaemonSet(t)
	ds.Name = "edge-probe"
	ds.Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "edge-probe"}
	ds.Spec.Template.Labels = map[string]string{"app.kubernetes.io/name": "edge-probe"}
	ex := &ds.Spec.Template.Spec.Containers[0]
	ex.Args = []string{"--node-name=$(NODE_NAME)", "--web.listen-address", "127.0.0.1:19100", "--web.telemetry-path=/m",
		"--web.config.file=/etc/web/web.yaml"}
	other := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "node-exporter"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{}, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "node-exporter", Args: []string{"--path.rootfs=/host"}}}}}}}
	objs := append(drillObjects(false), ds, other)
	objs = append(objs, exporterPods(ds)...)
	cs := fake.NewClientset(objs...)
	allowPortForward(cs, true)
	f := &exporterFetch{}
	var out, errOut bytes.Buffer
	code := execute(exportersApp(cs, f, &out, &errOut), []string{"status", "-n", "kubelings", "--from-exporters"})
	if code != cli.ExitFindings {
		t.Errorf("exit %d, want %d (a clean API view, blackholes the exporters observe)\n%s%s", code, cli.ExitFindings, out.String(), errOut.String())
	}
	if len(f.asked) != 3 || f.asked[0][strings.Index(f.asked[0], " "):] != " https://:19100/m" {
		t.Errorf("asked %v, want https://:19100/m of each of the three pods", f.asked)
	}
}

// Refused: one line naming the permission (and how to check it), exit status 3; nothing asked of any pod.
func TestStatusFromExportersForbidden(t *testing.T) {
	ds := shippedDaemonSet(t)
	objs := append(drillObjects(true), ds)
	objs = append(objs, exporterPods(ds)...)
	cs := fake.NewClientset(objs...)
	allowPortForward(cs, false)
	f := &exporterFetch{}
	var out, errOut bytes.Buffer
	code := execute(exportersApp(cs, f, &out, &errOut), []string{"status", "-n", "kubelings", "--from-exporters"})
	if code != cli.ExitFindings {
		t.Errorf("exit %d, want %d: the blackholes the API shows are found anyway", code, cli.ExitFindings)
	}
	want := "you may not create pods/portforward in namespace localtraffic-system (kubectl auth can-i create pods/portforward -n localtraffic-system)"
	if !strings.Contains(errOut.String(), want) || strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("stderr %q, want one line saying %q", errOut.String(), want)
	}
	if len(f.asked) > 0 {
		t.Errorf("asked %v although refused", f.asked)
	}
	// No exporter DaemonSet where it is looked for: bad input, exit 2.
	errOut.Reset()
	code = execute(exportersApp(cs, f, &out, &errOut), []string{"status", "-n", "kubelings", "--from-exporters", "--exporter-namespace", "monitoring"})
	if code != cli.ExitError || !strings.Contains(errOut.String(), "no DaemonSet in namespace monitoring runs the exporter") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}
