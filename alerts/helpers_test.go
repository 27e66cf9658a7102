package alerts

import (
	"path/filepath"
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
