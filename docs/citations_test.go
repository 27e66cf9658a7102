package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citation matches what a reader of the repository cannot open: a tracker's issue or item number, or a section
// sign, which cited a reference kept outside the repository. The kube-proxy facts the code relies on are in
// docs/kube-proxy.md and are cited by section name. The section sign is written as an escape so this file does
// not match itself.
var citation = regexp.MustCompile(`(?i)\bissues? #?[0-9]+\b|\bitems? [0-9]+\b|\x{00A7}`)

// citationExempt are files whose job is history (they may name what changed when and why).
func citationExempt(path string) bool {
	return strings.HasPrefix(strings.ToUpper(filepath.Base(path)), "CHANGELOG")
}

// TestNoOutsideCitations: no tracked Go, Markdown, YAML, shell or Makefile text cites an issue or item number
// or a section of a document outside the repository; say the behaviour, or cite docs/ by section name.
func TestNoOutsideCitations(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go", "*.md", "*.yaml", "*.yml", "*.sh", "Makefile").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 100 {
		t.Fatalf("found only %d files: the listing is broken", len(files))
	}
	for _, f := range files {
		if citationExempt(f) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range citationsIn(string(data)) {
			t.Errorf("%s:%d cites what the repository does not hold: %q", f, line.n, line.text)
		}
	}
}

type citedLine struct {
	n    int
	text string
}

// citationsIn returns the lines of text that cite an issue, an item or an outside section.
func citationsIn(text string) []citedLine {
	var out []citedLine
	for i, line := range strings.Split(text, "\n") {
		if m := citation.FindString(line); m != "" {
			out = append(out, citedLine{i + 1, m})
		}
	}
	return out
}

// TestCitationPattern holds the pattern to what it must and must not catch. The citations are written with N
// for the number, so that this file holds none.
func TestCitationPattern(t *testing.T) {
	for _, s := range []string{
		"see kube-proxy.md \u00a7N", "(issue N, docs/rotation.md)", "Issue N's scale harness", "item N",
		"(issue N, item N)", "issues N", "issue #N",
	} {
		s = strings.ReplaceAll(s, "N", "21")
		if len(citationsIn(s)) == 0 {
			t.Errorf("%q is not caught", s)
		}
	}
	for _, s := range []string{
		"docs/kube-proxy.md, Health check node port", "items in the list", "issue a request", "the 4th item",
		"kube-proxy v1.37.2", "listItem 3",
	} {
		if c := citationsIn(s); len(c) != 0 {
			t.Errorf("%q is caught as %q", s, c[0].text)
		}
	}
}
