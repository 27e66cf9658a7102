package alerts

import (
	"fmt"
	"path/filepath"
	"sort"
	"testing"
)

// repoRoot is the repository root: the alerts module lives in <root>/alerts.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Paths relative to the repository root that only the tests read.
const (
	RunbooksPath     = "docs/runbooks.md"
	ScaleDocPath     = "docs/scale.md"
	ScrapeConfigPath = "alerts/prometheus-scrape.yaml"
	RuleTestGlob     = "alerts/tests/*.test.yaml"
)

// RunbookBaseURL is where docs/runbooks.md is published; an alert's runbook_url is this plus "#" and the
// lower-cased alert name (GitHub's anchor for the heading "## <AlertName>").
const RunbookBaseURL = "https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/runbooks.md"

// DashboardFiles returns the dashboards' paths relative to root, sorted.
func DashboardFiles(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, DashboardDir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", filepath.Join(root, DashboardDir))
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = filepath.Join(DashboardDir, filepath.Base(m))
	}
	sort.Strings(out)
	return out, nil
}
