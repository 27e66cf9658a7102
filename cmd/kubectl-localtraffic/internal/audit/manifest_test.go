package audit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gosarif "github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"k8s.io/cli-runtime/pkg/resource"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// manifestTree writes the drill's objects as a repository might hold them: the Service at the top, the pinned
// Deployment one directory down, and a file the builder must not read (not *.yaml, *.yml or *.json).
func manifestTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "apps"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "service.yaml"), service("NodePort", ""))
	writeFile(t, filepath.Join(dir, "apps", "deployment.yml"), deploymentYAML("3", noSurge, `nodeSelector: {kubernetes.io/hostname: node-1}`))
	writeFile(t, filepath.Join(dir, "README.txt"), "kind: [ not a manifest\n")
	return dir
}

func filenames(f ...string) resource.FilenameOptions { return resource.FilenameOptions{Filenames: f} }

// auditJSON runs audit -o json and returns the exit status, the finding IDs and the report.
func auditJSON(t *testing.T, stdin string, args ...string) (int, []placement.RuleID, placement.Report) {
	t.Helper()
	r := invoke(t, stdin, nil, false, nil, append([]string{"audit", "-o", "json", "--nodes", "3"}, args...)...)
	if r.ErrOut != "" {
		t.Fatalf("%v: exit %d, stderr %s", args, r.Code, r.ErrOut)
	}
	var rep placement.Report
	if err := json.Unmarshal([]byte(r.Out), &rep); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, r.Out)
	}
	return r.Code, findingIDs(t, r.Out), rep
}

// -f takes what kubectl's -f takes: a directory (recursively unless --recursive=false, as before -R existed),
// globs, comma-separated names; files that are not manifests in a directory are passed over.
func TestManifestPaths(t *testing.T) {
	dir := manifestTree(t)
	pinned := []placement.RuleID{placement.PinnedPlacement}
	cases := []struct {
		name string
		args []string
		want []placement.RuleID // finding IDs that must be there
		not  placement.RuleID   // a finding ID that must not
	}{
		{"directory", []string{"-f", dir}, pinned, placement.SelectorMatchesNone},
		{"directory with -R", []string{"-R", "-f", dir}, pinned, placement.SelectorMatchesNone},
		{"directory without recursion", []string{"--recursive=false", "-f", dir}, []placement.RuleID{placement.SelectorMatchesNone}, placement.PinnedPlacement},
		{"comma-separated", []string{"-f", filepath.Join(dir, "service.yaml") + "," + filepath.Join(dir, "apps", "deployment.yml")}, pinned, placement.SelectorMatchesNone},
		{"glob", []string{"-f", filepath.Join(dir, "*", "*.yml"), "-f", filepath.Join(dir, "*.yaml")}, pinned, placement.SelectorMatchesNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ids, _ := auditJSON(t, "", tc.args...)
			for _, id := range tc.want {
				if !slices.Contains(ids, id) {
					t.Errorf("findings %v lack %s", ids, id)
				}
			}
			if slices.Contains(ids, tc.not) {
				t.Errorf("findings %v have %s", ids, tc.not)
			}
		})
	}
}

// Standard input and a file in one run: each object keeps its own source and line.
func TestManifestStdinBesideAFile(t *testing.T) {
	dir := manifestTree(t)
	deployment, err := os.ReadFile(filepath.Join(dir, "apps", "deployment.yml"))
	if err != nil {
		t.Fatal(err)
	}
	code, ids, rep := auditJSON(t, "# piped\n---\n"+string(deployment), "-f", filepath.Join(dir, "service.yaml"), "-f", "-")
	if code != cli.ExitFindings || !slices.Contains(ids, placement.PinnedPlacement) {
		t.Fatalf("exit %d, findings %v: want LT101 from the file's Service and the piped Deployment", code, ids)
	}
	got := map[string]string{}
	for _, f := range rep.Findings() {
		for _, o := range f.Objects {
			got[o.Kind] = fmt.Sprintf("%s:%d", o.Source, o.Line)
		}
	}
	if want := filepath.Join(dir, "service.yaml") + ":1"; got["Service"] != want {
		t.Errorf("the Service is at %s, want %s", got["Service"], want)
	}
	if got["Deployment"] != "stdin:3" {
		t.Errorf("the Deployment is at %s, want stdin:3 (after the comment and the separator)", got["Deployment"])
	}
}

// A List, in YAML, inside a multi-document file: every item is read, at its own line; JSON indented with tabs
// (which go-yaml does not read, the builder's JSON decoder does) is read too.
func TestManifestLists(t *testing.T) {
	dir := t.TempDir()
	yamlList := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n---\n" +
		"apiVersion: v1\nkind: List\nitems:\n" +
		listItem(service("NodePort", "")) + listItem(deploymentYAML("3", noSurge, `nodeSelector: {kubernetes.io/hostname: node-1}`))
	file := filepath.Join(dir, "list.yaml")
	writeFile(t, file, yamlList)
	c := placement.Cluster{}
	if err := loadManifests(&c, filenames(file), nil, "default"); err != nil {
		t.Fatal(err)
	}
	if len(c.Services) != 1 || len(c.Deployments) != 1 {
		t.Fatalf("%d Services, %d Deployments, want one of each", len(c.Services), len(c.Deployments))
	}
	lines := strings.Split(yamlList, "\n")
	for key, src := range c.Sources {
		if src.File != file || src.Line < 1 || !strings.Contains(lines[src.Line-1], "apiVersion") {
			t.Errorf("%s at %s:%d, the file has there %q", key, src.File, src.Line, lines[max(src.Line-1, 0)])
		}
	}
	if c.Sources["Service/kubelings/checkout"].Line != 8 || c.Sources["Deployment/kubelings/checkout"].Line != 19 {
		t.Errorf("sources %v: want the Service at line 8 and the Deployment at 19", c.Sources)
	}

	tabbed := filepath.Join(dir, "tabbed.json")
	writeFile(t, tabbed, strings.ReplaceAll(read(t, "daemonset-list.json"), "    ", "\t"))
	c = placement.Cluster{}
	if err := loadManifests(&c, filenames(tabbed), nil, "default"); err != nil {
		t.Fatal(err)
	}
	if len(c.Services) != 1 || len(c.DaemonSets) != 1 || c.Sources["DaemonSet/kubelings/checkout"].File != tabbed {
		t.Errorf("tab-indented JSON: %d Services, %d DaemonSets, sources %v", len(c.Services), len(c.DaemonSets), c.Sources)
	}
}

// listItem indents a document as an item of a List's items.
func listItem(doc string) string {
	return "- " + strings.ReplaceAll(strings.TrimSpace(doc), "\n", "\n  ") + "\n"
}

// Bad documents, in one file or several: exit 2 and one line on stderr that names every one of them.
func TestManifestErrorsInOneLine(t *testing.T) {
	dir := t.TempDir()
	good := service("NodePort", "")
	second := filepath.Join(dir, "second.yaml")
	writeFile(t, second, good+"---\napiVersion: v1\nkind: Service\nmetadata:\n  name: broken\n   namespace: oops\n")
	wrongType := filepath.Join(dir, "wrong.yaml")
	writeFile(t, wrongType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: many}\n")
	// kubectl refuses a List in a List of objects it does not know the types of, and so does the builder here.
	nested := filepath.Join(dir, "nested.yaml")
	writeFile(t, nested, "apiVersion: v1\nkind: List\nitems:\n"+listItem("apiVersion: v1\nkind: List\nitems:\n"+listItem(service("NodePort", ""))))
	noKind := filepath.Join(dir, "nokind.yaml")
	writeFile(t, noKind, "apiVersion: v1\nmetadata: {name: x}\n")
	cases := []struct {
		name  string
		files []string
		want  []string
	}{
		{"second document", []string{second}, []string{"error parsing " + second + ": error converting YAML to JSON"}},
		{"wrong field type", []string{wrongType}, []string{wrongType + ":5: Deployment x: "}},
		{"no kind", []string{noKind}, []string{noKind, "'Kind' is missing"}},
		{"a List in a List", []string{nested}, []string{"is not a list"}},
		{"all of them", []string{second, wrongType, noKind}, []string{"error parsing " + second, wrongType + ":5: Deployment x", noKind}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"audit", "--nodes", "3"}
			for _, f := range tc.files {
				args = append(args, "-f", f)
			}
			r := invoke(t, "", nil, false, nil, args...)
			if r.Code != cli.ExitError || r.Out != "" || strings.Count(r.ErrOut, "\n") != 1 || !strings.HasPrefix(r.ErrOut, "kubectl-localtraffic: ") {
				t.Errorf("exit %d, stdout %q, stderr %q: want exit 2 and one line on stderr", r.Code, r.Out, r.ErrOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.ErrOut, w) {
					t.Errorf("stderr %q lacks %q", r.ErrOut, w)
				}
			}
		})
	}
}

// -f takes a URL, as kubectl's does: its objects are read, and their findings point at the URL, without a line
// (the builder fetched the text; it is not fetched twice to number it).
func TestManifestURL(t *testing.T) {
	srv := httptest.NewServer(http.FileServer(http.Dir("testdata")))
	t.Cleanup(srv.Close)
	url := srv.URL + "/drill/pinned.yaml"
	r := invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", url, "--nodes", "3")
	if r.Code != cli.ExitFindings || r.ErrOut != "" {
		t.Fatalf("exit %d, stderr %s", r.Code, r.ErrOut)
	}
	rep, err := gosarif.FromString(r.Out)
	if err != nil {
		t.Fatal(err)
	}
	located := 0
	for _, res := range rep.Runs[0].Results {
		for _, loc := range res.Locations {
			if pl := loc.PhysicalLocation; pl == nil || *pl.ArtifactLocation.URI != url || pl.Region != nil {
				t.Errorf("%s: location %+v, want %s without a region", *res.RuleID, pl, url)
			}
			located++
		}
	}
	if located == 0 {
		t.Error("no located results")
	}
}
