package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestContributingKeepsNoRunRecords: CONTRIBUTING.md says how to work and what things cost; the record of a run
// (its date, the commit it measured) belongs in docs/performance.md, where the next measurement adds to it
// rather than rewriting a guide.
func TestContributingKeepsNoRunRecords(t *testing.T) {
	b, err := os.ReadFile("../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	record := regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b|\b(?:on|of) [0-9a-f]{7,40}\b|\b\d\d:\d\d(?:–\d\d:\d\d)? UTC\b`)
	for n, line := range strings.Split(string(b), "\n") {
		if m := record.FindString(line); m != "" {
			t.Errorf("CONTRIBUTING.md:%d names a run (%q): move the record to docs/performance.md and link it", n+1, m)
		}
	}
}
