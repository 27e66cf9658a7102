package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// knob is an environment variable the tests, scripts or Makefile read.
var knob = regexp.MustCompile(`\bLT_[A-Z0-9_]+\b`)

// knobsIn returns the LT_ variables named in text, sorted and distinct.
func knobsIn(text string) []string {
	k := knob.FindAllString(text, -1)
	slices.Sort(k)
	return slices.Compact(k)
}

// TestKnobsListedInOnePlace: every LT_ variable any tracked file reads is in the Makefile's knobs block and in
// CONTRIBUTING.md's knobs table, and neither lists one that nothing reads.
func TestKnobsListedInOnePlace(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go", "*.sh", "Makefile", ".ci/run").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var used []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "docs/") || f == "Makefile" {
			continue // the lists themselves, and this test
		}
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, knobsIn(string(data))...)
	}
	slices.Sort(used)
	used = slices.Compact(used)
	if len(used) < 10 {
		t.Fatalf("found only %v: the search is broken", used)
	}

	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(makefile), "## Knobs:")
	block, _, _ = strings.Cut(block, "\n\n")
	contributing, err := os.ReadFile("../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(contributing), "## Knobs")
	table, _, _ = strings.Cut(table, "\n## ")
	for name, listed := range map[string][]string{"the Makefile's knobs block": knobsIn(block), "CONTRIBUTING.md's knobs table": knobsIn(table)} {
		for _, k := range used {
			if !slices.Contains(listed, k) {
				t.Errorf("%s is read but not in %s", k, name)
			}
		}
		for _, k := range listed {
			if !slices.Contains(used, k) {
				t.Errorf("%s lists %s, which nothing reads", name, k)
			}
		}
	}
}
