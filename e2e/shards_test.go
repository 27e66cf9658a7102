package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestShardsCoverControllerTests holds run-e2e.sh's controllerShard to the code: a test that reaches
// controllerCluster, scaleCluster or cluster.Up (directly or through this package's helpers) brings a cluster
// other than the shared one and must run in the controllers shard; every name the shard lists must be a
// test. A test left out would still pass, but would start its cluster inside the shared shard's process and
// run alone after it, which is the time the shards exist to save.
func TestShardsCoverControllerTests(t *testing.T) {
	script, err := os.ReadFile("run-e2e.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^controllerShard='([^']+)'$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("run-e2e.sh has no controllerShard='...' line")
	}
	shard, err := regexp.Compile(string(m[1]))
	if err != nil {
		t.Fatalf("controllerShard: %v", err)
	}

	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return true }, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]map[string]bool{} // package-level function → the functions and selectors it calls
	var tests []string
	for _, p := range pkgs {
		if p.Name != "e2e" {
			continue
		}
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || fn.Body == nil {
					continue
				}
				name := fn.Name.Name
				if strings.HasPrefix(name, "Test") && name != "TestMain" {
					tests = append(tests, name)
				}
				calls[name] = map[string]bool{}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					switch c := n.(type) {
					case *ast.Ident:
						calls[name][c.Name] = true
					case *ast.SelectorExpr:
						if x, ok := c.X.(*ast.Ident); ok {
							calls[name][x.Name+"."+c.Sel.Name] = true
						}
					}
					return true
				})
			}
		}
	}
	own := map[string]bool{"controllerCluster": true, "scaleCluster": true, "cluster.Up": true}
	var reaches func(fn string, seen map[string]bool) bool
	reaches = func(fn string, seen map[string]bool) bool {
		if seen[fn] {
			return false
		}
		seen[fn] = true
		for callee := range calls[fn] {
			if callee == "sharedCluster" { // starts the shared cluster with cluster.Up: the other shard's
				continue
			}
			if own[callee] || calls[callee] != nil && reaches(callee, seen) {
				return true
			}
		}
		return false
	}
	sort.Strings(tests)
	known := map[string]bool{}
	for _, name := range tests {
		known[name] = true
		ownCluster := reaches(name, map[string]bool{})
		switch {
		case ownCluster && !shard.MatchString(name):
			t.Errorf("%s brings a cluster of its own (or the controllers' one): add it to run-e2e.sh's controllerShard", name)
		case !ownCluster && shard.MatchString(name):
			t.Errorf("%s is in controllerShard but uses only the shared cluster: take it out", name)
		}
	}
	for _, name := range regexp.MustCompile(`Test[A-Za-z0-9_]+`).FindAllString(string(m[1]), -1) {
		if !known[name] {
			t.Errorf("controllerShard names %s, which is not a test of this package", name)
		}
	}
}
