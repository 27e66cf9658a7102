package e2e

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestReleaseSnapshot runs the release pipeline as `make release-snapshot` does — the same make target, the same
// .goreleaser.yaml, goreleaser and syft from scripts/install-deps.sh — with the targets narrowed to linux/amd64
// to keep CI short: about a minute with Go's build cache warm for linux/amd64, where the full matrix of
// `make release-snapshot` compiles every package for five more targets (32 CPU-minutes from a cold cache, measured
// on the 2-core machine). Then, as a user
// would: the checksums are the archives', each archive has its SBOM, krew's own validator accepts the manifest
// goreleaser wrote from the archives, krew installs the plugin from the built archive into a temporary krew
// root, and `kubectl localtraffic --version` (kubectl v1.37.2 finding the plugin on PATH) and the exporter's
// --version name the snapshot's version, commit and date.
func TestReleaseSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	mod, err := cluster.ModuleDir()
	if err != nil {
		fatalln(t, err)
	}
	repo := filepath.Dir(mod)
	tools := os.Getenv("LT_TOOLS_BIN")
	if tools == "" {
		tools = filepath.Join(repo, ".tools", "bin")
	}
	binDir, err := cluster.BinDir(ctx, "")
	if err != nil {
		fatalln(t, err)
	}
	kubectl := filepath.Join(binDir, "kubectl")

	// .goreleaser.yaml with every build narrowed to linux/amd64 and dist/ in a temporary directory.
	work := t.TempDir()
	dist := filepath.Join(work, "dist")
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(repo, ".goreleaser.yaml"))
	if err != nil {
		fatalln(t, err)
	}
	if err := sigsyaml.Unmarshal(b, &cfg); err != nil {
		fatalln(t, err)
	}
	for _, build := range cfg["builds"].([]any) {
		build.(map[string]any)["goos"] = []string{"linux"}
		build.(map[string]any)["goarch"] = []string{"amd64"}
	}
	cfg["dist"] = dist
	narrowed, err := sigsyaml.Marshal(cfg)
	if err != nil {
		fatalln(t, err)
	}
	config := filepath.Join(work, "goreleaser.yaml")
	if err := os.WriteFile(config, narrowed, 0o644); err != nil {
		fatalln(t, err)
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", repo, "release-snapshot", "GORELEASER_CONFIG="+config)
	out, err := cmd.CombinedOutput()
	if err != nil {
		fatalf(t, "make release-snapshot: %v\n%s", err, out)
	}
	t.Logf("make release-snapshot (linux/amd64) took %s", time.Since(start).Round(time.Second))

	var meta struct {
		Tag     string `json:"tag"`
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	readJSON(t, filepath.Join(dist, "metadata.json"), &meta)
	head := gitOutput(t, repo, "rev-parse", "HEAD")
	if meta.Commit != head || !strings.Contains(meta.Version, "-snapshot.") {
		fatalf(t, "metadata %+v: want a snapshot version of HEAD %s", meta, head)
	}
	archives := map[string]string{ // binary -> archive
		"localtraffic-exporter": filepath.Join(dist, "localtraffic-exporter_"+meta.Version+"_linux_amd64.tar.gz"),
		"kubectl-localtraffic":  filepath.Join(dist, "kubectl-localtraffic_"+meta.Version+"_linux_amd64.tar.gz"),
	}

	// checksums.txt: every archive, with its real sha256.
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		fatalln(t, err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			sums[fields[1]] = fields[0]
		}
	}
	f.Close()
	for bin, a := range archives {
		if got, want := sha256File(t, a), sums[filepath.Base(a)]; got != want {
			errorf(t, "%s: sha256 %s, checksums.txt says %q", filepath.Base(a), got, want)
		}
		// An SPDX SBOM per archive that lists the modules compiled into the binary.
		var sbom struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct {
				Name string `json:"name"`
			} `json:"packages"`
		}
		readJSON(t, a+".sbom.json", &sbom)
		names := map[string]bool{}
		for _, p := range sbom.Packages {
			names[p.Name] = true
		}
		for _, want := range []string{"k8s.io/client-go", "github.com/prometheus/common"} {
			if !strings.HasPrefix(sbom.SPDXVersion, "SPDX-2.") || !names[want] {
				errorf(t, "%s.sbom.json: %s, %d packages, %s listed %v", filepath.Base(a), sbom.SPDXVersion, len(sbom.Packages), want, names[want])
			}
		}
		// The archive holds the binary and the licence.
		files := untar(t, a, filepath.Join(work, bin))
		for _, want := range []string{bin, "LICENSE"} {
			if !files[want] {
				errorf(t, "%s lacks %s: %v", filepath.Base(a), want, files)
			}
		}
	}

	// The krew manifest, written by goreleaser from the archive: krew's validator accepts it (and rejects a
	// broken copy: the check can fail), and its sha256 is the archive's.
	manifest := filepath.Join(dist, "krew", "localtraffic.yaml")
	validate := func(path string) ([]byte, error) {
		return exec.CommandContext(ctx, filepath.Join(tools, "validate-krew-manifest"), "-manifest", path, "-skip-install").CombinedOutput()
	}
	if out, err := validate(manifest); err != nil {
		fatalf(t, "validate-krew-manifest %s: %v\n%s", manifest, err, out)
	}
	m, err := os.ReadFile(manifest)
	if err != nil {
		fatalln(t, err)
	}
	var plugin struct {
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				URI    string `json:"uri"`
				Sha256 string `json:"sha256"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(m, &plugin); err != nil {
		fatalln(t, err)
	}
	plug := archives["kubectl-localtraffic"]
	if len(plugin.Spec.Platforms) != 1 || plugin.Spec.Platforms[0].Sha256 != sums[filepath.Base(plug)] ||
		plugin.Spec.Version != "v"+meta.Version ||
		plugin.Spec.Platforms[0].URI != "https://github.com/localtraffic/localtraffic-exporter/releases/download/"+meta.Tag+"/"+filepath.Base(plug) {
		errorf(t, "krew manifest %+v: want version v%s and %s with its sha256 from the release of %s", plugin.Spec, meta.Version, filepath.Base(plug), meta.Tag)
	}
	broken := filepath.Join(work, "broken", "localtraffic.yaml")
	if err := os.MkdirAll(filepath.Dir(broken), 0o755); err != nil {
		fatalln(t, err)
	}
	if err := os.WriteFile(broken, []byte(strings.Replace(string(m), "sha256: ", "sha256: x", 1)), 0o644); err != nil {
		fatalln(t, err)
	}
	if out, err := validate(broken); err == nil {
		errorf(t, "validate-krew-manifest accepts a malformed sha256:\n%s", out)
	}

	// krew installs the plugin from the built archive (the manifest's sha256 must match it) into a temporary
	// krew root; kubectl finds it on PATH.
	krewRoot := filepath.Join(work, "krew")
	path := filepath.Join(work, "path")
	if err := os.MkdirAll(path, 0o755); err != nil {
		fatalln(t, err)
	}
	for name, target := range map[string]string{"kubectl": kubectl, "kubectl-krew": filepath.Join(tools, "krew")} {
		if err := os.Symlink(target, filepath.Join(path, name)); err != nil {
			fatalln(t, err)
		}
	}
	env := append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1", "KUBECONFIG="+filepath.Join(work, "no-kubeconfig"),
		"PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+path+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			fatalf(t, "kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("krew", "install", "--manifest="+manifest, "--archive="+plug)
	if _, err := os.Stat(filepath.Join(krewRoot, "store", "localtraffic", "v"+meta.Version, "LICENSE")); err != nil {
		errorf(t, "krew did not install the licence (krew-index requires it): %v", err)
	}
	committed, err := time.Parse(time.RFC3339, gitOutput(t, repo, "show", "-s", "--format=%cI", "HEAD"))
	if err != nil {
		fatalln(t, err)
	}
	date := committed.UTC().Format(time.RFC3339) // goreleaser's {{ .CommitDate }}
	version := run("localtraffic", "--version")
	exporter, err := exec.CommandContext(ctx, filepath.Join(work, "localtraffic-exporter", "localtraffic-exporter"), "--version").CombinedOutput()
	if err != nil {
		fatalf(t, "localtraffic-exporter --version: %v\n%s", err, exporter)
	}
	for name, out := range map[string]string{"kubectl-localtraffic": version, "localtraffic-exporter": string(exporter)} {
		for _, want := range []string{name + ", version " + meta.Version + " ", "revision: " + head, "build date:       " + date, "platform:         linux/amd64"} {
			if !strings.Contains(out, want) {
				errorf(t, "%s --version lacks %q:\n%s", name, want, out)
			}
		}
	}
	t.Logf("kubectl localtraffic --version, installed by krew:\n%s", version)
}

func gitOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		fatalf(t, "git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		fatalln(t, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		fatalf(t, "%s: %v", path, err)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		fatalln(t, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		fatalln(t, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// untar extracts a .tar.gz into dir and returns the names of its regular files.
func untar(t *testing.T, archive, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		fatalln(t, err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		fatalln(t, err)
	}
	tr := tar.NewReader(gz)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			fatalln(t, err)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "..") || strings.Contains(h.Name, "/") {
			continue
		}
		files[h.Name] = true
		out, err := os.OpenFile(filepath.Join(dir, h.Name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o755)
		if err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				fatalln(t, err)
			}
			if out, err = os.OpenFile(filepath.Join(dir, h.Name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o755); err != nil {
				fatalln(t, err)
			}
		}
		if _, err := io.Copy(out, tr); err != nil {
			fatalln(t, err)
		}
		out.Close()
	}
}
