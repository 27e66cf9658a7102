package check

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// instruction is one Dockerfile instruction as the BuildKit parser sees it.
type instruction struct {
	cmd   string   // lower-case keyword: from, arg, run, copy, ...
	args  []string // arguments (for a shell-form RUN: one string)
	flags []string // --from=..., --mount=...
	json  bool     // exec (JSON) form
	line  int
}

type stage struct {
	image, name string
	body        []instruction // everything after FROM
}

// parseDockerfile parses the repository's Dockerfile with BuildKit's own parser (what `docker build` runs) and
// splits it into stages. Parser warnings (e.g. empty continuation lines) fail the test: BuildKit prints them too.
func parseDockerfile(t *testing.T) []stage { return parseDockerfileNamed(t, "Dockerfile") }

// parseDockerfileNamed parses the named Dockerfile at the repository's root.
func parseDockerfileNamed(t *testing.T, name string) []stage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s line %d: %s", name, w.Location.Start.Line, w.Short)
	}
	var stages []stage
	for _, n := range res.AST.Children {
		in := instruction{cmd: strings.ToLower(n.Value), flags: n.Flags, json: n.Attributes["json"], line: n.StartLine}
		for a := n.Next; a != nil; a = a.Next {
			in.args = append(in.args, a.Value)
		}
		if in.cmd == "from" {
			s := stage{image: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "as") {
				s.name = in.args[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "arg" {
				t.Fatalf("%s line %d: %s before the first FROM", name, in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages
}

// TestDockerfileStages checks the shape: a golang build stage matching go.mod's Go version and a runtime stage
// on a pinned distroless-iptables that runs the binary the build stage produced.
func TestDockerfileStages(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (build, runtime)", len(stages))
	}
	build, runtime := stages[0], stages[1]

	goVersion := goDirective(t)
	m := regexp.MustCompile(`^golang:(\d+\.\d+)(\.\d+)?$`).FindStringSubmatch(build.image)
	if m == nil {
		t.Errorf("build stage image %q: want golang:<major.minor>[.patch]", build.image)
	} else if !strings.HasPrefix(goVersion+".", m[1]+".") {
		t.Errorf("build stage image %q does not match go.mod's go %s", build.image, goVersion)
	}
	if build.name == "" {
		t.Errorf("build stage has no name (FROM ... AS build)")
	}

	if !regexp.MustCompile(`^registry\.k8s\.io/build-image/distroless-iptables:v\d+\.\d+\.\d+(@sha256:[0-9a-f]{64})?$`).MatchString(runtime.image) {
		t.Errorf("runtime image %q: want registry.k8s.io/build-image/distroless-iptables pinned to a release tag", runtime.image)
	}
	var copied, entrypoint string
	for _, in := range runtime.body {
		switch in.cmd {
		case "copy":
			if !slices.Contains(in.flags, "--from="+build.name) || len(in.args) != 2 {
				t.Errorf("runtime stage line %d: only `COPY --from=%s <binary> <path>` belongs here", in.line, build.name)
				continue
			}
			copied = in.args[1]
		case "entrypoint":
			if !in.json || len(in.args) != 1 {
				t.Errorf("line %d: ENTRYPOINT must be the exec form with the binary alone (flags come from the DaemonSet)", in.line)
				continue
			}
			entrypoint = in.args[0]
		case "run":
			t.Errorf("runtime stage line %d: RUN cannot work on a distroless base (no shell)", in.line)
		}
	}
	if copied == "" || entrypoint != copied {
		t.Errorf("ENTRYPOINT %q is not the binary copied from the build stage (%q)", entrypoint, copied)
	}
}

// goDirective returns the `go` line of the root go.mod (e.g. "1.26.0").
func goDirective(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+(\.\d+)?)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("root go.mod has no go directive")
	}
	return string(m[1])
}

// buildArgs are the values the test passes for the Dockerfile's version ARGs (like --build-arg); the built
// binary must carry each of them.
var buildArgs = map[string]string{
	"VERSION":    "v9.8.7-dockerfile-test",
	"REVISION":   "0123456789abcdef0123456789abcdef01234567",
	"BRANCH":     "dockerfile-test",
	"BUILD_USER": "check@deploy",
	"BUILD_DATE": "20261130-12:00:00",
}

// versionVars maps each ARG to the github.com/prometheus/common/version variable it must set.
var versionVars = map[string]string{
	"VERSION":    "Version",
	"REVISION":   "Revision",
	"BRANCH":     "Branch",
	"BUILD_USER": "BuildUser",
	"BUILD_DATE": "BuildDate",
}

const versionPkg = "github.com/prometheus/common/version"

// TestDockerfileBuildStageCompiles runs the build stage without a Docker engine: it copies the build context
// through .dockerignore into a scratch root, then executes the stage's WORKDIR/ARG/ENV/COPY/RUN instructions in
// order with /bin/sh -c, as BuildKit would inside golang:<ver>. The binary must come out static, built from
// ./cmd/localtraffic-exporter with -trimpath and carry the version build args.
func TestDockerfileBuildStageCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiling the exporter takes a minute on a cold cache")
	}
	stages := parseDockerfile(t)
	build := stages[0]
	root := t.TempDir()
	buildCtx := filepath.Join(t.TempDir(), "context")
	copyContext(t, repoRoot(t), buildCtx)

	env := hostGoEnv(t)
	workdir := "/"
	declared := map[string]bool{}
	var goBuild string
	for _, in := range build.body {
		switch in.cmd {
		case "workdir":
			workdir = path.Join(workdir, in.args[0])
			if err := os.MkdirAll(filepath.Join(root, workdir), 0o755); err != nil {
				t.Fatal(err)
			}
		case "arg":
			for _, a := range in.args {
				name, def, _ := strings.Cut(a, "=")
				declared[name] = true
				if v, ok := buildArgs[name]; ok {
					def = v
				}
				env = append(env, name+"="+def)
			}
		case "env":
			for i := 0; i+1 < len(in.args); i += 2 {
				env = append(env, in.args[i]+"="+in.args[i+1])
			}
		case "copy":
			if len(in.flags) != 0 {
				t.Fatalf("line %d: COPY flags %v in the build stage are not simulated", in.line, in.flags)
			}
			dst := in.args[len(in.args)-1]
			if !path.IsAbs(dst) {
				dst = path.Join(workdir, dst)
			}
			for _, src := range in.args[:len(in.args)-1] {
				copyInto(t, filepath.Join(buildCtx, src), filepath.Join(root, dst), len(in.args) > 2 || strings.HasSuffix(in.args[len(in.args)-1], "/"))
			}
		case "run":
			for _, f := range in.flags {
				if !strings.HasPrefix(f, "--mount=type=cache") {
					t.Fatalf("line %d: RUN flag %s is not simulated", in.line, f)
				}
			}
			var cmd *exec.Cmd
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			if in.json {
				cmd = exec.CommandContext(ctx, in.args[0], in.args[1:]...)
			} else {
				cmd = exec.CommandContext(ctx, "/bin/sh", "-c", in.args[0])
				if strings.Contains(in.args[0], "scripts/build.sh") {
					goBuild = in.args[0]
				}
			}
			cmd.Dir = filepath.Join(root, workdir)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("Dockerfile line %d: RUN %s: %v\n%s", in.line, strings.Join(in.args, " "), err, out)
			}
		default:
			t.Fatalf("Dockerfile line %d: %s in the build stage is not simulated by this test", in.line, strings.ToUpper(in.cmd))
		}
	}
	for name := range buildArgs {
		if !declared[name] {
			t.Errorf("build stage does not declare ARG %s", name)
		}
	}
	if goBuild == "" {
		t.Fatal("build stage has no scripts/build.sh RUN")
	}

	// The runtime stage copies this file: it must exist now.
	var bin string
	for _, in := range stages[1].body {
		if in.cmd == "copy" {
			bin = filepath.Join(root, in.args[0])
		}
	}
	checkBinary(t, bin)
}

// checkBinary asserts what the image promises: a static executable of the exporter's command, -trimpath, and
// the version variables set from the build args (through -ldflags -X).
func checkBinary(t *testing.T, bin string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("read build info of %s: %v", bin, err)
	}
	if want := "github.com/localtraffic/localtraffic-exporter/cmd/localtraffic-exporter"; info.Path != want {
		t.Errorf("binary built from %s, want %s", info.Path, want)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		t.Errorf("CGO_ENABLED=%q, want 0", settings["CGO_ENABLED"])
	}
	if settings["-trimpath"] != "true" {
		t.Errorf("not built with -trimpath")
	}
	// -trimpath keeps -ldflags out of the build info, so ask the binary: --version prints
	// github.com/prometheus/common/version's variables, the ones localtraffic_build_info exports.
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	for arg := range versionVars {
		if !strings.Contains(string(out), buildArgs[arg]) {
			t.Errorf("%s --version does not show build arg %s=%q:\n%s", bin, arg, buildArgs[arg], out)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (has an ELF interpreter)", bin)
		}
	}
}

// hostGoEnv is the environment for simulated RUN lines: PATH reaches this go, and the host's module and
// build caches are reused so the test does not download or compile twice. GOTOOLCHAIN=local: the image's
// toolchain is what it is, it would not fetch another.
func hostGoEnv(t *testing.T) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	env := []string{
		"PATH=" + filepath.Dir(goBin) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + os.Getenv("HOME"),
		"GOTOOLCHAIN=local",
	}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GONOSUMDB", "GOPRIVATE", "GOSUMDB"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		if v := strings.TrimSpace(string(out)); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// copyContext copies the repository into dst minus what .dockerignore excludes, using the matcher BuildKit
// uses, so a pattern that drops a file the build needs fails here.
func copyContext(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(filepath.Join(src, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatalf("read .dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return os.MkdirAll(dst, 0o755)
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if excluded {
			if d.IsDir() && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil // sockets, symlinks: not part of a Go build
	})
	if err != nil {
		t.Fatalf("copy build context: %v", err)
	}
}

// copyInto implements COPY for a local source: a directory's contents, or a file into dst (a directory when
// intoDir, as for `COPY a b ./`).
func copyInto(t *testing.T, src, dst string, intoDir bool) {
	t.Helper()
	st, err := os.Stat(src)
	if err != nil {
		t.Fatalf("COPY source: %v (excluded by .dockerignore?)", err)
	}
	if !st.IsDir() {
		if intoDir {
			dst = filepath.Join(dst, filepath.Base(src))
		}
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
		return
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatalf("COPY %s: %v", src, err)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// TestBuildsUseOneScript: `make build` and the image's build stage build the exporter with scripts/build.sh,
// the same output name from the same package (the flags live in the script alone; TestDockerfileBuildStageCompiles
// and checkBinary prove what it produces).
func TestBuildsUseOneScript(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make not installed: %v", err)
	}
	const exporter = "scripts/build.sh bin/localtraffic-exporter ./cmd/localtraffic-exporter"
	var docker []string
	for _, in := range parseDockerfile(t)[0].body {
		if in.cmd == "run" && !in.json && strings.Contains(in.args[0], "go build") {
			t.Errorf("Dockerfile line %d runs go build itself: build with scripts/build.sh", in.line)
		}
		if in.cmd == "run" && !in.json && strings.Contains(in.args[0], "scripts/build.sh") {
			docker = append(docker, in.args[0])
		}
	}
	if len(docker) != 1 || !strings.HasSuffix(docker[0], exporter) {
		t.Errorf("Dockerfile build stage: %q, want one RUN ending in %q", docker, exporter)
	}
	cmd := exec.Command("make", "-n", "build")
	cmd.Dir = repoRoot(t)
	// Run as a top-level make whatever started the test: under `make check` the inherited MAKELEVEL makes a
	// sub-make print "Entering directory" lines, and MAKEFLAGS would carry the outer make's flags.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKELEVEL" && k != "MAKEFLAGS" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, stderr.Bytes())
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, "go build") {
			t.Errorf("make build runs go build itself: %q", l)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "scripts/build.sh bin/kubectl-localtraffic ./cmd/kubectl-localtraffic") ||
		!strings.HasSuffix(lines[1], exporter) {
		t.Errorf("make -n build:\n%s\nwant scripts/build.sh for the plugin, then the exporter", out)
	}
}
