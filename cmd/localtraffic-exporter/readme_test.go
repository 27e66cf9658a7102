package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// usageFlags returns every flag of --help with its default as kingpin prints it ("" when none: a placeholder,
// an empty string or a bool), bool flags (--[no-]x) marked.
func usageFlags(t *testing.T) map[string]string {
	t.Helper()
	_, err := parseOptions([]string{"--help"}, func(string) string { return "" })
	var help errHelp
	if !errors.As(err, &help) {
		t.Fatalf("--help: %v", err)
	}
	flag := regexp.MustCompile(`^\s{2,6}(?:-\w, )?--(\[no-\])?([a-z0-9._-]+)(?:=(\S+))?`)
	flags := map[string]string{}
	for _, line := range strings.Split(help.usage, "\n") {
		m := flag.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		def := strings.Trim(m[3], `"`)
		if def == strings.ToUpper(def) { // a placeholder (KUBECONFIG), or none
			def = ""
		}
		flags[m[2]] = def
	}
	if len(flags) < 20 {
		t.Fatalf("found %d flags in --help:\n%s", len(flags), help.usage)
	}
	return flags
}

// TestReadmeFlagTable holds README.md's flag table to the exporter's flags: a row for every flag (the
// --collector.<name> switches are described below the table, as node_exporter's), no row for a flag that does
// not exist, and each default the README gives in backticks the flag's own.
func TestReadmeFlagTable(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `--([a-z0-9._-]+)` \\|([^|]*)\\|")
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows[m[1]] = strings.TrimSpace(m[2])
		}
	}
	flags := usageFlags(t)
	for name, def := range flags {
		if name == "help" || strings.HasPrefix(name, "collector.") {
			continue
		}
		cell, ok := rows[name]
		if !ok {
			t.Errorf("README.md's flag table has no row for --%s", name)
			continue
		}
		if def == "" {
			continue
		}
		if !defaultIn(cell, def) {
			t.Errorf("README.md gives --%s the default %q, the exporter %q", name, cell, def)
		}
	}
	for name := range rows {
		if _, ok := flags[name]; !ok {
			t.Errorf("README.md's flag table lists --%s, which the exporter does not have", name)
		}
	}
	if !strings.Contains(string(readme), "`--collector.<name>`/`--no-collector.<name>`") {
		t.Error("README.md does not describe the --collector.<name> switches")
	}
}

// defaultIn reports whether a README default cell names def in backticks: the same string, or the same duration
// (kingpin prints 2m0s for the README's 2m).
func defaultIn(cell, def string) bool {
	want, werr := time.ParseDuration(def)
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(cell, -1) {
		if m[1] == def {
			return true
		}
		if got, err := time.ParseDuration(m[1]); err == nil && werr == nil && got == want {
			return true
		}
	}
	return false
}
