package exposure

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestCausesTable holds docs/exposure.md's table of causes to the code: the same causes, in the order CauseOf
// and the Recorder test them.
func TestCausesTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/exposure.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Causes\n")
	if !ok {
		t.Fatal(`docs/exposure.md has no "## Causes" section`)
	}
	var got []Cause
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, " |"), " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) != 2 {
			continue
		}
		got = append(got, Cause(strings.Trim(cells[0], "`")))
	}
	// The order the table gives precedence in: CauseOf's, with node_join (the Recorder's) after drain.
	want := []Cause{CauseNodeDeleting, CauseDrain, CauseNodeJoin, CauseRollout, CauseOther}
	if !slices.Equal(got, want) {
		t.Errorf("docs/exposure.md's causes: %v, want %v", got, want)
	}
	for _, c := range Causes {
		if !slices.Contains(got, c) {
			t.Errorf("cause %s is not in docs/exposure.md's table", c)
		}
	}
}
