package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/localtraffic/localtraffic-exporter"

// archRow matches a row of architecture.md's package table: | `pkg` | job | `a`, `b` |.
var archRow = regexp.MustCompile("^\\| `([^`]+)` \\|[^|]+\\| (.+) \\|$")

// allowedImports reads the table between the packages markers of architecture.md.
func allowedImports(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- packages: begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- packages: end -->")
	if !ok || !ok2 {
		t.Fatal("architecture.md: no packages table between its markers")
	}
	allowed := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		m := archRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		var deps []string
		for _, d := range strings.Split(m[2], ",") {
			if d = strings.Trim(strings.TrimSpace(d), "`"); d != "—" && d != "" {
				deps = append(deps, d)
			}
		}
		allowed[m[1]] = deps
	}
	if len(allowed) == 0 {
		t.Fatal("architecture.md: the packages table has no rows")
	}
	return allowed
}

// moduleImports parses the non-test Go files of every package of the root module (not the other modules,
// which have their own go.mod) and returns each package's imports of this module.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "docs") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if _, ok := got[pkg]; !ok {
			got[pkg] = nil
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(got[pkg], dep) {
				got[pkg] = append(got[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// violations lists every import the table does not allow, every package without a row and every row without a
// package.
func violations(allowed, got map[string][]string) []string {
	var out []string
	for pkg, deps := range got {
		ok, listed := allowed[pkg]
		if !listed {
			out = append(out, "package "+pkg+" is not in docs/architecture.md's table: add its row (its job, what it may import)")
			continue
		}
		for _, d := range deps {
			if !slices.Contains(ok, d) {
				out = append(out, pkg+" imports "+d+", which docs/architecture.md does not allow (allowed: "+strings.Join(ok, ", ")+")")
			}
		}
	}
	for pkg := range allowed {
		if _, ok := got[pkg]; !ok {
			out = append(out, "docs/architecture.md names "+pkg+", which is not a package of the module")
		}
	}
	slices.Sort(out)
	return out
}

// TestImportsFollowArchitecture: every import between this module's packages is one the table allows, every
// package has a row and every row a package.
func TestImportsFollowArchitecture(t *testing.T) {
	for _, v := range violations(allowedImports(t), moduleImports(t)) {
		t.Error(v)
	}
}

// TestArchitectureCheckFails: the same check on the module's imports with arrows added against the table
// (kubeview importing the collector; the scrape package importing the collector that renders it), one package
// added and one removed reports exactly those four.
func TestArchitectureCheckFails(t *testing.T) {
	allowed := allowedImports(t)
	got := moduleImports(t)
	if !slices.Contains(got["collector"], "verdict") {
		t.Fatalf("collector's imports as parsed: %v; the verdict import should be among them", got["collector"])
	}
	got["kubeview"] = append(slices.Clone(got["kubeview"]), "collector")
	got["scrape"] = append(slices.Clone(got["scrape"]), "collector")
	got["stray"] = nil
	delete(got, "nodeprobe/arrivals")
	v := violations(allowed, got)
	joined := strings.Join(v, "\n")
	if len(v) != 4 || !strings.Contains(joined, "kubeview imports collector") || !strings.Contains(joined, "scrape imports collector,") {
		t.Fatalf("violations: %q, want the four injected", v)
	}
}

// dataplaneReaders are the packages under nodeprobe/ that implement the dataplane seam: they import
// nodeprobe/dataplane (the seam's own package and its test support excepted).
func dataplaneReaders(got map[string][]string) []string {
	var out []string
	for pkg, deps := range got {
		if strings.HasPrefix(pkg, "nodeprobe/") && !strings.HasPrefix(pkg, "nodeprobe/dataplane") &&
			slices.Contains(deps, "nodeprobe/dataplane") {
			out = append(out, pkg)
		}
	}
	slices.Sort(out)
	return out
}

// TestEveryReaderRunsTheFixtureTable: one fixture table runs through every dataplane reader (the seam, in
// architecture.md): each reader's tests run dataplanetest's table on its own rendering of the worlds. A new
// reader that does not join the table fails here.
func TestEveryReaderRunsTheFixtureTable(t *testing.T) {
	readers := dataplaneReaders(moduleImports(t))
	if !slices.Contains(readers, "nodeprobe/kernelrules") || !slices.Contains(readers, "nodeprobe/ciliumsvc") {
		t.Fatalf("dataplane readers found: %q; kube-proxy's and Cilium's should be among them", readers)
	}
	for _, pkg := range readers {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		runs := false
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			runs = runs || strings.Contains(string(data), "dataplanetest.RunTable(")
		}
		if !runs {
			t.Errorf("%s reads a dataplane, and no test of it runs the seam's fixture table (dataplanetest.RunTable)", pkg)
		}
	}
}
