package status

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// labelled gives the drill's nodes zones (node-1 in a, the others in b) and its Service a label.
func labelled() []runtime.Object {
	objs := drillObjects(true)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			o.Labels["zone"] = "b"
			if o.Name == "node-1" {
				o.Labels["zone"] = "a"
			}
		case *corev1.Service:
			o.Labels = map[string]string{"team": "shop"}
		}
	}
	return objs
}

// --node and --node-selector judge only those nodes: the counts are theirs, the document carries each one's
// verdict, and a node that serves alone exits 0; -l selects Services; a node named but not there is bad input.
func TestStatusNodeAndServiceFilters(t *testing.T) {
	doc := func(r result) ServiceStatusList {
		t.Helper()
		var l ServiceStatusList
		if err := json.Unmarshal([]byte(r.Out), &l); err != nil {
			t.Fatalf("%v: %s%s", err, r.Out, r.ErrOut)
		}
		return l
	}
	r := invoke(t, "", nil, false, labelled(), "status", "-A", "--node", "node-2", "-o", "json")
	if l := doc(r); r.Code != cli.ExitFindings || len(l.Items) != 1 || l.Items[0].Nodes != 1 || l.Items[0].Dropping != 1 ||
		len(l.Items[0].NodeStatuses) != 1 || l.Items[0].NodeStatuses[0].Node != "node-2" || !l.Items[0].NodeStatuses[0].Blackhole {
		t.Errorf("--node node-2: exit %d %+v", r.Code, l)
	}
	r = invoke(t, "", nil, false, labelled(), "status", "-A", "--node-selector", "zone=a", "-o", "json")
	if l := doc(r); r.Code != cli.ExitClean || l.Items[0].Nodes != 1 || l.Items[0].Serving != 1 || l.Items[0].Dropping != 0 {
		t.Errorf("--node-selector zone=a (node-1 serves): exit %d %+v", r.Code, l)
	}
	// Without a node filter the document is bounded: counts and dropping node names, no per-node verdicts.
	if l := doc(invoke(t, "", nil, false, labelled(), "status", "-A", "-o", "json")); l.Items[0].NodeStatuses != nil ||
		!slices.Equal(l.Items[0].DroppingNodes, []string{"node-2", "node-3"}) {
		t.Errorf("no node filter: %+v", l.Items[0])
	}
	r = invoke(t, "", nil, false, labelled(), "status", "-A", "-l", "team=other")
	if r.Code != cli.ExitClean || r.Out != "" || !strings.Contains(r.ErrOut, "No Service") {
		t.Errorf("-l team=other: exit %d %q %q", r.Code, r.Out, r.ErrOut)
	}
	// A document stays a document: an empty list, nothing on stderr.
	r = invoke(t, "", nil, false, labelled(), "status", "-A", "-l", "team=other", "-o", "json")
	if l := doc(r); r.Code != cli.ExitClean || l.Items == nil || len(l.Items) != 0 || r.ErrOut != "" {
		t.Errorf("-l team=other -o json: exit %d %q %q", r.Code, r.Out, r.ErrOut)
	}
	if r := invoke(t, "", nil, false, labelled(), "status", "-A", "-l", "team=shop"); r.Code != cli.ExitFindings {
		t.Errorf("-l team=shop: exit %d", r.Code)
	}
	r = invoke(t, "", nil, false, labelled(), "status", "-A", "--node", "node-9")
	if r.Code != cli.ExitError || !strings.Contains(r.ErrOut, "--node node-9: no such node") {
		t.Errorf("--node node-9: exit %d %q", r.Code, r.ErrOut)
	}
}

// The selectors go to the apiserver: nodes by --node-selector (by name for a single --node), Services by -l,
// and a SERVICE argument reads that Service and its EndpointSlices alone.
func TestStatusSelectsOnTheServer(t *testing.T) {
	cs := fake.NewClientset(labelled()...)
	a := &cli.Env{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}, Getenv: func(string) string { return "" },
		Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	execute(a, []string{"status", "-n", "kubelings", "checkout", "--node-selector", "zone=a", "-l", "team=shop"})
	reads := func() []string {
		var got []string
		for _, act := range cs.Actions() {
			l := act.(k8stesting.ListAction).GetListRestrictions()
			got = append(got, act.GetResource().Resource+" labels="+l.Labels.String()+" fields="+l.Fields.String())
		}
		sort.Strings(got)
		return got
	}
	want := []string{"endpointslices labels=kubernetes.io/service-name=checkout fields=",
		"nodes labels=zone=a fields=", "services labels=team=shop fields=metadata.name=checkout"}
	if !slices.Equal(reads(), want) {
		t.Errorf("reads\n%q\nwant\n%q", reads(), want)
	}
	cs.ClearActions()
	execute(a, []string{"status", "-A", "--node", "node-2"})
	want = []string{"endpointslices labels= fields=", "nodes labels= fields=metadata.name=node-2", "services labels= fields="}
	if !slices.Equal(reads(), want) {
		t.Errorf("--node node-2: reads\n%q\nwant\n%q", reads(), want)
	}
}

// -o takes cli-runtime's formats: the document has apiVersion and kind, yaml and json are the same document,
// name, jsonpath and go-template work on it; a format none takes is bad input before anything is read.
func TestStatusPrinters(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "status", "-A", "-o", "yaml")
	var l ServiceStatusList
	if err := yaml.UnmarshalStrict([]byte(r.Out), &l); err != nil || l.APIVersion != "localtraffic.io/v1alpha1" || l.Kind != "ServiceStatusList" ||
		len(l.Items) != 1 || l.Items[0].Kind != "ServiceStatus" || l.Items[0].Status != "Failing" || l.Items[0].Metadata.Name != "checkout" {
		t.Errorf("yaml %v:\n%s", err, r.Out)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"-o", "name"}},
		{[]string{"-o", "jsonpath={range .items[*]}{.metadata.name} {.dropping} {.droppingNodes}{\"\\n\"}{end}"}},
		{[]string{"-o", "go-template={{range .items}}{{.metadata.name}} {{.status}}\n{{end}}"}},
	} {
		r := invoke(t, "", nil, false, drillObjects(true), append([]string{"status", "-A"}, c.args...)...)
		want := map[string]string{"name": "servicestatus.localtraffic.io/checkout\n"}[c.args[1]]
		if strings.HasPrefix(c.args[1], "jsonpath") {
			want = "checkout 2 [\"node-2\",\"node-3\"]\n"
		}
		if strings.HasPrefix(c.args[1], "go-template") {
			want = "checkout Failing\n"
		}
		if r.Code != cli.ExitFindings || r.Out != want {
			t.Errorf("%v: exit %d %q, want %q (%s)", c.args, r.Code, r.Out, want, r.ErrOut)
		}
	}
	r = invoke(t, "", nil, false, drillObjects(true), "status", "-A", "-o", "xml")
	if r.Code != cli.ExitError || !strings.Contains(r.ErrOut, `unknown output format "xml" for status: text, wide, json, yaml`) {
		t.Errorf("-o xml: exit %d %q", r.Code, r.ErrOut)
	}
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-A", "--color", "sometimes"); r.Code != cli.ExitError || !strings.Contains(r.ErrOut, "auto, always or never") {
		t.Errorf("--color sometimes: exit %d %q", r.Code, r.ErrOut)
	}
}

// A terminal's stderr shows what is read, page by page, and the line is erased before the output; a pipe gets
// nothing.
func TestStatusProgress(t *testing.T) {
	run := func(errTerminal bool) string {
		cs := fake.NewClientset(drillObjects(true)...)
		var out, errOut bytes.Buffer
		a := &cli.Env{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" }, ErrTerminal: errTerminal,
			Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
		execute(a, []string{"status", "-A"})
		return errOut.String()
	}
	got := run(true)
	for _, want := range []string{"nodes 3 (1 pages)", "services 1 (1 pages)", "endpointslices 1 (1 pages)"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q: %q", want, got)
		}
	}
	if !strings.HasSuffix(got, "\r\x1b[K") || !strings.HasPrefix(got, "\r\x1b[Kreading ") {
		t.Errorf("progress line not erased at the end: %q", got)
	}
	if got := run(false); got != "" {
		t.Errorf("progress on a pipe: %q", got)
	}
}

// --request-timeout has a default, so a hung apiserver fails the command rather than hanging it.
func TestRequestTimeoutDefault(t *testing.T) {
	r := invoke(t, "", nil, false, nil, "status", "--help")
	if !regexp.MustCompile(`--request-timeout string\s.*\(default "30s"\)`).MatchString(r.Out) {
		t.Errorf("--request-timeout has no 30s default:\n%s", r.Out)
	}
}

// Completion through cobra's __complete (what the shell scripts and kubectl_complete-localtraffic call):
// SERVICE completes the namespace's Local Services, --node the nodes (drain-check's NODE: TestCompletion of
// draincheck).
func TestCompletion(t *testing.T) {
	objs := append(drillObjects(true), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "cluster-only"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "status", "-n", "kubelings", ""}, "checkout\n:4\n"},
		{[]string{"__complete", "status", "-n", "kubelings", "x"}, ":4\n"},
		{[]string{"__complete", "status", "--node", "node-2"}, "node-2\n:4\n"},
	} {
		r := invoke(t, "", nil, false, objs, c.args...)
		if r.Out != c.want {
			t.Errorf("%v: %q, want %q", c.args, r.Out, c.want)
		}
	}
}
