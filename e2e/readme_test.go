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
		fatalln(t, err)
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
				errorf(t, "README.md: -run %q: %v", r[1], err)
				continue
			}
			runs = append(runs, re)
		}
	}
	if len(globs) < 10 || len(runs) < 10 {
		fatalf(t, "found %d file patterns and %d -run patterns in README.md's map: the parse is broken", len(globs), len(runs))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		fatalln(t, err)
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
			errorf(t, "%s is in no row of README.md's map (\"Where each part lives\")", f)
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
			errorf(t, "README.md's -run %q selects no test", re)
		}
	}
}

// TestReadmeListsPromAgreeOptOuts holds README.md's table of the scenarios that opt out of the status --prometheus
// check to the code: every test that calls promAgreeOptOut has a row, and every row names such a test.
func TestReadmeListsPromAgreeOptOuts(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		fatalln(t, err)
	}
	_, section, ok := strings.Cut(string(readme), "## The plugin's `--prometheus` in every scenario")
	if !ok {
		fatalln(t, "README.md has no section \"The plugin's `--prometheus` in every scenario\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, table, ok := strings.Cut(section, "| scenario | why Prometheus cannot show its verdicts |")
	if !ok {
		fatalln(t, "README.md's --prometheus section has no table of opted-out scenarios")
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		if m := regexp.MustCompile("^`(Test\\w+)`$").FindStringSubmatch(strings.TrimSpace(cells[1])); m != nil {
			rows[m[1]] = true
		} else {
			errorf(t, "README.md's opt-out table: row %q does not name a test as `TestName`", line)
		}
	}
	calls, tests := packageCalls(t)
	for _, name := range tests {
		if calls[name]["promAgreeOptOut"] && !rows[name] {
			errorf(t, "%s opts out of the status --prometheus check and has no row in README.md's table", name)
		}
	}
	for name := range rows {
		if !calls[name]["promAgreeOptOut"] {
			errorf(t, "README.md's opt-out table names %s, which does not call promAgreeOptOut", name)
		}
	}
}
