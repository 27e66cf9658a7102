package main

import (
	"strings"
	"testing"

	"github.com/prometheus/common/version"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

// invokePlugin runs the plugin, every verb composed as main composes them, with no apiserver objects.
func invokePlugin(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	return clitest.Invoke(t, verbs(), "", nil, false, nil, args...)
}

// --version reports the version, the commit and the build date, as the exporter's does; exit 0, stdout only.
func TestVersion(t *testing.T) {
	clitest.SetVersion(t, "1.2.3")
	keep := [2]string{version.Revision, version.BuildDate}
	version.Revision, version.BuildDate = "0123456789abcdef", "2026-12-01T10:00:00Z"
	t.Cleanup(func() { version.Revision, version.BuildDate = keep[0], keep[1] })
	r := invokePlugin(t, "--version")
	for _, want := range []string{"kubectl-localtraffic, version 1.2.3 ", "revision: 0123456789abcdef", "build date:       2026-12-01T10:00:00Z", "go version:"} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("--version output lacks %q:\n%s", want, r.Out)
		}
	}
	if r.Code != 0 || r.ErrOut != "" {
		t.Errorf("exit %d, stderr %q", r.Code, r.ErrOut)
	}
}

// An unknown command is bad input: one line on stderr, exit 2, nothing on stdout.
func TestUnknownCommand(t *testing.T) {
	clitest.CheckBadInput(t, invokePlugin(t, "frobnicate"), "unknown command")
}

// Every command's help shows examples and its column of the exit status table (docs/audit.md's, which
// TestExitStatusTableIsTheDocs holds to the code).
func TestEveryCommandHelp(t *testing.T) {
	for _, cmd := range []string{"status", "audit", "drain-check"} {
		r := invokePlugin(t, cmd, "--help")
		if r.Code != cli.ExitClean || !strings.Contains(r.Out, "Examples:\n  kubectl localtraffic "+cmd) {
			t.Errorf("%s --help: exit %d, no examples:\n%s", cmd, r.Code, r.Out)
		}
		if !strings.Contains(r.Out, strings.TrimSpace(cli.ExitHelp(cmd))) {
			t.Errorf("%s --help: no exit status table:\n%s", cmd, r.Out)
		}
	}
}
