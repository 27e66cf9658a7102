package e2e

import (
	"fmt"
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/leak"
)

// The harness runs every exporter with the Go runtime settings the DaemonSet gives it, so the memory the
// scale tests measure is the deployed exporter's, and the soak's heap bound is set for that GOGC.
func TestExporterRuntimeEnvIsTheDaemonSets(t *testing.T) {
	raw, err := os.ReadFile("../deploy/base/daemonset.yaml")
	if err != nil {
		fatalln(t, err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		fatalln(t, err)
	}
	var want []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "GOGC" || e.Name == "GOMEMLIMIT" || e.Name == "GODEBUG" || e.Name == "GOMAXPROCS" {
				want = append(want, e.Name+"="+e.Value)
			}
		}
	}
	got := cluster.ExporterRuntimeEnv()
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		errorf(t, "the harness runs exporters with %v, deploy/base/daemonset.yaml with %v", got, want)
	}
	if gogc := fmt.Sprintf("GOGC=%d", leak.HeapGOGC); !slices.Contains(want, gogc) {
		errorf(t, "leak.HeapBound is set for %s (leak.HeapGOGC), deploy/base/daemonset.yaml runs the exporter with %v", gogc, want)
	}
}
