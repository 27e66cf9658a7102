package placement

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// docs/audit.md documents every finding under a "### <ID> <name>" heading, in ID order, and nothing else: the
// IDs CI configurations key on stay the ones the code emits.
func TestDocsListEveryFinding(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented, want []string
	for _, m := range regexp.MustCompile(`(?m)^### (LT\d+) (\S+)$`).FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, m[1]+" "+m[2])
	}
	for _, r := range Rules() {
		want = append(want, string(r.ID)+" "+r.Name)
	}
	if !slices.Equal(documented, want) {
		t.Errorf("docs/audit.md documents\n  %v\nthe code has\n  %v", documented, want)
	}
}
