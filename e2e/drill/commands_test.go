package drill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestCommandsAreTheDrills: every command the live drill runs appears word for word in the code blocks of
// docs/drill.md, the project's copy of the drill.
func TestCommandsAreTheDrills(t *testing.T) {
	mod, err := cluster.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(mod), "docs", "drill.md"))
	if err != nil {
		t.Fatal(err)
	}
	ref := string(b)
	for _, cmd := range append(ObserveCommands(), FixCommands()...) {
		if !strings.Contains(ref, cmd+"\n") {
			t.Errorf("not word for word in docs/drill.md:\n%s", cmd)
		}
	}
}
