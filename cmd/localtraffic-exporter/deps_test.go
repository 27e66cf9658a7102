package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The exporter does not link client-go's typed clientset, its scheme, its informers or its leader election:
// they register every API group's types, which made the binary 26 MB larger and every node's exporter 12 MB
// larger in resident memory (file-backed pages of the binary) for the Event writer one exporter runs. The API
// is reached through kubeview's clients and the dynamic client (eventwriter.DynamicClients).
func TestLinksNoTypedClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme",
		"k8s.io/client-go/informers", "k8s.io/client-go/tools/leaderelection", "k8s.io/client-go/tools/leaderelection/resourcelock"} {
		if slices.Contains(deps, p) {
			t.Errorf("the exporter links %s", p)
		}
	}
}
