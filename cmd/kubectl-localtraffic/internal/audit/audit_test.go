package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

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
			if r.Code != tc.code || !strings.Contains(r.Out, tc.want) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nstderr: %s", r.Code, tc.code, r.Out, r.ErrOut)
			}
			if r.ErrOut != "" {
				t.Errorf("stderr on success: %q", r.ErrOut)
			}
		})
	}
}

// kustomize build | kubectl-localtraffic audit -f - --nodes 5, the README's CI step.
func TestAuditStdin(t *testing.T) {
	r := invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-f", "-", "--nodes", "5", "-o", "json")
	if r.Code != 1 {
		t.Fatalf("exit %d, stderr %s", r.Code, r.ErrOut)
	}
	var rep AuditReport
	dec := json.NewDecoder(strings.NewReader(r.Out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || rep.APIVersion != "localtraffic.io/v1alpha1" || rep.Kind != "AuditReport" {
		t.Fatalf("JSON output does not decode into the report type (%v), or its apiVersion and kind are not the document's: %+v\n%s", err, rep.TypeMeta, r.Out)
	}
	f := rep.Findings()[0]
	if f.ID != placement.PinnedPlacement || f.Severity != placement.Critical || strings.Join(f.Nodes, ",") != "node-2,node-3,node-4,node-5" ||
		f.Service.Source != "stdin" {
		t.Errorf("first finding %+v", f)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.Out), &raw); err != nil {
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
		{"missing file", "", []string{"audit", "-f", filepath.Join(dir, "nope.yaml"), "--nodes", "3"}, "nope.yaml\" does not exist"},
		{"invalid YAML", "", []string{"audit", "-f", testdata("invalid.yaml"), "--nodes", "3"}, "error parsing " + testdata("invalid.yaml") + ": error converting YAML to JSON: yaml: line 5"},
		{"invalid YAML on stdin", "kind: [", []string{"audit", "-f", "-", "--nodes", "3"}, "error parsing stdin: error converting YAML to JSON"},
		{"wrong field type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: many}\n", []string{"audit", "-f", "-", "--nodes", "3"}, "stdin:1: Deployment x: "},
		{"unknown output", "", []string{"audit", "-o", "xml", "-f", testdata("drill/fixed.yaml"), "--nodes", "3"}, `unknown output format "xml"`},
		{"unknown fail-on", "", []string{"audit", "--fail-on", "panic", "-f", testdata("drill/fixed.yaml"), "--nodes", "3"}, "unknown --fail-on"},
		{"no nodes in manifest mode", "", []string{"audit", "-f", testdata("drill/fixed.yaml")}, "--nodes N or --nodes-file"},
		{"nodes without manifests", "", []string{"audit", "--nodes", "3"}, "give -f too"},
		{"bad nodes value", "", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes", "three"}, "invalid argument"},
		{"nodes file without nodes", "", []string{"audit", "-f", testdata("drill/fixed.yaml"), "--nodes-file", testdata("drill/fixed.yaml")}, "no Node objects"},
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
			clitest.CheckBadInput(t, invoke(t, tc.stdin, nil, false, nil, tc.args...), tc.want)
		})
	}
}

func TestAuditLive(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-A")
	if r.Code != 1 || !strings.Contains(r.Out, "CRITICAL LT100 blackhole-now") || !strings.Contains(r.Out, "CRITICAL LT101 pinned-placement") ||
		!strings.Contains(r.Out, "now: 1 of 3 nodes serve; node-2, node-3 drop NodePort 30090/TCP") {
		t.Errorf("exit %d:\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	r = invoke(t, "", nil, false, drillObjects(false), "audit", "-A")
	if r.Code != 0 || strings.Contains(r.Out, "CRITICAL") || strings.Contains(r.Out, "WARNING") {
		t.Errorf("after the fix exit %d:\n%s", r.Code, r.Out)
	}
}
