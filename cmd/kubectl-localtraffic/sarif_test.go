package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gosarif "github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"github.com/xeipuuv/gojsonschema"
)

// sarifSchemaJSON returns the official SARIF 2.1.0 JSON schema (OASIS, errata01) as the go-sarif module ships it
// (an unexported constant of its v210 package), read from the module cache: the schema is not copied here.
func sarifSchemaJSON(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/owenrumney/go-sarif/v3").Output()
	if err != nil {
		t.Fatalf("locating the go-sarif module: %v", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "pkg", "report", "v210", "sarif", "schema.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Names) == 1 && vs.Names[0].Name == "schema" {
				lit := vs.Values[0].(*ast.BasicLit)
				schema, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(schema, `"title": "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"`) {
					t.Fatalf("%s: not the SARIF 2.1.0 schema", file)
				}
				return schema
			}
		}
	}
	t.Fatalf("%s: no schema constant", file)
	return ""
}

// The SARIF output, byte for byte, validates against the 2.1.0 schema, for findings from files and from stdin,
// for a live cluster, and for a clean run.
func TestSARIFValidatesAgainstTheSchema(t *testing.T) {
	schema := gojsonschema.NewStringLoader(sarifSchemaJSON(t))
	// The check can fail: a log with a result lacking its message is rejected.
	bad := `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[{"ruleId":"LT101"}]}]}`
	if res, err := gojsonschema.Validate(schema, gojsonschema.NewStringLoader(bad)); err != nil || res.Valid() {
		t.Fatalf("the schema accepts a result without a message (err %v)", err)
	}
	runs := map[string]result{
		"manifests": invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("drill/pinned.yaml"), "--nodes", "3"),
		"stdin":     invoke(t, read(t, "drill/pinned.yaml"), nil, false, nil, "audit", "-o", "sarif", "-f", "-", "--nodes", "3"),
		"live":      invoke(t, "", nil, false, drillObjects(true), "audit", "-o", "sarif", "-A"),
		"clean":     invoke(t, "", nil, false, nil, "audit", "-o", "sarif", "-f", testdata("daemonset-list.json"), "--nodes", "3"),
	}
	for name, r := range runs {
		t.Run(name, func(t *testing.T) {
			if r.errOut != "" {
				t.Fatalf("stderr %s", r.errOut)
			}
			res, err := gojsonschema.Validate(schema, gojsonschema.NewStringLoader(r.out))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Errors() {
				t.Errorf("schema: %s", e)
			}
			// go-sarif reads it back and finds the same results. (Its own Validate re-marshals its structs, whose
			// zero values, e.g. language "", break the schema, so the raw bytes above are what is validated.)
			rep, err := gosarif.FromString(r.out)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Runs) != 1 || *rep.Runs[0].Tool.Driver.Name != "kubectl-localtraffic" || len(rep.Runs[0].Tool.Driver.Rules) != 12 {
				t.Errorf("run %+v", rep.Runs)
			}
			if name == "clean" && len(rep.Runs[0].Results) != 0 {
				t.Errorf("clean run has %d results", len(rep.Runs[0].Results))
			}
			if name != "clean" {
				first := rep.Runs[0].Results[0]
				if first.Level != "error" || !strings.HasPrefix(*first.RuleID, "LT10") {
					t.Errorf("first result %s %s", *first.RuleID, first.Level)
				}
			}
		})
	}
	// A result from a file points at it.
	if !strings.Contains(runs["manifests"].out, `"uri": "testdata/drill/pinned.yaml"`) {
		t.Error("no artifact location for the manifest")
	}
}
