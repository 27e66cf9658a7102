package cluster

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// The harness starts every exporter on ExporterPort, and the tests that install the shipped manifests find it
// there too. The e2e module imports nothing of the repository's root module, so its one constant is held to
// the exporter's own default here, by asking the binary the tests run.
func TestExporterPortIsTheExportersDefault(t *testing.T) {
	exporter := os.Getenv("LT_E2E_EXPORTER")
	if exporter == "" {
		var err error
		if exporter, err = BuildExporter(context.Background(), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(exporter, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", exporter, err, out)
	}
	m := regexp.MustCompile(`--web\.listen-address=:(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no default --web.listen-address in --help:\n%s", out)
	}
	if got := string(m[1]); got != strconv.Itoa(ExporterPort) {
		t.Errorf("the exporter's default port is %s, the harness's ExporterPort %d: keep them one", got, ExporterPort)
	}
}
