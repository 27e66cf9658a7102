package check

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestChartArrivalsSwitch: arrivals.enabled=false turns the exporter's packet socket off (--no-arrivals.enabled);
// the default leaves the flag out, as deploy/base does; the schema takes a boolean only.
func TestChartArrivalsSwitch(t *testing.T) {
	args := func(vals map[string]any) []string {
		t.Helper()
		var ds appsv1.DaemonSet
		decode(t, find(t, mustRenderChart(t, vals), "DaemonSet", appName), &ds)
		return container(t, ds, "exporter").Args
	}
	if a := args(nil); slices.Contains(a, "--no-arrivals.enabled") {
		t.Errorf("the default chart turns the arrivals meter off: %q", a)
	}
	if a := args(values(t, "arrivals: {enabled: false}")); !slices.Contains(a, "--no-arrivals.enabled") {
		t.Errorf("arrivals.enabled=false leaves the arrivals meter on: %q", a)
	}
	if _, err := renderChart(t, values(t, `arrivals: {enabled: "no"}`)); err == nil {
		t.Error(`the schema accepts arrivals.enabled: "no"`)
	}
}
