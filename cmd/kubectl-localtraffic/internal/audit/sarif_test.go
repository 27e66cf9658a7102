package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	gosarif "github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"github.com/xeipuuv/gojsonschema"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// sarifSchema210 is the official SARIF 2.1.0 JSON schema (OASIS, errata01: $id
// https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json), vendored in
// testdata so the check needs no network and cannot change under us.
func sarifSchema210(t *testing.T) gojsonschema.JSONLoader {
	t.Helper()
	b, err := os.ReadFile(testdata("sarif-schema-2.1.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.ID != sarifSchema ||
		head.Title != "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema" {
		t.Fatalf("testdata/sarif-schema-2.1.0.json is not the SARIF 2.1.0 schema: id %q title %q (%v)", head.ID, head.Title, err)
	}
	return gojsonschema.NewBytesLoader(b)
}

// The SARIF output, byte for byte, validates against the 2.1.0 schema, for findings from files and from stdin,
// for a live cluster, and for a clean run.
func TestSARIFValidatesAgainstTheSchema(t *testing.T) {
	schema := sarifSchema210(t)
	// The check can fail: a log with a result lacking its message is rejected.
	bad := `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[{"ruleId":"LT101"}]}]}`
	if res, err := gojsonschema.Validate(schema, gojsonschema.NewStringLoader(bad)); err != nil || res.Valid() {
		t.Fatalf("the schema accepts a result without a message (err %v)", err)
	}
	runs := map[string]result{
		"manifests": invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("drill/pinned.yaml"), "--nodes", "3"),
		"stdin": invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-o", "sarif", "-f", "-", "--nodes", "3",
			"--stdin-filename", "deploy/overlays/prod/kustomization.yaml"),
		"list":  invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("daemonset-list.json"), "--nodes", "3", "--fail-on", "info"),
		"live":  invoke(t, "", nil, false, drillObjects(true), "audit", "-o", "sarif", "-A"),
		"clean": invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("daemonset-list.json"), "--nodes", "3"),
	}
	for name, r := range runs {
		t.Run(name, func(t *testing.T) {
			if r.ErrOut != "" {
				t.Fatalf("stderr %s", r.ErrOut)
			}
			res, err := gojsonschema.Validate(schema, gojsonschema.NewStringLoader(r.Out))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Errors() {
				t.Errorf("schema: %s", e)
			}
			rep, err := gosarif.FromString(r.Out)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Runs) != 1 || *rep.Runs[0].Tool.Driver.Name != "kubectl-localtraffic" ||
				len(rep.Runs[0].Tool.Driver.Rules) != len(placement.Rules()) {
				t.Errorf("run %+v", rep.Runs)
			}
			if name == "clean" || name == "list" {
				if len(rep.Runs[0].Results) != 0 {
					t.Errorf("%d results, want none", len(rep.Runs[0].Results))
				}
				return
			}
			first := rep.Runs[0].Results[0]
			if first.Level != "error" || !strings.HasPrefix(*first.RuleID, "LT10") {
				t.Errorf("first result %s %s", *first.RuleID, first.Level)
			}
		})
	}
}

// Every result from a file names the file and the line the object starts on: the line holds the start of the
// document (or List item) whose metadata names that object.
func TestSARIFLocationsAreTheObjectsLines(t *testing.T) {
	dir := t.TempDir()
	// Comments and blank lines before documents, an empty document, and the Service in a List.
	list := "# rendered by hand\n\n---\n---\n" + `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kubelings"}},
  {"apiVersion": "v1", "kind": "Service",
   "metadata": {"name": "checkout", "namespace": "kubelings"},
   "spec": {"type": "NodePort", "externalTrafficPolicy": "Local", "selector": {"app": "checkout"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30090}]}}
]}
--- # the workload
`
	pinned := read(t, "drill/pinned.yaml")
	deployment := pinned[strings.Index(pinned, "apiVersion: apps/v1"):]
	file := filepath.Join(dir, "app manifests.yaml")
	writeFile(t, file, list+deployment)
	r := invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", file, "--nodes", "3")
	if r.Code != cli.ExitFindings || r.ErrOut != "" {
		t.Fatalf("exit %d, stderr %s", r.Code, r.ErrOut)
	}
	lines := strings.Split(list+deployment, "\n")
	rep, err := gosarif.FromString(r.Out)
	if err != nil {
		t.Fatal(err)
	}
	located := 0
	for _, res := range rep.Runs[0].Results {
		if len(res.Locations) == 0 {
			t.Errorf("%s: no location", *res.RuleID)
		}
		for _, loc := range res.Locations {
			pl := loc.PhysicalLocation
			if pl == nil || pl.ArtifactLocation == nil || pl.ArtifactLocation.URI == nil || pl.Region == nil || pl.Region.StartLine == nil {
				t.Errorf("%s: location without file and line: %+v", *res.RuleID, loc)
				continue
			}
			if want := "file://" + filepath.ToSlash(strings.ReplaceAll(file, " ", "%20")); *pl.ArtifactLocation.URI != want {
				t.Errorf("uri %s, want %s", *pl.ArtifactLocation.URI, want)
			}
			fq := *loc.LogicalLocations[0].FullyQualifiedName // Kind/namespace/name
			kind, name := fq[:strings.Index(fq, "/")], fq[strings.LastIndex(fq, "/")+1:]
			line := *pl.Region.StartLine
			if line < 1 || line > len(lines) {
				t.Fatalf("%s: line %d outside the file", fq, line)
			}
			// The object's text runs from its line to the next document or item: it has the kind and the name.
			obj := strings.Join(lines[line-1:min(line+3, len(lines))], "\n")
			if !strings.Contains(obj, kind) || !strings.Contains(obj, name) ||
				!(strings.HasPrefix(strings.TrimSpace(lines[line-1]), "apiVersion") || strings.HasPrefix(strings.TrimSpace(lines[line-1]), `{"apiVersion"`)) {
				t.Errorf("%s at line %d: the file has there\n%s", fq, line, obj)
			}
			located++
		}
	}
	if located < 2 {
		t.Errorf("%d located objects, want the Service and the Deployment at least", located)
	}
	// Relative paths stay relative, as code scanning resolves them against the repository root.
	rel := invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", "./"+testdata("drill/pinned.yaml"), "--nodes", "3")
	if !strings.Contains(rel.Out, `"uri": "testdata/drill/pinned.yaml"`) {
		t.Errorf("relative path not kept relative and clean:\n%.2000s", rel.Out)
	}
}

// Standard input: SARIF needs a repository file to attach findings to, so -o sarif -f - requires
// --stdin-filename; its results name that file and carry no line (the piped text is rendered output, not it).
func TestSARIFStdinName(t *testing.T) {
	r := invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-o", "sarif", "-f", "-", "--nodes", "3")
	if r.Code != cli.ExitError || r.Out != "" || !strings.Contains(r.ErrOut, "--stdin-filename") || strings.Count(r.ErrOut, "\n") != 1 {
		t.Errorf("without --stdin-filename: exit %d, stdout %q, stderr %q; want exit 2 and one line naming the flag", r.Code, r.Out, r.ErrOut)
	}
	r = invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-o", "sarif", "-f", "-", "--nodes", "3",
		"--stdin-filename", "deploy/overlays/prod/kustomization.yaml")
	rep, err := gosarif.FromString(r.Out)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Runs[0].Results {
		for _, loc := range res.Locations {
			pl := loc.PhysicalLocation
			if pl == nil || *pl.ArtifactLocation.URI != "deploy/overlays/prod/kustomization.yaml" || pl.Region != nil {
				t.Errorf("%s: location %+v, want the named file without a region", *res.RuleID, pl)
			}
		}
	}
	// The JSON output keeps the stream's lines: a person reading it can find the object in what was piped.
	j := invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-o", "json", "-f", "-", "--nodes", "3")
	var jr placement.Report
	if err := json.Unmarshal([]byte(j.Out), &jr); err != nil {
		t.Fatal(err)
	}
	if s := jr.Findings()[0].Service; s.Source != "stdin" || s.Line != 7 {
		t.Errorf("JSON output: the Service is at %s:%d, want stdin:7", s.Source, s.Line)
	}
}

// Every rule's help link points at a heading of docs/audit.md (GitHub's anchor for it), on main for a
// development build and on the release's tag for a release.
func TestSARIFHelpLinksResolve(t *testing.T) {
	anchors := githubAnchors(t, filepath.Join("..", "..", "..", "..", "docs", "audit.md"))
	r := invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("drill/pinned.yaml"), "--nodes", "3")
	rep, err := gosarif.FromString(r.Out)
	if err != nil {
		t.Fatal(err)
	}
	const docs = repoURL + "/blob/main/docs/audit.md#"
	for _, rule := range rep.Runs[0].Tool.Driver.Rules {
		uri := *rule.HelpURI
		if !strings.HasPrefix(uri, docs) || !anchors[strings.TrimPrefix(uri, docs)] {
			t.Errorf("rule %s: help %s is not a heading of docs/audit.md", *rule.ID, uri)
		}
		if rule.Help == nil || !strings.Contains(*rule.Help.Text, uri) {
			t.Errorf("rule %s: help text does not link %s", *rule.ID, uri)
		}
	}
	for v, want := range map[string]string{"0.2.0": "/blob/v0.2.0/", "0.2.0-SNAPSHOT-abc1234": "/blob/main/", "v0.1.0-3-gabc-dirty": "/blob/main/", "": "/blob/main/"} {
		t.Run(v, func(t *testing.T) {
			clitest.SetVersion(t, v)
			if got := docsURL(); !strings.Contains(got, want) {
				t.Errorf("version %q: docs %s, want %s", v, got, want)
			}
		})
	}
}

// githubAnchors returns the anchors GitHub gives a Markdown file's headings: lower case, punctuation but
// hyphens and spaces dropped, spaces turned into hyphens.
func githubAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	fence := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}

// docs/audit.md's GitHub Actions job: the audit command, as written there, writes valid SARIF for the drill's
// pinned Deployment and exits 1 (the step fails the job), and the upload step runs after a failed step.
func TestSARIFDocsWorkflow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	var job string
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(block[1], "upload-sarif") {
			job = block[1]
		}
	}
	var wf struct {
		Jobs map[string]struct {
			Permissions map[string]string `json:"permissions"`
			Steps       []struct {
				Name string `json:"name"`
				If   string `json:"if"`
				Uses string `json:"uses"`
				Run  string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := sigsyaml.Unmarshal([]byte(job), &wf); err != nil || len(wf.Jobs) != 1 {
		t.Fatalf("docs/audit.md: no GitHub Actions job with upload-sarif (%v):\n%s", err, job)
	}
	var audit, upload bool
	for _, j := range wf.Jobs {
		if j.Permissions["security-events"] != "write" {
			t.Errorf("permissions %v: upload-sarif needs security-events: write", j.Permissions)
		}
		for _, s := range j.Steps {
			switch {
			case strings.Contains(s.Run, "kubectl-localtraffic audit"):
				audit = true
				cmd := strings.ReplaceAll(s.Run, "\\\n", " ")
				cmd = cmd[strings.Index(cmd, "kubectl-localtraffic audit")+len("kubectl-localtraffic "):]
				args := strings.Fields(cmd[:strings.Index(cmd, ">")])
				r := invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, args...)
				if r.Code != cli.ExitFindings || r.ErrOut != "" {
					t.Errorf("%v: exit %d (want 1: the step fails the job), stderr %s", args, r.Code, r.ErrOut)
				}
				if res, err := gojsonschema.Validate(sarifSchema210(t), gojsonschema.NewStringLoader(r.Out)); err != nil || !res.Valid() {
					t.Errorf("%v: output is not valid SARIF: %v %v", args, err, res)
				}
			case strings.HasPrefix(s.Uses, "github/codeql-action/upload-sarif@"):
				upload = true
				if !strings.Contains(s.If, "!cancelled()") && !strings.Contains(s.If, "always()") {
					t.Errorf("upload step if %q: it is skipped when the audit fails the job", s.If)
				}
			}
		}
	}
	if !audit || !upload {
		t.Errorf("the job has an audit step %v and an upload step %v", audit, upload)
	}
}
