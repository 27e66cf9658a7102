package cli

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/audit.md's "Exit status" table is exitStatuses, word for word (backticks aside), one row per exit status
// constant in order, one column per command. That each command's --help prints its column is the plugin's
// TestEveryCommandHelp.
func TestExitStatusTableIsTheDocs(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Exit status\n")
	if !ok {
		t.Fatal("docs/audit.md has no \"## Exit status\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows [][]string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), "`", ""))
		}
		rows = append(rows, cells)
	}
	commands := []string{"status", "drain-check", "audit"}
	if len(rows) == 0 || !slices.Equal(rows[0], append([]string{"status"}, commands...)) {
		t.Fatalf("docs/audit.md's exit status table: header %q, want status and a column per command %v", rows, commands)
	}
	want := exitStatuses()
	if codes := []int{ExitClean, ExitFindings, ExitError, ExitAPI}; len(want) != len(codes) {
		t.Fatalf("exitStatuses has %d rows for %d exit status constants", len(want), len(codes))
	} else {
		for i, c := range codes {
			if want[i].code != c {
				t.Errorf("exitStatuses row %d is status %d, want %d", i, want[i].code, c)
			}
		}
	}
	if len(rows)-1 != len(want) {
		t.Fatalf("docs/audit.md's exit status table has %d rows, the code %d", len(rows)-1, len(want))
	}
	for i, e := range want {
		row := rows[i+1]
		wantRow := []string{strconv.Itoa(e.code)}
		for _, c := range commands {
			wantRow = append(wantRow, e.of(c))
		}
		if !slices.Equal(row, wantRow) {
			t.Errorf("docs/audit.md's exit status row %d:\n%q\nthe code's (exitstatus.go):\n%q", i+1, row, wantRow)
		}
	}
}
