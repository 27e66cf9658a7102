package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeMapsEveryFile holds README.md's map of the suite to the code: every Go file of this package falls
// under a row's file patterns, and every `-run` pattern the map gives selects at least one test.
func TestReadmeMapsEveryFile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## Where each part lives")
	section, _, _ = strings.Cut(section, "### How long")
	var globs []string
	var runs []*regexp.Regexp
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`") {
			continue
		}
		for _, g := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			globs = append(globs, g[1])
		}
		for _, r := range regexp.MustCompile("-run '([^']+)'").FindAllStringSubmatch(cells[4], -1) {
			re, err := regexp.Compile(strings.ReplaceAll(r[1], "\x00", "|"))
			if err != nil {
				t.Errorf("README.md: -run %q: %v", r[1], err)
				continue
			}
			runs = append(runs, re)
		}
	}
	if len(globs) < 10 || len(runs) < 10 {
		t.Fatalf("found %d file patterns and %d -run patterns in README.md's map: the parse is broken", len(globs), len(runs))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		found := false
		for _, g := range globs {
			if ok, _ := filepath.Match(g, f); ok {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s is in no row of README.md's map (\"Where each part lives\")", f)
		}
	}
	_, tests := packageCalls(t)
	for _, re := range runs {
		n := 0
		for _, name := range tests {
			if re.MatchString(name) {
				n++
			}
		}
		if n == 0 && re.String() != "^$" && re.String() != "^TestName$" {
			t.Errorf("README.md's -run %q selects no test", re)
		}
	}
}
