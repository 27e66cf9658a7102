package alerts

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-jsonnet"
)

// TestMixinImportAfterJBInstall evaluates mixin/README.md's first jsonnet snippet as a user has it after `jb
// install github.com/localtraffic/localtraffic-exporter/mixin@<tag>`: jsonnet-bundler copies the directory to
// vendor/github.com/localtraffic/localtraffic-exporter/mixin, and the snippet imports it from there with
// vendor/ on the library path. Every import inside the mixin must resolve from that copy.
func TestMixinImportAfterJBInstall(t *testing.T) {
	src := filepath.Join(repoRoot(t), "mixin")
	vendor := t.TempDir()
	dst := filepath.Join(vendor, "github.com", "localtraffic", "localtraffic-exporter", "mixin")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(src, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```jsonnet\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("mixin/README.md has no jsonnet snippet")
	}
	if !regexp.MustCompile(`import 'github\.com/localtraffic/localtraffic-exporter/mixin/mixin\.libsonnet'`).Match(m[1]) {
		t.Fatalf("the README's snippet does not import the jb path:\n%s", m[1])
	}
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{vendor}})
	out, err := vm.EvaluateAnonymousSnippet(filepath.Join(t.TempDir(), "main.jsonnet"), string(m[1]))
	if err != nil {
		t.Fatalf("the README's snippet after jb install: %v", err)
	}
	for _, want := range []string{"LocalTrafficBlackhole", "localtraffic-exporter"} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(out) {
			t.Errorf("the snippet's output lacks %s", want)
		}
	}
}
