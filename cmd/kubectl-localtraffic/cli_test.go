package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/prometheus/common/version"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

type result struct {
	code        int
	out, errOut string
}

// invoke runs the plugin as a user would, with stdin, an environment and (for live mode) a fake apiserver.
func invoke(t *testing.T, stdin string, env map[string]string, terminal bool, objs []runtime.Object, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	cs := fake.NewClientset(objs...)
	a := &app{in: strings.NewReader(stdin), out: &out, errOut: &errOut, terminal: terminal,
		getenv: func(k string) string { return env[k] },
		client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	code := a.run(context.Background(), args)
	return result{code, out.String(), errOut.String()}
}

func testdata(name string) string { return filepath.Join("testdata", name) }

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(testdata(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAuditManifestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"pinned drill", []string{"audit", "-f", testdata("drill/pinned.yaml"), "--nodes", "3"}, 1, "CRITICAL LT101 pinned-placement"},
		{"drill fix", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes", "3"}, 0, "0 critical, 0 warning, 1 info"},
		{"drill fix fails on info", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes", "3", "--fail-on", "info"}, 1, "INFO LT110"},
		{"pinned with fail-on critical", []string{"audit", "-f", testdata("drill/pinned.yaml"), "--nodes", "3", "--fail-on", "critical"}, 1, "LT101"},
		{"daemonset in a List", []string{"audit", "-f", testdata("daemonset-list.json"), "--nodes", "5"}, 0, "0 critical, 0 warning, 0 info"},
		{"nodes file", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes-file", testdata("nodes.yaml")}, 0, "3 nodes receive NodePort 30090/TCP"},
		{"directory, recursive", []string{"audit", "-f", testdata("drill"), "--nodes", "3"}, 1, "LT101"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := invoke(t, "", nil, false, nil, tc.args...)
			if r.code != tc.code || !strings.Contains(r.out, tc.want) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nstderr: %s", r.code, tc.code, r.out, r.errOut)
			}
			if r.errOut != "" {
				t.Errorf("stderr on success: %q", r.errOut)
			}
		})
	}
}

// kustomize build | kubectl-localtraffic audit -f - --nodes 5, the README's CI step.
func TestAuditStdin(t *testing.T) {
	r := invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-f", "-", "--nodes", "5", "-o", "json")
	if r.code != 1 {
		t.Fatalf("exit %d, stderr %s", r.code, r.errOut)
	}
	var rep AuditReport
	dec := json.NewDecoder(strings.NewReader(r.out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || rep.APIVersion != "localtraffic.io/v1alpha1" || rep.Kind != "AuditReport" {
		t.Fatalf("JSON output does not decode into the report type (%v), or its apiVersion and kind are not the document's: %+v\n%s", err, rep.TypeMeta, r.out)
	}
	f := rep.Findings()[0]
	if f.ID != placement.PinnedPlacement || f.Severity != placement.Critical || strings.Join(f.Nodes, ",") != "node-2,node-3,node-4,node-5" ||
		f.Service.Source != "stdin" {
		t.Errorf("first finding %+v", f)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.out), &raw); err != nil {
		t.Fatal(err)
	}
	sev := raw["services"].([]any)[0].(map[string]any)["findings"].([]any)[0].(map[string]any)["severity"]
	if sev != "critical" {
		t.Errorf("severity in JSON is %v, want the word", sev)
	}
}

// Bad input: one line on stderr, exit 2, nothing on stdout.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "secret.yaml")
	if err := os.WriteFile(unreadable, []byte("kind: Service\n"), 0o000); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"unknown flag", "", []string{"audit", "--bogus"}, "unknown flag: --bogus"},
		{"unknown command", "", []string{"frobnicate"}, "unknown command"},
		{"missing file", "", []string{"audit", "-f", filepath.Join(dir, "nope.yaml"), "--nodes", "3"}, "nope.yaml\" does not exist"},
		{"invalid YAML", "", []string{"audit", "-f", testdata("invalid.yaml"), "--nodes", "3"}, "error parsing " + testdata("invalid.yaml") + ": error converting YAML to JSON: yaml: line 5"},
		{"invalid YAML on stdin", "kind: [", []string{"audit", "-f", "-", "--nodes", "3"}, "error parsing stdin: error converting YAML to JSON"},
		{"wrong field type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: many}\n", []string{"audit", "-f", "-", "--nodes", "3"}, "stdin:1: Deployment x: "},
		{"unknown output", "", []string{"audit", "-o", "xml", "-f", testdata("drill/fixed.yaml"), "--nodes", "3"}, `unknown output format "xml"`},
		{"sarif for status", "", []string{"status", "-o", "sarif"}, `unknown output format "sarif" for status`},
		{"unknown fail-on", "", []string{"audit", "--fail-on", "panic", "-f", testdata("drill/fixed.yaml"), "--nodes", "3"}, "unknown --fail-on"},
		{"no nodes in manifest mode", "", []string{"audit", "-f", testdata("drill/fixed.yaml")}, "--nodes N or --nodes-file"},
		{"nodes without manifests", "", []string{"audit", "--nodes", "3"}, "give -f too"},
		{"bad nodes value", "", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes", "three"}, "invalid argument"},
		{"nodes file without nodes", "", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes-file", testdata("drill/fixed.yaml")}, "no Node objects"},
		{"too many args", "", []string{"status", "a", "b"}, "accepts at most 1 arg"},
	}
	if os.Geteuid() != 0 { // root reads a 0000 file
		cases = append(cases, struct {
			name, stdin string
			args        []string
			want        string
		}{"unreadable file", "", []string{"audit", "-f", unreadable, "--nodes", "3"}, "permission denied"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := invoke(t, tc.stdin, nil, false, nil, tc.args...)
			if r.code != cli.ExitError {
				t.Errorf("exit %d, want 2", r.code)
			}
			if strings.Count(r.errOut, "\n") != 1 || !strings.Contains(r.errOut, tc.want) || !strings.HasPrefix(r.errOut, "kubectl-localtraffic: ") {
				t.Errorf("stderr %q, want one line containing %q", r.errOut, tc.want)
			}
			if r.out != "" {
				t.Errorf("stdout %q", r.out)
			}
		})
	}
}

// The drill in a fake apiserver: the objects the controllers would have written.
func drillObjects(pinned bool) []runtime.Object {
	var objs []runtime.Object
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node-%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}})
	}
	objs = append(objs, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", Selector: map[string]string{"app": "checkout"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}},
	})
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "checkout"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "checkout", Image: "agnhost"}}}}
	on := []string{"node-1", "node-1", "node-1"}
	if pinned {
		tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-1"}
	} else {
		on = []string{"node-1", "node-2", "node-3"}
		tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}}}
	}
	zero, one := ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(1))
	objs = append(objs, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout", UID: "d-uid"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Template: tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: zero, MaxUnavailable: one}}},
	}, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout-7c9f", UID: "rs-uid",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "checkout", UID: "d-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](3), Template: tmpl},
	})
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "checkout"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, n := range on {
		name := fmt.Sprintf("checkout-7c9f-%d", i)
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: name, UID: types.UID(name),
			Labels:          map[string]string{"app": "checkout"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7c9f", UID: "rs-uid", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: n}})
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.10", i)},
			NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "kubelings", Name: name}})
	}
	return append(objs, slice)
}

func TestStatusLive(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "kubelings")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (blackholes); stderr %s", r.code, r.errOut)
	}
	// One row per Service: 3 nodes receive, node-1 serves, node-2 and node-3 drop.
	if want := "NAMESPACE   NAME       TYPE       STATUS    RECEIVING   SERVING   DROPPING   DROPPING-NODES\n" +
		"kubelings   checkout   NodePort   Failing   3           1         2          node-2,node-3\n"; r.out != want {
		t.Errorf("status output\n%s\nwant\n%s", r.out, want)
	}
	// -o wide: what they drop, and the grid.
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "kubelings", "-o", "wide", "--no-headers"); !regexp.MustCompile(
		`^kubelings\s+checkout\s+NodePort\s+Failing\s+3\s+1\s+2\s+node-2,node-3\s+NodePort 30090/TCP\s+ok 3\s+DROP\s+DROP\n$`).MatchString(r.out) {
		t.Errorf("-o wide --no-headers:\n%s", r.out)
	}
	if strings.Contains(r.out, "\x1b[") {
		t.Error("colour codes without a terminal")
	}
	// A terminal gets colour, unless NO_COLOR is set or --color says never; --color always colours a pipe.
	if r := invoke(t, "", nil, true, drillObjects(true), "status", "-A"); !strings.Contains(r.out, cli.Red+cli.Bold+"Failing"+cli.Reset) {
		t.Errorf("no colour on a terminal:\n%s", r.out)
	}
	if r := invoke(t, "", map[string]string{"NO_COLOR": "1"}, true, drillObjects(true), "status", "-A"); strings.Contains(r.out, "\x1b[") {
		t.Error("colour despite NO_COLOR")
	}
	if r := invoke(t, "", nil, true, drillObjects(true), "status", "-A", "--color", "never"); strings.Contains(r.out, "\x1b[") {
		t.Error("colour despite --color never")
	}
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-A", "-o", "wide", "--color", "always"); !strings.Contains(r.out, cli.Green+"ok 3"+cli.Reset+"     "+cli.Red+"DROP"+cli.Reset) {
		t.Errorf("--color always, -o wide: no coloured cells:\n%q", r.out)
	}
	// After the fix: clean, exit 0; the SERVICE argument selects one.
	r = invoke(t, "", nil, false, drillObjects(false), "status", "-n", "kubelings", "checkout", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d after the fix; %s", r.code, r.out)
	}
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 || st.Items[0].Serving != 3 {
		t.Errorf("json %v: %+v", err, st)
	}
	if r := invoke(t, "", nil, false, drillObjects(false), "status", "-n", "kubelings", "nope"); r.code != 2 {
		t.Errorf("unknown service: exit %d", r.code)
	}
	// Another namespace holds no Local Service.
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "other"); r.code != 0 || r.out != "" || !strings.Contains(r.errOut, "No Service") {
		t.Errorf("empty namespace: exit %d %q %q", r.code, r.out, r.errOut)
	}
}

func TestAuditLive(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-A")
	if r.code != 1 || !strings.Contains(r.out, "CRITICAL LT100 blackhole-now") || !strings.Contains(r.out, "CRITICAL LT101 pinned-placement") ||
		!strings.Contains(r.out, "now: 1 of 3 nodes serve; node-2, node-3 drop NodePort 30090/TCP") {
		t.Errorf("exit %d:\n%s%s", r.code, r.out, r.errOut)
	}
	r = invoke(t, "", nil, false, drillObjects(false), "audit", "-A")
	if r.code != 0 || strings.Contains(r.out, "CRITICAL") || strings.Contains(r.out, "WARNING") {
		t.Errorf("after the fix exit %d:\n%s", r.code, r.out)
	}
}

// setVersion sets what the release pipeline's -ldflags set, for the duration of the test.
func setVersion(t *testing.T, v string) {
	t.Helper()
	keep := version.Version
	version.Version = v
	t.Cleanup(func() { version.Version = keep })
}

// --version reports the version, the commit and the build date, as the exporter's does; exit 0, stdout only.
func TestVersion(t *testing.T) {
	setVersion(t, "1.2.3")
	keep := [2]string{version.Revision, version.BuildDate}
	version.Revision, version.BuildDate = "0123456789abcdef", "2026-12-01T10:00:00Z"
	t.Cleanup(func() { version.Revision, version.BuildDate = keep[0], keep[1] })
	r := invoke(t, "", nil, false, nil, "--version")
	for _, want := range []string{"kubectl-localtraffic, version 1.2.3 ", "revision: 0123456789abcdef", "build date:       2026-12-01T10:00:00Z", "go version:"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("--version output lacks %q:\n%s", want, r.out)
		}
	}
	if r.code != 0 || r.errOut != "" {
		t.Errorf("exit %d, stderr %q", r.code, r.errOut)
	}
}

// --node-port-addresses stands for kube-proxy's nodePortAddresses: where no Node address is inside, a NodePort
// the node would drop is "drop?" (only the node's interfaces tell whether kube-proxy serves it there), and no
// blackhole fails the run; a value kube-proxy would not take is bad input.
func TestStatusNodePortAddresses(t *testing.T) {
	objs := drillObjects(true)
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0." + strings.TrimPrefix(n.Name, "node-")}}
		}
	}
	cs := fake.NewClientset(objs...)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		a := &app{in: strings.NewReader(""), out: &out, errOut: &errOut, getenv: func(string) string { return "" },
			client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
		return a.run(context.Background(), append([]string{"status", "-n", "kubelings"}, args...)), out.String(), errOut.String()
	}
	if code, out, _ := run("--node-port-addresses", "10.0.0.1/32,10.0.0.2/32", "-o", "wide"); code != cli.ExitFindings ||
		!regexp.MustCompile(`Failing\s+3\s+1\s+1\s+1\s+node-2\s.*DROP\s+drop\?`).MatchString(out) {
		t.Errorf("node-2 inside, node-3 outside: exit %d, want 1 with node-2 DROP and node-3 drop?\n%s", code, out)
	}
	if code, out, _ := run("--node-port-addresses", "192.168.0.0/16", "-o", "wide"); code != cli.ExitClean ||
		!regexp.MustCompile(`checkout\s+NodePort\s+CannotTell\s+3\s+1\s+0\s+2\s+<none>\s+<none>\s+ok 3\s+drop\?\s+drop\?`).MatchString(out) {
		t.Errorf("every node outside: exit %d, want 0 and no DROP\n%s", code, out)
	}
	if code, _, _ := run("--node-port-addresses", "primary"); code != cli.ExitFindings {
		t.Errorf("primary: exit %d, want 1 (every node serves NodePorts)", code)
	}
	if code, _, errOut := run("--node-port-addresses", "eth0"); code != cli.ExitError || !strings.Contains(errOut, "--node-port-addresses") {
		t.Errorf("bad value: exit %d, stderr %q", code, errOut)
	}
}

// status reads what its verdict decides from and nothing else: Nodes, Services, EndpointSlices.
func TestStatusReadsOnlyWhatItDecidesFrom(t *testing.T) {
	cs := fake.NewClientset(drillObjects(true)...)
	var out, errOut bytes.Buffer
	a := &app{in: strings.NewReader(""), out: &out, errOut: &errOut, getenv: func(string) string { return "" },
		client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	if code := a.run(context.Background(), []string{"status", "-A"}); code != cli.ExitFindings {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var read []string
	for _, act := range cs.Actions() {
		read = append(read, act.GetVerb()+" "+act.GetResource().Resource)
	}
	sort.Strings(read)
	if want := []string{"list endpointslices", "list nodes", "list services"}; !slices.Equal(read, want) {
		t.Errorf("status made %v, want %v", read, want)
	}
}

// Every command's help shows examples and its column of the exit status table (docs/audit.md's, which
// TestExitStatusTableIsTheDocs holds to the code).
func TestEveryCommandHelp(t *testing.T) {
	for _, cmd := range []string{"status", "audit", "drain-check"} {
		r := invoke(t, "", nil, false, nil, cmd, "--help")
		if r.code != cli.ExitClean || !strings.Contains(r.out, "Examples:\n  kubectl localtraffic "+cmd) {
			t.Errorf("%s --help: exit %d, no examples:\n%s", cmd, r.code, r.out)
		}
		if !strings.Contains(r.out, strings.TrimSpace(cli.ExitHelp(cmd))) {
			t.Errorf("%s --help: no exit status table:\n%s", cmd, r.out)
		}
	}
}
