// Command generate renders deploy/prometheus-operator/prometheusrule.yaml and dashboard-configmap.yaml from
// alerts/*.yaml and dashboards/*.json. Run it from alerts/ after changing a rule or a dashboard:
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
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			return 1
		}
	}
	return 0
}
