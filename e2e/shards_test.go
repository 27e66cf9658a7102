package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestShardsCoverControllerTests holds run-e2e.sh's shard lists to the code: a test that reaches
// controllerCluster (directly or through this package's helpers) runs in controllersShard, one that brings a
// cluster of its own (scaleCluster, cluster.Up) in scaleShard, and neither list holds a test of the shared
// cluster; sharedLongShard holds only shared-cluster tests; every name a list gives is a test. A test in the
// wrong shard would still pass, but would start its cluster inside another shard's process and run alone
// after that shard's tests, which is the time the shards exist to save.
func TestShardsCoverControllerTests(t *testing.T) {
	script, err := os.ReadFile("run-e2e.sh")
	if err != nil {
		fatalln(t, err)
	}
	shards := map[string]*regexp.Regexp{}
	var listed []string
	for _, name := range []string{"controllersShard", "scaleShard", "sharedLongShard", "alone"} {
		m := regexp.MustCompile(`(?m)^` + name + `='([^']+)'$`).FindSubmatch(script)
		if m == nil {
			fatalf(t, "run-e2e.sh has no %s='...' line", name)
		}
		re, err := regexp.Compile(string(m[1]))
		if err != nil {
			fatalf(t, "%s: %v", name, err)
		}
		shards[name] = re
		listed = append(listed, regexp.MustCompile(`Test[A-Za-z0-9_]+`).FindAllString(string(m[1]), -1)...)
	}

	calls, tests := packageCalls(t)
	// reaches reports whether fn calls one of targets, directly or through this package's functions. The
	// shared cluster's constructor is not followed: it is the shared shards' cluster.
	var reaches func(fn string, targets map[string]bool, seen map[string]bool) bool
	reaches = func(fn string, targets map[string]bool, seen map[string]bool) bool {
		if seen[fn] {
			return false
		}
		seen[fn] = true
		for callee := range calls[fn] {
			if callee == "sharedCluster" {
				continue
			}
			if targets[callee] || calls[callee] != nil && reaches(callee, targets, seen) {
				return true
			}
		}
		return false
	}
	known := map[string]bool{}
	for _, name := range tests {
		known[name] = true
		want := "a shared shard"
		switch {
		case reaches(name, map[string]bool{"controllerCluster": true}, map[string]bool{}):
			want = "controllersShard"
		case reaches(name, map[string]bool{"scaleCluster": true, "cluster.Up": true}, map[string]bool{}):
			want = "scaleShard"
		}
		var in []string
		for shard, re := range shards {
			if re.MatchString(name) {
				in = append(in, shard)
			}
		}
		sort.Strings(in)
		switch {
		case want == "a shared shard" && (len(in) == 0 || len(in) == 1 && in[0] == "sharedLongShard"):
		case len(in) == 1 && (in[0] == want || in[0] == "alone"):
		default:
			errorf(t, "%s belongs in %s of run-e2e.sh, is listed in %v", name, want, in)
		}
	}
	for _, name := range listed {
		if !known[name] {
			errorf(t, "run-e2e.sh names %s, which is not a test of this package", name)
		}
	}
}

// packageCalls parses this package's files: for each package-level function, the identifiers and
// package-qualified selectors its body mentions; and the names of its tests.
func packageCalls(t *testing.T) (map[string]map[string]bool, []string) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		fatalln(t, err)
	}
	calls := map[string]map[string]bool{}
	var tests []string
	for _, file := range names {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			fatalln(t, err)
		}
		if f.Name.Name != "e2e" {
			continue
		}
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
	sort.Strings(tests)
	return calls, tests
}

// TestFailuresCarryThePrefix holds the package's tests to failing through errorf, fatalf, errorln and fatalln
// (main_test.go), whose messages begin with failPrefix: run-e2e.sh's digest finds a failure by it, and a
// t.Errorf would print like a log line, hidden among the logs of the phases after it.
func TestFailuresCarryThePrefix(t *testing.T) {
	direct := regexp.MustCompile(`(?m)^.*\b(t|tb|b)\.(Errorf|Fatalf|Error|Fatal)\(.*$`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		fatalln(t, err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			fatalln(t, err)
		}
		for _, m := range direct.FindAll(src, -1) {
			line := strings.TrimSpace(string(m))
			if f == "main_test.go" && strings.Contains(line, "failPrefix") {
				continue // the wrappers themselves
			}
			errorf(t, "%s: %q fails without the prefix: use errorf, fatalf, errorln or fatalln", f, line)
		}
	}
}
