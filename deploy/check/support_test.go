package check

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// oldestTested returns the Kubernetes version e2e's TestOldestAdmittedKubernetes runs (e2e/tools/kubeoldest/go.mod)
// and its minor.
func oldestTested(t *testing.T) (string, int) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(repoRoot(t), "e2e", "tools", "kubeoldest", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v1\.(\d+)\.\d+)\b`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("e2e/tools/kubeoldest/go.mod requires no k8s.io/kubernetes")
	}
	minor, err := strconv.Atoi(string(m[2]))
	if err != nil {
		t.Fatal(err)
	}
	return string(m[1]), minor
}

// TestChartAdmitsFromTheOldestTested: the chart's kubeVersion starts at the minor e2e runs as the oldest, so every
// version it admits lies between two tested ones (docs/support.md); helm installs on that version and refuses
// the minor below.
func TestChartAdmitsFromTheOldestTested(t *testing.T) {
	oldest, minor := oldestTested(t)
	chrt, err := loader.Load(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(">=1.%d.0-0", minor); chrt.Metadata.KubeVersion != want {
		t.Errorf("Chart.yaml kubeVersion %q, want %q: e2e's oldest tested Kubernetes is %s", chrt.Metadata.KubeVersion, want, oldest)
	}
	if _, err := renderChartOn(t, nil, oldest); err != nil {
		t.Errorf("the chart on %s, the oldest tested: %v", oldest, err)
	}
	below := fmt.Sprintf("v1.%d.0", minor-1)
	if _, err := renderChartOn(t, nil, below); err == nil {
		t.Errorf("the chart installs on %s, older than any tested Kubernetes", below)
	}
}

// TestSupportTableNamesTheOldestTested: docs/support.md names the oldest tested version and its test.
func TestSupportTableNamesTheOldestTested(t *testing.T) {
	oldest, _ := oldestTested(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "support.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| Kubernetes " + regexp.QuoteMeta(oldest) + " .*\\| tested \\|.*TestOldestAdmittedKubernetes")
	if !row.Match(b) {
		t.Errorf("docs/support.md has no tested row for Kubernetes %s naming TestOldestAdmittedKubernetes", oldest)
	}
}
