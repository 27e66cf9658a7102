// Command generate renders the dashboards (dashboards/*.json, from the Go in alerts/dashgen),
// deploy/prometheus-operator/prometheusrule.yaml and dashboard-configmap.yaml, and the Helm chart's copies of
// the rules and dashboards (deploy/helm/localtraffic-exporter/files/). Run it after changing a rule or a
// dashboard (`make generate` does):
//
//	cd alerts && go run ./cmd/generate
//
// The alerts module's tests fail while the committed files differ from what this writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/localtraffic/localtraffic-exporter/alerts"
)

func main() { os.Exit(run()) }

func run() int {
	root := flag.String("root", "..", "repository root")
	flag.Parse()
	files, err := alerts.Generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		return 1
	}
	for _, f := range files {
		path := filepath.Join(*root, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			return 1
		}
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			return 1
		}
	}
	return 0
}
