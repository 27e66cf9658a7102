package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// reasonConst is a blackhole reason as verdict defines it.
	reasonConst = regexp.MustCompile(`Reason\s*=\s*"([a-z_]+)"`)
	backticked  = regexp.MustCompile("`([^`]+)`")
	testName    = regexp.MustCompile(`^Test[A-Z]\w*$`)
)

// TestPagesTable holds rotation.md's "What pages and what does not" to the code: every reason a row gives is one
// verdict defines (or no blackhole at all), and every test a row names is defined by a test file of the
// repository, so a renamed reason or a deleted test cannot leave the table claiming what nothing proves.
func TestPagesTable(t *testing.T) {
	doc, err := os.ReadFile("rotation.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### What pages and what does not\n")
	if !ok {
		t.Fatal(`rotation.md has no "### What pages and what does not" section`)
	}
	section, _, _ = strings.Cut(section, "\n#")

	// The reasons are defined across the package (announced_here beside the announcers' rules).
	files, err := filepath.Glob("../verdict/*.go")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reasonConst.FindAllStringSubmatch(string(src), -1) {
			reasons[m[1]] = true
		}
	}
	if len(reasons) < 5 || !reasons["announced_here"] {
		t.Fatalf("found reasons %v in verdict: the parse is broken", reasons)
	}
	tests := definedTests(t)

	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, " |"), " | ")
		if !strings.HasPrefix(line, "|") || len(cells) != 3 || cells[0] == "case" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows++
		reason, named := cells[1], cells[2]
		found := backticked.FindAllStringSubmatch(reason, -1)
		if len(found) == 0 && !strings.HasPrefix(reason, "no blackhole") {
			t.Errorf("row %q: the reason %q names no reason and is not \"no blackhole\"", cells[0], reason)
		}
		for _, m := range found {
			if !reasons[m[1]] {
				t.Errorf("row %q: %q is no reason verdict defines", cells[0], m[1])
			}
		}
		n := 0
		for _, m := range backticked.FindAllStringSubmatch(named, -1) {
			if !testName.MatchString(m[1]) {
				continue
			}
			n++
			if !tests[m[1]] {
				t.Errorf("row %q: no test file defines %s", cells[0], m[1])
			}
		}
		if n == 0 {
			t.Errorf("row %q names no test", cells[0])
		}
	}
	if rows < 10 {
		t.Errorf("%d rows in the table: the parse is broken, or cases went missing", rows)
	}
}

// definedTests is every test function the repository's tracked test files define.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "*_test.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	def := regexp.MustCompile(`(?m)^func (Test[A-Z]\w*)\(`)
	tests := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range def.FindAllStringSubmatch(string(data), -1) {
			tests[m[1]] = true
		}
	}
	if len(tests) < 100 {
		t.Fatalf("found %d tests: the search is broken", len(tests))
	}
	return tests
}
