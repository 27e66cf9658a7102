package check

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// repoRoot is the repository root, found from this file's location so `go test` works from any directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source file")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s has no go.mod: %v", root, err)
	}
	return root
}

// render runs kustomize (the library kubectl 1.37 embeds, same version) on a directory under deploy/
// with kubectl's default options, so what passes here is what `kubectl apply -k` applies.
func render(t *testing.T, dir string) []*yaml.RNode {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), "deploy", dir))
	if err != nil {
		t.Fatalf("kustomize build deploy/%s: %v", dir, err)
	}
	return resMap.ToRNodeSlice()
}

// find returns the one object of the given kind and name, failing the test when it is absent.
func find(t *testing.T, objs []*yaml.RNode, kind, name string) *yaml.RNode {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q in the rendered manifests", kind, name)
	return nil
}
