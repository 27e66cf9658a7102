package check

// The pipeline that tests before it publishes: the CI workflow runs .ci/run's checks, the release workflow requires
// it, every action is pinned by commit, one Go toolchain everywhere, keyless signatures with provenance, and release
// notes from CHANGELOG.md.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type workflow struct {
	On          map[string]any    `json:"true"` // YAML 1.1 reads the key `on` as true
	Permissions map[string]string `json:"permissions"`
	Jobs        map[string]struct {
		Uses  string   `json:"uses"`
		Needs []string `json:"needs"`
		Steps []struct {
			Uses string            `json:"uses"`
			Run  string            `json:"run"`
			With map[string]string `json:"with"`
		} `json:"steps"`
	} `json:"jobs"`
}

// TestWorkflowActionsPinnedByCommit: every `uses:` of every workflow is a local workflow or owner/repo@<commit>
// with the tag it stands for in a comment, so a moved tag cannot change what runs.
func TestWorkflowActionsPinnedByCommit(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), ".github", "workflows", "*.yml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows: %v %v", files, err)
	}
	uses := regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*(\S+)(.*)$`)
	pinned := regexp.MustCompile(`^[\w.-]+/[\w./-]+@[0-9a-f]{40}$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range uses.FindAllStringSubmatch(string(b), -1) {
			n++
			if strings.HasPrefix(m[1], "./.github/workflows/") {
				continue
			}
			if !pinned.MatchString(m[1]) || !regexp.MustCompile(`^\s+# v\d+\.\d+\.\d+$`).MatchString(m[2]) {
				t.Errorf("%s: uses: %s%s: want owner/repo@<40-hex commit> # vX.Y.Z", filepath.Base(f), m[1], m[2])
			}
		}
		if n == 0 {
			t.Errorf("%s uses no action", filepath.Base(f))
		}
	}
}

// TestCIWorkflow: pull requests, pushes and the release workflow's call run `make check` and `.ci/run` (as root),
// with the Go of go.mod's toolchain line; the release job needs that call, and may sign keyless.
func TestCIWorkflow(t *testing.T) {
	ci := readYAML[workflow](t, ".github/workflows/ci.yml")
	for _, ev := range []string{"pull_request", "push", "workflow_call"} {
		if _, ok := ci.On[ev]; !ok {
			t.Errorf("ci.yml does not run on %s", ev)
		}
	}
	var runs []string
	for name, j := range ci.Jobs {
		setupGo := false
		for _, s := range j.Steps {
			if strings.HasPrefix(s.Uses, "actions/setup-go@") {
				setupGo = s.With["go-version-file"] == "go.mod"
			}
			runs = append(runs, strings.TrimSpace(s.Run))
		}
		if !setupGo {
			t.Errorf("ci.yml job %s: no actions/setup-go with go-version-file: go.mod", name)
		}
	}
	for _, want := range []string{"make check", `sudo env "PATH=$PATH" .ci/run`} {
		if !slices.Contains(runs, want) {
			t.Errorf("ci.yml runs %q, not %q", runs, want)
		}
	}

	rel := readYAML[workflow](t, ".github/workflows/release.yml")
	var ciJob string
	for name, j := range rel.Jobs {
		if j.Uses == "./.github/workflows/ci.yml" {
			ciJob = name
		}
	}
	if ciJob == "" {
		t.Fatal("release.yml does not call ci.yml")
	}
	for name, j := range rel.Jobs {
		if name != ciJob && !slices.Contains(j.Needs, ciJob) {
			t.Errorf("release.yml job %s does not need %s: it could publish untested", name, ciJob)
		}
	}
	for perm, want := range map[string]string{"id-token": "write", "attestations": "write", "contents": "write", "packages": "write"} {
		if rel.Permissions[perm] != want {
			t.Errorf("release.yml permissions %s: %q, want %s", perm, rel.Permissions[perm], want)
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sigstore/cosign-installer@", "actions/attest-build-provenance@", "make chart-push", "scripts/release-notes.sh \"$GITHUB_REF_NAME\""} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("release.yml lacks %s", want)
		}
	}
}

// TestReleaseSignsKeyless: goreleaser signs checksums.txt, the archives and the image with cosign and no key
// (keyless: the workflow's OIDC identity), and the image carries buildx's provenance attestation.
func TestReleaseSignsKeyless(t *testing.T) {
	cfg := readYAML[struct {
		Signs []struct {
			Cmd       string   `json:"cmd"`
			Artifacts string   `json:"artifacts"`
			Args      []string `json:"args"`
		} `json:"signs"`
		DockerSigns []struct {
			Cmd  string   `json:"cmd"`
			Args []string `json:"args"`
		} `json:"docker_signs"`
		DockersV2 []struct {
			Flags []string `json:"flags"`
		} `json:"dockers_v2"`
	}](t, ".goreleaser.yaml")
	signed := map[string]bool{}
	keyless := func(args []string) bool {
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--key") })
	}
	for _, s := range cfg.Signs {
		if s.Cmd == "cosign" && keyless(s.Args) && slices.Contains(s.Args, "sign-blob") {
			signed[s.Artifacts] = true
		}
	}
	if !signed["checksum"] || !signed["archive"] {
		t.Errorf("signs %+v: want cosign sign-blob, keyless, of checksum and archive", cfg.Signs)
	}
	if len(cfg.DockerSigns) == 0 || cfg.DockerSigns[0].Cmd != "cosign" || !keyless(cfg.DockerSigns[0].Args) {
		t.Errorf("docker_signs %+v: want cosign, keyless", cfg.DockerSigns)
	}
	if len(cfg.DockersV2) == 0 || !slices.ContainsFunc(cfg.DockersV2[0].Flags, func(f string) bool { return strings.HasPrefix(f, "--attest=type=provenance") }) {
		t.Errorf("dockers_v2 flags %v: want --attest=type=provenance", cfg.DockersV2)
	}
	out, err := exec.Command("make", "-C", repoRoot(t), "-n", "release-snapshot").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--skip=docker,sign") {
		t.Errorf("make -n release-snapshot: %v\n%s\nwant --skip=docker,sign (no identity to sign with offline)", err, out)
	}
	out, err = exec.Command("make", "-C", repoRoot(t), "-n", "release", "VERSION=v9.9.9").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "scripts/release-notes.sh v9.9.9") || !strings.Contains(string(out), "--release-notes") {
		t.Errorf("make -n release: %v\n%s\nwant the notes of CHANGELOG.md passed as --release-notes", err, out)
	}
}

// goToolchain is the Go a go.mod or go.work selects: its toolchain line, else its go line.
func goToolchain(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	t.Fatalf("%s has no go line", rel)
	return ""
}

// TestOneGoToolchain: the root module pins its toolchain (a patched release, not the go line's .0), and every
// module of the repository, the workspace and the Dockerfile's build stage select that same Go. The modules under
// e2e/tools build upstream binaries (etcd, Kubernetes, kube-rbac-proxy) for the e2e harness only, with whatever Go
// runs the harness, and their go.mod is their cache key: they are left as they are.
func TestOneGoToolchain(t *testing.T) {
	root, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^toolchain go\d+\.\d+\.\d+$`).Match(root) {
		t.Fatal("go.mod has no toolchain line")
	}
	want := goToolchain(t, "go.mod")
	out, err := exec.Command("git", "-C", repoRoot(t), "ls-files", "go.work", "*go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "e2e/tools/") {
			continue
		}
		n++
		if got := goToolchain(t, f); got != want {
			t.Errorf("%s selects Go %s, go.mod's toolchain is %s", f, got, want)
		}
	}
	if n < 5 {
		t.Errorf("found %d modules and workspaces: %s", n, out)
	}
	build := parseDockerfile(t)[0]
	if build.image != "golang:"+want {
		t.Errorf("the Dockerfile builds with %s, go.mod's toolchain is go%s", build.image, want)
	}
}

// TestChangelog: CHANGELOG.md is in Keep a Changelog's shape, and scripts/release-notes.sh prints a version's
// section (what make release hands goreleaser) and refuses a version without one.
func TestChangelog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.HasPrefix(text, "# Changelog\n") || !strings.Contains(text, "https://keepachangelog.com/") {
		t.Error("CHANGELOG.md does not start as Keep a Changelog does")
	}
	version := regexp.MustCompile(`^## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$`)
	kinds := []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
	var versions []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			m := version.FindStringSubmatch(line)
			if m == nil || (m[1] == "Unreleased") != (m[2] == "") {
				t.Errorf("CHANGELOG.md heading %q: want ## [Unreleased] or ## [X.Y.Z] - YYYY-MM-DD", line)
				continue
			}
			versions = append(versions, m[1])
		case strings.HasPrefix(line, "### ") && !slices.Contains(kinds, strings.TrimPrefix(line, "### ")):
			t.Errorf("CHANGELOG.md section %q: want one of %v", line, kinds)
		}
	}
	if len(versions) == 0 || versions[0] != "Unreleased" {
		t.Errorf("CHANGELOG.md versions %v: want [Unreleased] first", versions)
	}

	// release-notes.sh on a copy whose Unreleased section became 9.9.9.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "release-notes.sh"))
	if err != nil {
		t.Fatal(err)
	}
	released := strings.Replace(text, "## [Unreleased]", "## [Unreleased]\n\n## [9.9.9] - 2026-12-03", 1)
	if err := os.WriteFile(filepath.Join(dir, "scripts", "release-notes.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte(released), 0o644); err != nil {
		t.Fatal(err)
	}
	notes, err := exec.Command(filepath.Join(dir, "scripts", "release-notes.sh"), "v9.9.9").Output()
	if err != nil {
		t.Fatalf("release-notes.sh v9.9.9: %v", err)
	}
	if !bytes.HasPrefix(notes, []byte("The first release")) || bytes.Contains(notes, []byte("## [")) || !bytes.Contains(notes, []byte("### Added")) {
		t.Errorf("release-notes.sh v9.9.9 printed:\n%s\nwant the section's body alone", notes)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(dir, "scripts", "release-notes.sh"), "v9.9.8")
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err == nil || len(out) != 0 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Errorf("release-notes.sh v9.9.8 (no section): %v, stdout %q, stderr %q: want one line and a failure", err, out, stderr.String())
	}
}

// TestWorkflowStepsRunTheRepositorysCommands: every `run:` step of every workflow is one command of the
// repository — a Make target the Makefile defines, a script under scripts/, or .ci/run — so a workflow runs what
// .ci/run and a contributor run, never an inline copy that drifts from them.
func TestWorkflowStepsRunTheRepositorysCommands(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), ".github", "workflows", "*.yml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows: %v %v", files, err)
	}
	makefile, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	command := regexp.MustCompile(`^(?:sudo env "PATH=\$PATH" )?(make ([\w-]+)|(scripts/[\w.-]+|\.ci/run)(?: [\w"$-]+)*(?: >/dev/null)?)$`)
	runs := 0
	for _, f := range files {
		w := readYAML[workflow](t, filepath.Join(".github", "workflows", filepath.Base(f)))
		for name, j := range w.Jobs {
			for _, s := range j.Steps {
				if s.Run == "" {
					continue
				}
				runs++
				m := command.FindStringSubmatch(strings.TrimSpace(s.Run))
				switch {
				case m == nil:
					t.Errorf("%s job %s runs %q: want one make target or script of the repository", filepath.Base(f), name, s.Run)
				case m[2] != "":
					if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[2]) + `:`).Match(makefile) {
						t.Errorf("%s job %s runs make %s, which the Makefile does not define", filepath.Base(f), name, m[2])
					}
				default:
					if _, err := os.Stat(filepath.Join(repoRoot(t), m[3])); err != nil {
						t.Errorf("%s job %s runs %s: %v", filepath.Base(f), name, m[3], err)
					}
				}
			}
		}
	}
	if runs < 6 {
		t.Errorf("found %d run steps: the workflows are no longer read", runs)
	}
}
