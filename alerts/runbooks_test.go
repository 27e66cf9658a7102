package alerts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runbookParts are the parts every runbook entry has, in this order: the mitigation first, then how to confirm,
// then the explanation, then the lasting fix.
var runbookParts = []string{"**Do this now.**", "**Confirm.**", "**Understand.**", "**Fix for good.**"}

// maxDoNowLines bounds "Do this now": what a person woken at night reads before the first command.
const maxDoNowLines = 5

// runbookEntryProblems checks one entry (the text after its "## " heading line): the parts in order, each once
// and at the start of a line; "Do this now" first and at most maxDoNowLines lines (blank lines and code fences
// not counted); no command that needs a minted token; an exclude label put on NODE removed again later in the
// entry (e2e's TestRunbooksRun runs every command in order and must leave the node as it found it).
func runbookEntryProblems(body string) []string {
	var problems []string
	at := make([]int, len(runbookParts))
	for i, p := range runbookParts {
		idx := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(p)).FindAllStringIndex(body, -1)
		if len(idx) != 1 {
			problems = append(problems, "want one "+p+" paragraph")
			return problems
		}
		at[i] = idx[0][0]
		if i > 0 && at[i] < at[i-1] {
			problems = append(problems, p+" before "+runbookParts[i-1])
		}
	}
	if strings.TrimSpace(body[:at[0]]) != "" {
		problems = append(problems, "text before **Do this now.**")
	}
	lines := 0
	for _, l := range strings.Split(body[at[0]:at[1]], "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "```") {
			lines++
		}
	}
	if lines > maxDoNowLines {
		problems = append(problems, "**Do this now.** has more than 5 lines")
	}
	if strings.Contains(body, "create token") || strings.Contains(body, "Authorization: Bearer") {
		problems = append(problems, "a command needs a minted ServiceAccount token: read the node's view with kubectl localtraffic status --from-exporters")
	}
	const label = "kubectl label node NODE node.kubernetes.io/exclude-from-external-load-balancers"
	if put := strings.Index(body, label+"=true"); put >= 0 && !strings.Contains(body[put:], label+"-") {
		problems = append(problems, "puts the exclude label on NODE and never removes it")
	}
	return problems
}

// TestRunbooksStartWithTheAction holds every entry of docs/runbooks.md to runbookEntryProblems.
func TestRunbooksStartWithTheAction(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), RunbooksPath))
	if err != nil {
		t.Fatal(err)
	}
	entries := regexp.MustCompile(`(?m)^## `).Split(string(data), -1)[1:]
	if len(entries) < 10 {
		t.Fatalf("read %d runbook entries", len(entries))
	}
	for _, e := range entries {
		name, body, _ := strings.Cut(e, "\n")
		for _, p := range runbookEntryProblems(body) {
			t.Errorf("%s: runbook %s: %s", RunbooksPath, name, p)
		}
	}
}

// The check has teeth: each rule it states catches an entry that breaks it.
func TestRunbookEntryProblemsCaught(t *testing.T) {
	const good = "\n**Do this now.** Label it.\n\n```sh\nkubectl label node NODE node.kubernetes.io/exclude-from-external-load-balancers=true\n```\n\n" +
		"**Confirm.**\n\n**Understand.** Why.\n\n**Fix for good.** Fix.\n\n```sh\nkubectl label node NODE node.kubernetes.io/exclude-from-external-load-balancers-\n```\n"
	if p := runbookEntryProblems(good); len(p) != 0 {
		t.Fatalf("a good entry: %v", p)
	}
	for name, bad := range map[string]string{
		"order":     strings.Replace(strings.Replace(good, "**Confirm.**", "**X**", 1), "**Understand.** Why.", "**Understand.** Why.\n\n**Confirm.**", 1),
		"missing":   strings.Replace(good, "**Understand.**", "**Meaning.**", 1),
		"late":      "\nFirst some words.\n" + good,
		"long":      strings.Replace(good, "Label it.", "1\n2\n3\n4\n5", 1),
		"token":     good + "curl -H \"Authorization: Bearer $(kubectl -n monitoring create token prometheus-k8s)\" https://NODE_IP:9746/metrics\n",
		"unlabeled": strings.Replace(good, "exclude-from-external-load-balancers-", "other-", 1),
	} {
		if p := runbookEntryProblems(bad); len(p) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}
