package check

// The chart README's values table against the chart's values as `helm show values` prints them (helm's own show
// action): every value has a row, every row names values that exist.

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	sigsyaml "sigs.k8s.io/yaml"
)

// valuePaths flattens values into dotted paths: a map with keys is walked into, anything else (a scalar, a list,
// an empty map such as commonLabels) is a leaf. Maps are listed too, so a row may name a whole map (resources).
func valuePaths(prefix string, v any, paths map[string]bool) {
	m, ok := v.(map[string]any)
	if prefix != "" {
		paths[prefix] = !ok || len(m) == 0
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		valuePaths(p, sub, paths)
	}
}

// readmeValueRows returns the values the chart README's table names in its first column: `a.b.c`, and `.d` for
// a value beside the row's first name (`image.registry`, `.tag` is image.tag; `updateStrategy.type`,
// `.rollingUpdate.maxSurge` is updateStrategy.rollingUpdate.maxSurge).
func readmeValueRows(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("`([.a-zA-Z][a-zA-Z0-9.]*)`")
	var named []string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| value | default | what |"):
			in = true
			continue
		case in && !strings.HasPrefix(line, "|"):
			in = false
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		first := strings.SplitN(strings.TrimPrefix(line, "|"), "|", 2)[0]
		parent := ""
		for i, m := range name.FindAllStringSubmatch(first, -1) {
			n := m[1]
			switch {
			case i == 0 && strings.Contains(n, "."):
				parent = n[:strings.LastIndex(n, ".")]
			case strings.HasPrefix(n, "."):
				if parent == "" {
					t.Errorf("chart README row %q: %s follows no dotted name", first, n)
				}
				n = parent + n
			}
			named = append(named, n)
		}
	}
	if len(named) == 0 {
		t.Fatal("the chart README has no values table")
	}
	return named
}

// TestChartReadmeValuesTable: each value `helm show values` prints is named in the chart README's table, itself or
// through the map holding it, and the table names no value the chart does not have. `helm show values` prints
// values.yaml as it is: that is checked too, so the table, the file and helm's output are one list.
func TestChartReadmeValuesTable(t *testing.T) {
	shown, err := action.NewShow(action.ShowValues).Run(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatalf("helm show values: %v", err)
	}
	file, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(shown) != strings.TrimSpace(string(file)) {
		t.Error("helm show values differs from values.yaml")
	}
	var vals map[string]any
	if err := sigsyaml.Unmarshal([]byte(shown), &vals); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	valuePaths("", vals, paths)
	named := readmeValueRows(t)
	covered := func(p string) bool {
		for _, n := range named {
			if p == n || strings.HasPrefix(p, n+".") {
				return true
			}
		}
		return false
	}
	var missing []string
	for p, leaf := range paths {
		if leaf && !covered(p) {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf("the chart README's values table has no row for %s", p)
	}
	for _, n := range named {
		if _, ok := paths[n]; !ok {
			t.Errorf("the chart README's values table names %s, which values.yaml does not have", n)
		}
	}
}
