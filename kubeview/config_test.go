package kubeview

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/apimachinery/pkg/labels"
)

// parseConfig parses args with the API view's flags alone, as the exporter parses them among its others.
func parseConfig(t *testing.T, env map[string]string, args ...string) (Config, error) {
	var c Config
	app := kingpin.New("t", "").Terminate(nil)
	c.RegisterFlags(app, func(k string) string { return env[k] })
	if _, err := app.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return c, c.Validate()
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(t, map[string]string{"NODE_NAME": "node-a"})
	want := Config{NodeName: "node-a", Announcers: true, CiliumNamespace: "kube-system"}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: %+v (error %v), want %+v", c, err, want)
	}
}

func TestConfigGoodValues(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(t, map[string]string{"NODE_NAME": "from-env"}, "--node-name", "n", "--kubeconfig", kubeconfig,
		"--no-announcers.enabled", "--announcers.cilium-namespace", "cilium")
	want := Config{Kubeconfig: kubeconfig, NodeName: "n", CiliumNamespace: "cilium"}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("%+v (error %v), want %+v", c, err, want)
	}
	// --services.ignore-selector is a label selector as kubectl reads one.
	if c, err = parseConfig(t, nil, "--node-name", "n", "--services.ignore-selector", "team in (legacy,batch),!localtraffic.io/watched"); err != nil {
		t.Fatal(err)
	}
	for lbls, match := range map[string]bool{"team=legacy": true, "team=batch,localtraffic.io/watched=yes": false, "team=web": false} {
		set, _ := labels.ConvertSelectorToLabelsMap(lbls)
		if c.IgnoreSelector.Matches(set) != match {
			t.Errorf("--services.ignore-selector %s: Matches(%s) = %v, want %v", c.IgnoreSelector, lbls, !match, match)
		}
	}
}

// TestConfigBadValues: the exporter prints these errors as they are, one line each.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no node name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)"},
		{[]string{"--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"}, "bad --kubeconfig: stat /nonexistent/kubeconfig: no such file or directory"},
		{[]string{"--node-name", "n", "--services.ignore-selector", "team in (a"},
			`bad --services.ignore-selector "team in (a": unable to parse requirement: found '', expected: ',' or ')'`},
		{[]string{"--node-name", "n", "--services.ignore-selector", ","},
			`bad --services.ignore-selector ",": found ',', expected: !, identifier, or 'end of string'`},
		{[]string{"--node-name", "n", "--services.ignore-selector", " "},
			`bad --services.ignore-selector " ": selects every Service; leave it out to ignore none`},
	} {
		if _, err := parseConfig(t, nil, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
