package docs

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// commitsBase is the last commit whose subject is not held to the rule: history before it stays as written.
const commitsBase = "43ff4906cf17963380d610090b3e537784066e88"

// maxSubject is the longest subject git's tools and hosts show whole.
const maxSubject = 72

// subjectRule is `area: what changed`: an area (a package, a file, a tool; no colon) and, after ": ", the
// change.
var subjectRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./ ,{}*+-]{0,39}: \S`)

// subjectProblem says what is wrong with a commit subject, or "".
func subjectProblem(s string) string {
	switch {
	case utf8.RuneCountInString(s) > maxSubject:
		return "longer than 72 characters (detail goes in the body)"
	case !subjectRule.MatchString(s):
		return "not `area: what changed`"
	}
	return ""
}

// TestCommitSubjects: every commit after commitsBase (merges aside: git writes those) has a subject
// `area: what changed` of at most 72 characters.
func TestCommitSubjects(t *testing.T) {
	// A shallow clone may end after the base: then every commit it has came after the base, and each is checked.
	revs := commitsBase + "..HEAD"
	if exec.Command("git", "-C", "..", "cat-file", "-e", commitsBase+"^{commit}").Run() != nil {
		out, err := exec.Command("git", "-C", "..", "rev-parse", "--is-shallow-repository").Output()
		if err != nil || strings.TrimSpace(string(out)) != "true" {
			t.Fatalf("the base commit %s is not in this clone, which is not shallow (%v)", commitsBase, err)
		}
		revs = "HEAD"
	}
	out, err := exec.Command("git", "-C", "..", "log", "--no-merges", "--format=%h %s", revs).Output()
	if err != nil {
		t.Fatalf("git log %s: %v", revs, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		hash, subject, _ := strings.Cut(line, " ")
		if p := subjectProblem(subject); p != "" {
			t.Errorf("commit %s: subject %s: %q", hash, p, subject)
		}
	}
}

// TestSubjectRule holds the rule to subjects it must take and refuse.
func TestSubjectRule(t *testing.T) {
	for _, s := range []string{
		"docs: kube-proxy facts in docs/kube-proxy.md",
		"docs/performance.md: the meter's cost to the whole node, off and on",
		"e2e TestScaleRules: 500 Services in the suite",
		"CONTRIBUTING.md: a guide",
		"nodeprobe/arrivals, collector: one set per scrape",
	} {
		if p := subjectProblem(s); p != "" {
			t.Errorf("%q refused: %s", s, p)
		}
	}
	for _, s := range []string{
		"fix stuff",
		"docs:no space",
		": no area",
		"WIP",
		"release pipeline: " + strings.Repeat("x", 60),
		"Merge branch 'house'",
	} {
		if subjectProblem(s) == "" {
			t.Errorf("%q taken", s)
		}
	}
}
