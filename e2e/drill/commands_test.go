package drill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// drillReference finds shared/reference/drill.md in the nearest directory above the e2e module that has one
// (CI keeps shared/ beside its clone; worktrees sit deeper).
func drillReference(t *testing.T) string {
	mod, err := cluster.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(mod); ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "shared", "reference", "drill.md")); err == nil {
			return string(b)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Skip("shared/reference/drill.md is not beside this checkout (the team's and CI's machines have it)")
	return ""
}

// TestCommandsAreTheDrills: every command the live drill runs appears word for word in drill.md's code blocks.
func TestCommandsAreTheDrills(t *testing.T) {
	ref := drillReference(t)
	for _, cmd := range append(ObserveCommands(), FixCommands()...) {
		if !strings.Contains(ref, cmd+"\n") {
			t.Errorf("not word for word in drill.md:\n%s", cmd)
		}
	}
}
