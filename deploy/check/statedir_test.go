package check

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// chartExporter renders the chart with the values doc and returns the DaemonSet's pod spec and its exporter
// container.
func chartExporter(t *testing.T, doc string) (pod, exporter map[string]any) {
	t.Helper()
	ds := comparable(t, mustRenderChart(t, values(t, doc)))["DaemonSet "+namespace+"/"+appName]
	pod = dig(ds, "spec", "template", "spec").(map[string]any)
	return pod, pod["containers"].([]any)[0].(map[string]any)
}

// TestChartStateDir: stateDir moves the exporter's state file (the hostPath, its mount and --state.file
// together), "" runs without one, and the schema takes only an absolute directory.
func TestChartStateDir(t *testing.T) {
	args := func(c map[string]any) []string {
		var out []string
		for _, a := range c["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}

	pod, c := chartExporter(t, "stateDir: /data/localtraffic")
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

	pod, c = chartExporter(t, `stateDir: ""`)
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

// TestChartCiliumSocket: cilium.socketDir mounts the Cilium agent's socket directory read-only (a hostPath that
// must exist) and passes --dataplane.cilium-socket in it; "" (the default) mounts and reads nothing; the schema
// takes only an absolute directory.
func TestChartCiliumSocket(t *testing.T) {
	has := func(c map[string]any, prefix string) []string {
		var out []string
		for _, a := range c["args"].([]any) {
			if strings.HasPrefix(a.(string), prefix) {
				out = append(out, a.(string))
			}
		}
		return out
	}

	pod, c := chartExporter(t, "stateDir: \"\"\ncilium: {socketDir: /run/cilium}")
	want := []any{map[string]any{"name": "cilium-socket", "hostPath": map[string]any{"path": "/run/cilium", "type": "Directory"}}}
	if !reflect.DeepEqual(pod["volumes"], want) {
		t.Errorf("volumes %v, want %v", pod["volumes"], want)
	}
	if m := fmt.Sprint(c["volumeMounts"]); m != "[map[mountPath:/run/cilium name:cilium-socket readOnly:true]]" {
		t.Errorf("volumeMounts %s: want the socket's directory read-only at the same path", m)
	}
	if a := has(c, "--dataplane.cilium-socket"); !slices.Equal(a, []string{"--dataplane.cilium-socket=/run/cilium/cilium.sock"}) {
		t.Errorf("args %v: want --dataplane.cilium-socket in the mounted directory", a)
	}

	pod, c = chartExporter(t, "")
	if a := has(c, "--dataplane.cilium-socket"); len(a) != 0 {
		t.Errorf("defaults: args %v, want Cilium's socket not read", a)
	}
	if v := fmt.Sprint(pod["volumes"]); strings.Contains(v, "cilium") {
		t.Errorf("defaults: volumes %s, want no Cilium socket mounted", v)
	}

	for _, bad := range []string{"cilium: {socketDir: var/run/cilium}", "cilium: {socketDir: /var/run/cilium/}", "cilium: {socket: /x}"} {
		if _, err := renderChart(t, values(t, bad)); err == nil || !strings.Contains(err.Error(), "cilium") {
			t.Errorf("%s: rendered (%v), want the schema to reject it", bad, err)
		}
	}
}
