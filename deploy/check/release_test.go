package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// The release pipeline's static checks: .goreleaser.yaml builds what the Makefile and the Dockerfile build, names
// the image the manifests deploy, and the tag workflow runs it. e2e/release_test.go runs the pipeline itself.

// goreleaserConfig is the part of .goreleaser.yaml these tests read.
type goreleaserConfig struct {
	ProjectName string `json:"project_name"`
	Builds      []struct {
		ID      string   `json:"id"`
		Main    string   `json:"main"`
		Binary  string   `json:"binary"`
		Goos    []string `json:"goos"`
		Goarch  []string `json:"goarch"`
		Flags   []string `json:"flags"`
		Ldflags []string `json:"ldflags"`
	} `json:"builds"`
	Archives []struct {
		IDs   []string `json:"ids"`
		Files []string `json:"files"`
	} `json:"archives"`
	Sboms []struct {
		Artifacts string `json:"artifacts"`
	} `json:"sboms"`
	Krews []struct {
		Name        string   `json:"name"`
		IDs         []string `json:"ids"`
		URLTemplate string   `json:"url_template"`
	} `json:"krews"`
	DockersV2 []struct {
		IDs        []string `json:"ids"`
		Dockerfile string   `json:"dockerfile"`
		Images     []string `json:"images"`
		Tags       []string `json:"tags"`
		Platforms  []string `json:"platforms"`
	} `json:"dockers_v2"`
	Release struct {
		GitHub struct{ Owner, Name string } `json:"github"`
	} `json:"release"`
}

func readGoreleaser(t *testing.T) goreleaserConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c goreleaserConfig
	if err := sigsyaml.Unmarshal(b, &c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	return c
}

// TestReleaseBuilds: the exporter for linux, the plugin for linux, darwin and windows, each on amd64 and arm64,
// with -trimpath and every version variable of `make build` (version, revision, branch, build user, date).
func TestReleaseBuilds(t *testing.T) {
	c := readGoreleaser(t)
	want := map[string][]string{
		"localtraffic-exporter": {"linux"},
		"kubectl-localtraffic":  {"darwin", "linux", "windows"},
	}
	var makeVars []string
	for _, v := range versionVars {
		makeVars = append(makeVars, versionPkg+"."+v)
	}
	slices.Sort(makeVars)
	for _, b := range c.Builds {
		goos, ok := want[b.ID]
		if !ok {
			t.Errorf("unexpected build %s", b.ID)
			continue
		}
		delete(want, b.ID)
		if b.Binary != b.ID || b.Main != "./cmd/"+b.ID {
			t.Errorf("build %s: binary %s from %s, want %s from ./cmd/%s", b.ID, b.Binary, b.Main, b.ID, b.ID)
		}
		if got := slices.Sorted(slices.Values(b.Goos)); !slices.Equal(got, goos) {
			t.Errorf("build %s: goos %v, want %v", b.ID, got, goos)
		}
		if got := slices.Sorted(slices.Values(b.Goarch)); !slices.Equal(got, []string{"amd64", "arm64"}) {
			t.Errorf("build %s: goarch %v, want amd64 and arm64", b.ID, got)
		}
		if !slices.Contains(b.Flags, "-trimpath") {
			t.Errorf("build %s: no -trimpath", b.ID)
		}
		var vars []string
		for _, l := range b.Ldflags {
			if m := regexp.MustCompile(`^-X ([^=]+)=.`).FindStringSubmatch(l); m != nil {
				vars = append(vars, m[1])
			}
		}
		slices.Sort(vars)
		if !slices.Equal(vars, makeVars) {
			t.Errorf("build %s: -X variables %v, want make build's %v", b.ID, vars, makeVars)
		}
	}
	for id := range want {
		t.Errorf("no build %s", id)
	}
	// An archive per build, each with the licence; an SBOM per archive; the krew manifest from the plugin's.
	for _, a := range c.Archives {
		if !slices.Contains(a.Files, "LICENSE") {
			t.Errorf("archive %v lacks LICENSE", a.IDs)
		}
	}
	if len(c.Archives) != 2 || len(c.Sboms) != 1 || c.Sboms[0].Artifacts != "archive" {
		t.Errorf("archives %d (want 2), sboms %+v (want one, of the archives)", len(c.Archives), c.Sboms)
	}
	if len(c.Krews) != 1 || c.Krews[0].Name != "localtraffic" || !slices.Equal(c.Krews[0].IDs, []string{"kubectl-localtraffic"}) ||
		!strings.HasPrefix(c.Krews[0].URLTemplate, "https://github.com/"+c.Release.GitHub.Owner+"/"+c.Release.GitHub.Name+"/releases/download/{{ .Tag }}/") {
		t.Errorf("krews %+v: want the plugin's archives, downloaded from the GitHub release %+v", c.Krews, c.Release.GitHub)
	}
}

// TestReleaseImage: the image goreleaser pushes is the one deploy/base and the chart deploy (name, and the tag
// is the release tag, which scripts/release-version.sh keeps equal to theirs), for both architectures, and
// Dockerfile.release is the Dockerfile's runtime stage with the prebuilt binary.
func TestReleaseImage(t *testing.T) {
	c := readGoreleaser(t)
	if len(c.DockersV2) != 1 {
		t.Fatalf("dockers_v2 has %d images, want 1", len(c.DockersV2))
	}
	d := c.DockersV2[0]
	kustomization := readYAML[struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}](t, "deploy/base/kustomization.yaml")
	values := readYAML[struct {
		Image struct{ Registry, Repository string } `json:"image"`
	}](t, chartDir+"/values.yaml")
	if len(kustomization.Images) != 1 || !slices.Equal(d.Images, []string{kustomization.Images[0].NewName}) ||
		values.Image.Registry+"/"+values.Image.Repository != kustomization.Images[0].NewName {
		t.Errorf("image: goreleaser %v, deploy/base %+v, chart %+v: want one name", d.Images, kustomization.Images, values.Image)
	}
	if !slices.Equal(d.Tags, []string{"{{ .Tag }}"}) || !slices.Equal(d.IDs, []string{"localtraffic-exporter"}) ||
		!slices.Equal(slices.Sorted(slices.Values(d.Platforms)), []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("dockers_v2 %+v: want the exporter's binaries, tagged with the release tag, for linux/amd64 and linux/arm64", d)
	}

	release := parseDockerfileNamed(t, d.Dockerfile)
	runtime := parseDockerfile(t)[1]
	if len(release) != 1 || release[0].image != runtime.image {
		t.Fatalf("%s: %d stages on %v, want one on the Dockerfile's runtime image %s", d.Dockerfile, len(release), release, runtime.image)
	}
	// Everything but the COPY is the runtime stage's, line for line; the COPY takes the platform's binary from
	// goreleaser's context (<os>/<arch>/<binary>) to where the Dockerfile puts it.
	var rel, src []string
	var copyRel, copySrc []string
	for _, in := range release[0].body {
		switch in.cmd {
		case "copy":
			copyRel = in.args
		case "arg":
			if !slices.Equal(in.args, []string{"TARGETPLATFORM"}) {
				t.Errorf("%s line %d: ARG %v", d.Dockerfile, in.line, in.args)
			}
		default:
			rel = append(rel, in.cmd+" "+strings.Join(in.args, " "))
		}
	}
	for _, in := range runtime.body {
		if in.cmd == "copy" {
			copySrc = in.args
			continue
		}
		src = append(src, in.cmd+" "+strings.Join(in.args, " "))
	}
	if !slices.Equal(rel, src) {
		t.Errorf("%s: %q, the Dockerfile's runtime stage: %q", d.Dockerfile, rel, src)
	}
	if len(copyRel) != 2 || copyRel[0] != "$TARGETPLATFORM/localtraffic-exporter" || len(copySrc) != 2 || copyRel[1] != copySrc[1] {
		t.Errorf("%s: COPY %v, want $TARGETPLATFORM/localtraffic-exporter to the Dockerfile's %v", d.Dockerfile, copyRel, copySrc)
	}
}

// TestReleaseWorkflow: on a tag, the workflow checks the tag against the repository's version, logs in to the
// image's registry, sets up buildx and runs `make release` (the pipeline of make release-snapshot, publishing),
// with the permissions to write the release and the package and the history for the changelog.
func TestReleaseWorkflow(t *testing.T) {
	type step struct {
		Uses string            `json:"uses"`
		Run  string            `json:"run"`
		With map[string]any    `json:"with"`
		Env  map[string]string `json:"env"`
	}
	wf := readYAML[struct {
		// YAML 1.1 (sigs.k8s.io/yaml) reads the key `on` as the boolean true.
		On struct {
			Push struct {
				Tags []string `json:"tags"`
			} `json:"push"`
		} `json:"true"`
		Permissions map[string]string `json:"permissions"`
		Jobs        map[string]struct {
			Steps []step `json:"steps"`
		} `json:"jobs"`
	}](t, ".github/workflows/release.yml")
	if !slices.Equal(wf.On.Push.Tags, []string{"v*.*.*"}) {
		t.Errorf("on.push.tags %v, want v*.*.*", wf.On.Push.Tags)
	}
	if wf.Permissions["contents"] != "write" || wf.Permissions["packages"] != "write" {
		t.Errorf("permissions %v: the release needs contents and packages write", wf.Permissions)
	}
	registry := strings.SplitN(readGoreleaser(t).DockersV2[0].Images[0], "/", 2)[0]
	var order []string
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			switch {
			case strings.HasPrefix(s.Uses, "actions/checkout@"):
				if s.With["fetch-depth"] != float64(0) {
					t.Errorf("checkout %v: fetch-depth 0 (the tags and history goreleaser reads)", s.With)
				}
				order = append(order, "checkout")
			case strings.HasPrefix(s.Uses, "docker/login-action@"):
				if s.With["registry"] != registry {
					t.Errorf("login to %v, the image is on %s", s.With["registry"], registry)
				}
				order = append(order, "login")
			case strings.HasPrefix(s.Uses, "docker/setup-buildx-action@"):
				order = append(order, "buildx")
			case strings.Contains(s.Run, "scripts/release-version.sh check \"$GITHUB_REF_NAME\""):
				order = append(order, "version")
			case strings.TrimSpace(s.Run) == "make release":
				if s.Env["GITHUB_TOKEN"] == "" {
					t.Error("make release without GITHUB_TOKEN")
				}
				order = append(order, "release")
			}
		}
	}
	if !slices.Equal(order, []string{"checkout", "version", "buildx", "login", "release"}) {
		t.Errorf("steps %v, want checkout, the version check, buildx, login, make release", order)
	}
	// make release and make release-snapshot run the same goreleaser, the snapshot without publishing or image.
	for target, want := range map[string]string{
		"release":          "goreleaser release --clean",
		"release-snapshot": "goreleaser release --snapshot --clean --skip=docker",
	} {
		out, err := exec.Command("make", "-C", repoRoot(t), "-n", target).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "scripts/install-deps.sh release") || !strings.Contains(string(out), want) {
			t.Errorf("make -n %s: %v\n%s\nwant install-deps.sh release and %q", target, err, out, want)
		}
	}
}

// TestReleaseVersion: every versioned reference of the install instructions names the chart's appVersion
// (scripts/release-version.sh check), and the check fails when one does not.
func TestReleaseVersion(t *testing.T) {
	root := repoRoot(t)
	script := filepath.Join(root, "scripts", "release-version.sh")
	if out, err := exec.Command(script, "check").CombinedOutput(); err != nil {
		t.Errorf("release-version.sh check: %v\n%s", err, out)
	}
	// A copy of the files it reads, with one README reference moved to another version.
	tmp := t.TempDir()
	for _, f := range []string{"scripts/release-version.sh", chartDir + "/Chart.yaml", chartDir + "/README.md",
		"deploy/base/kustomization.yaml", "README.md", "deploy/README.md", "docs/audit.md", "mixin/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	version, err := exec.Command(script, "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(version))
	readme := filepath.Join(tmp, "README.md")
	b, _ := os.ReadFile(readme)
	ref := "releases/download/" + v + "/"
	if !strings.Contains(string(b), ref) {
		t.Fatalf("README.md has no %s reference", ref)
	}
	if err := os.WriteFile(readme, []byte(strings.Replace(string(b), ref, "releases/download/v9.9.9/", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(tmp, "scripts", "release-version.sh"), "check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "README.md:v9.9.9") {
		t.Errorf("check passed a README naming v9.9.9 (%v):\n%s", err, out)
	}
	// set rewrites every reference, and the check passes for the new version (and not for the old one).
	if err := os.WriteFile(readme, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(tmp, "scripts", "release-version.sh"), "set", "v1.2.3").CombinedOutput(); err != nil {
		t.Errorf("set v1.2.3: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(tmp, "scripts", "release-version.sh"), "check", v).CombinedOutput(); err == nil {
		t.Errorf("after set v1.2.3, check %s passes:\n%s", v, out)
	}
}

// TestLicense: the LICENSE the chart's metadata names (Apache-2.0) is the file at the root, and the archives carry it.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "Apache License\n                           Version 2.0, January 2004") ||
		!strings.Contains(string(b), "END OF TERMS AND CONDITIONS") {
		t.Error("LICENSE is not the Apache License 2.0")
	}
	chart := readYAML[struct {
		Annotations map[string]string `json:"annotations"`
	}](t, chartDir+"/Chart.yaml")
	if chart.Annotations["artifacthub.io/license"] != "Apache-2.0" {
		t.Errorf("Chart.yaml licence %q", chart.Annotations["artifacthub.io/license"])
	}
}

// readYAML decodes a file of the repository.
func readYAML[T any](t *testing.T, rel string) T {
	t.Helper()
	var v T
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return v
}
