package exporters

import (
	"os"
	"strings"
	"testing"
)

// The defaults the plugin assumes for an exporter container without --web.listen-address or
// --web.telemetry-path are the exporter's: README.md's flag table, which the exporter's docs test holds to its
// flags.
func TestExporterDefaultsAreTheExporters(t *testing.T) {
	b, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"--web.listen-address": exporterDefaultListen, "--web.telemetry-path": exporterDefaultPath} {
		row := "| `" + flag + "` | `" + want + "` |"
		if !strings.Contains(string(b), row) {
			t.Errorf("README.md's flag table has no row starting %q: the exporter's default moved", row)
		}
	}
}
