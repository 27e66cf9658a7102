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
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func TestStatusLive(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "kubelings")
	if r.Code != 1 {
		t.Fatalf("exit %d, want 1 (blackholes); stderr %s", r.Code, r.ErrOut)
	}
	// One row per Service: 3 nodes receive, node-1 serves, node-2 and node-3 drop.
	if want := "NAMESPACE   NAME       TYPE       STATUS    RECEIVING   SERVING   DROPPING   DROPPING-NODES\n" +
		"kubelings   checkout   NodePort   Failing   3           1         2          node-2,node-3\n"; r.Out != want {
		t.Errorf("status output\n%s\nwant\n%s", r.Out, want)
	}
	// -o wide: what they drop, and the grid.
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "kubelings", "-o", "wide", "--no-headers"); !regexp.MustCompile(
		`^kubelings\s+checkout\s+NodePort\s+Failing\s+3\s+1\s+2\s+node-2,node-3\s+NodePort 30090/TCP\s+ok 3\s+DROP\s+DROP\n$`).MatchString(r.Out) {
		t.Errorf("-o wide --no-headers:\n%s", r.Out)
	}
	if strings.Contains(r.Out, "\x1b[") {
		t.Error("colour codes without a terminal")
	}
	// A terminal gets colour, unless NO_COLOR is set or --color says never; --color always colours a pipe.
	if r := invoke(t, "", nil, true, drillObjects(true), "status", "-A"); !strings.Contains(r.Out, cli.Red+cli.Bold+"Failing"+cli.Reset) {
		t.Errorf("no colour on a terminal:\n%s", r.Out)
	}
	if r := invoke(t, "", map[string]string{"NO_COLOR": "1"}, true, drillObjects(true), "status", "-A"); strings.Contains(r.Out, "\x1b[") {
		t.Error("colour despite NO_COLOR")
	}
	if r := invoke(t, "", nil, true, drillObjects(true), "status", "-A", "--color", "never"); strings.Contains(r.Out, "\x1b[") {
		t.Error("colour despite --color never")
	}
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-A", "-o", "wide", "--color", "always"); !strings.Contains(r.Out, cli.Green+"ok 3"+cli.Reset+"     "+cli.Red+"DROP"+cli.Reset) {
		t.Errorf("--color always, -o wide: no coloured cells:\n%q", r.Out)
	}
	// After the fix: clean, exit 0; the SERVICE argument selects one.
	r = invoke(t, "", nil, false, drillObjects(false), "status", "-n", "kubelings", "checkout", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("exit %d after the fix; %s", r.Code, r.Out)
	}
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 || st.Items[0].Serving != 3 {
		t.Errorf("json %v: %+v", err, st)
	}
	if r := invoke(t, "", nil, false, drillObjects(false), "status", "-n", "kubelings", "nope"); r.Code != 2 {
		t.Errorf("unknown service: exit %d", r.Code)
	}
	// Another namespace holds no Local Service.
	if r := invoke(t, "", nil, false, drillObjects(true), "status", "-n", "other"); r.Code != 0 || r.Out != "" || !strings.Contains(r.ErrOut, "No Service") {
		t.Errorf("empty namespace: exit %d %q %q", r.Code, r.Out, r.ErrOut)
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
		a := &cli.Env{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" },
			Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
		return execute(a, append([]string{"status", "-n", "kubelings"}, args...)), out.String(), errOut.String()
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
	a := &cli.Env{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" },
		Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
	if code := execute(a, []string{"status", "-A"}); code != cli.ExitFindings {
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

// Bad input: one line on stderr, exit 2, nothing on stdout.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"sarif for status", []string{"status", "-o", "sarif"}, `unknown output format "sarif" for status`},
		{"too many args", []string{"status", "a", "b"}, "accepts at most 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clitest.CheckBadInput(t, invoke(t, "", nil, false, nil, tc.args...), tc.want)
		})
	}
}
