package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// promtool returns the pinned promtool, installing it with scripts/install-deps.sh when it is missing (a cached
// build: the first run takes a few minutes, later ones none). $PROMTOOL overrides.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	root := repoRoot(t)
	cmd := exec.Command(filepath.Join(root, "scripts", "install-deps.sh"), "promtool")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/install-deps.sh promtool: %v\n%s", err, out)
	}
	bin := os.Getenv("LT_TOOLS_BIN")
	if bin == "" {
		bin = filepath.Join(root, ".tools", "bin")
	}
	return filepath.Join(bin, "promtool")
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// promtool check rules: syntax, types, duplicate rules, and the linter.
func TestPromtoolCheckRules(t *testing.T) {
	out := runPromtool(t, append([]string{"check", "rules", "--lint-fatal"}, RuleFiles...)...)
	if strings.Contains(out, "WARNING") {
		t.Errorf("promtool check rules warns:\n%s", out)
	}
}

// promtool test rules: the unit tests in alerts/tests (firing and not-yet-firing cases, exact labels and
// annotations, recording rule values).
func TestPromtoolTestRules(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), RuleTestGlob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	runPromtool(t, append([]string{"test", "rules"}, files...)...)
}

// The shipped scrape configuration is a valid Prometheus configuration, together with the rule files. promtool checks
// that the token file exists: the ServiceAccount token's path in a pod is pointed at a file of the test's (the
// only change).
func TestPromtoolCheckScrapeConfig(t *testing.T) {
	root := repoRoot(t)
	shipped, err := os.ReadFile(filepath.Join(root, ScrapeConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	const podToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(shipped), "credentials_file: "+podToken); n != 1 {
		t.Fatalf("%s names the pod's ServiceAccount token %d times, want once (kube-rbac-proxy wants Prometheus' token)", ScrapeConfigPath, n)
	}
	scrape := []byte(strings.Replace(string(shipped), podToken, token, 1))
	var cfg strings.Builder
	cfg.WriteString("rule_files:\n")
	for _, f := range RuleFiles {
		cfg.WriteString("  - " + filepath.Join(root, f) + "\n")
	}
	cfg.Write(scrape)
	path := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "config", "--lint-fatal", path)
}
