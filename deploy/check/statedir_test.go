package check

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestChartStateDir: stateDir moves the exporter's state file (the hostPath, its mount and --state.file
// together), "" runs without one, and the schema takes only an absolute directory.
func TestChartStateDir(t *testing.T) {
	exporterOf := func(t *testing.T, doc string) (map[string]any, map[string]any) {
		t.Helper()
		ds := comparable(t, mustRenderChart(t, values(t, doc)))["DaemonSet "+namespace+"/"+appName]
		pod := dig(ds, "spec", "template", "spec").(map[string]any)
		return pod, pod["containers"].([]any)[0].(map[string]any)
	}
	args := func(c map[string]any) []string {
		var out []string
		for _, a := range c["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}

	pod, c := exporterOf(t, "stateDir: /data/localtraffic")
	want := []any{map[string]any{"name": "state", "hostPath": map[string]any{"path": "/data/localtraffic", "type": "DirectoryOrCreate"}}}
	if !reflect.DeepEqual(pod["volumes"], want) {
		t.Errorf("volumes %v, want %v", pod["volumes"], want)
	}
	if m := fmt.Sprint(c["volumeMounts"]); m != "[map[mountPath:/data/localtraffic name:state]]" {
		t.Errorf("volumeMounts %s: want the state directory at the same path", m)
	}
	if a := args(c); !slices.Contains(a, "--state.file=/data/localtraffic/state.json") {
		t.Errorf("args %v: want --state.file in the state directory", a)
	}

	pod, c = exporterOf(t, `stateDir: ""`)
	if pod["volumes"] != nil || c["volumeMounts"] != nil {
		t.Errorf("stateDir empty: volumes %v, mounts %v, want none", pod["volumes"], c["volumeMounts"])
	}
	if a := args(c); !slices.Contains(a, "--state.file=") {
		t.Errorf("stateDir empty: args %v, want --state.file= (none; not the binary's default path, which is not mounted)", a)
	}

	for _, bad := range []string{"stateDir: var/lib/x", "stateDir: /var/lib/x/"} {
		if _, err := renderChart(t, values(t, bad)); err == nil || !strings.Contains(err.Error(), "/stateDir") {
			t.Errorf("%s: rendered (%v), want the schema to reject it", bad, err)
		}
	}
}
