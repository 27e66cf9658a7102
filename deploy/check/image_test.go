package check

// Your own image: `make image`/`make image-load` (scripts/image.sh), the overlay deploy/overlays/own-image and the
// chart's image values, held to the README's own-build lines so that one name (registry, repository, tag) goes
// through the build, the kustomize install and the Helm install alike.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// baseImagePlatforms are the platforms of the runtime stage's base, registry.k8s.io/build-image/distroless-iptables:
// kube-proxy's server platforms (k8s.io/kubernetes hack/lib/golang.sh, KUBE_SUPPORTED_SERVER_PLATFORMS).
var baseImagePlatforms = []string{"linux/amd64", "linux/arm64", "linux/ppc64le", "linux/s390x"}

// ownBuild is the name the README's own-build lines give: the make variables, the overlay's kustomize edit and
// Helm's --set values.
type ownBuild struct{ registry, repository, tag string }

func (b ownBuild) image() string { return b.registry + "/" + b.repository + ":" + b.tag }

// readmeOwnBuild parses the README's "Your own image" lines and requires each of them to name the same image.
func readmeOwnBuild(t *testing.T) ownBuild {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	one := func(re string) []string {
		t.Helper()
		m := regexp.MustCompile(re).FindAllStringSubmatch(text, -1)
		if len(m) == 0 {
			t.Fatalf("README.md has no line matching %s", re)
		}
		return m[0]
	}
	var builds []ownBuild
	for _, target := range []string{"image", "image-load"} {
		m := one(`(?m)^make ` + target + ` IMAGE_REGISTRY=(\S+) IMAGE_REPOSITORY=(\S+) IMAGE_TAG=(\S+)`)
		builds = append(builds, ownBuild{m[1], m[2], m[3]})
	}
	m := one(`kustomize edit set image ghcr\.io/localtraffic/localtraffic-exporter=([^/\s]+)/(\S+):([^\s)]+)\)`)
	builds = append(builds, ownBuild{m[1], m[2], m[3]})
	m = one(`--set image\.registry=([^,\s]+),image\.repository=([^,\s]+),image\.tag=(\S+)`)
	builds = append(builds, ownBuild{m[1], m[2], m[3]})
	for _, b := range builds[1:] {
		if b != builds[0] {
			t.Errorf("README.md's own-build lines name different images: %s and %s", builds[0].image(), b.image())
		}
	}
	if !strings.Contains(text, "kubectl apply -k deploy/overlays/own-image") {
		t.Error("README.md does not apply deploy/overlays/own-image")
	}
	return builds[0]
}

// TestOwnImageOverlay: deploy/overlays/own-image is deploy/base with the exporter's image replaced by the README's
// own build, and nothing else changed (kube-rbac-proxy's image included).
func TestOwnImageOverlay(t *testing.T) {
	want := readmeOwnBuild(t)
	base, own := render(t, "base"), render(t, "overlays/own-image")
	if len(base) != len(own) {
		t.Fatalf("the overlay renders %d objects, the base %d", len(own), len(base))
	}
	var baseDS, ownDS appsv1.DaemonSet
	decode(t, find(t, base, "DaemonSet", appName), &baseDS)
	decode(t, find(t, own, "DaemonSet", appName), &ownDS)
	if got := container(t, ownDS, "exporter").Image; got != want.image() {
		t.Errorf("the overlay's exporter image is %s, the README's own build %s", got, want.image())
	}
	if got, base := container(t, ownDS, "kube-rbac-proxy").Image, container(t, baseDS, "kube-rbac-proxy").Image; got != base {
		t.Errorf("the overlay changes kube-rbac-proxy's image to %s (base %s)", got, base)
	}
	ownDS.Spec.Template.Spec.Containers[0].Image = baseDS.Spec.Template.Spec.Containers[0].Image
	if !reflect.DeepEqual(baseDS, ownDS) {
		t.Error("the overlay's DaemonSet differs from the base's beyond the exporter's image")
	}
	for i := range base {
		if base[i].GetKind() == "DaemonSet" {
			continue
		}
		b, err := base[i].String()
		if err != nil {
			t.Fatal(err)
		}
		o, err := own[i].String()
		if err != nil {
			t.Fatal(err)
		}
		if b != o {
			t.Errorf("the overlay changes %s %s:\n%s\nbase:\n%s", own[i].GetKind(), own[i].GetName(), o, b)
		}
	}
}

// TestChartImageValues: Helm's --set image.registry,image.repository,image.tag of the README point the chart at
// the own build, and image.registry alone (a mirror) moves the release image there, tag and all.
func TestChartImageValues(t *testing.T) {
	want := readmeOwnBuild(t)
	exporterImage := func(vals map[string]any) string {
		t.Helper()
		var ds appsv1.DaemonSet
		decode(t, find(t, mustRenderChart(t, vals), "DaemonSet", appName), &ds)
		return container(t, ds, "exporter").Image
	}
	if got := exporterImage(map[string]any{"image": map[string]any{
		"registry": want.registry, "repository": want.repository, "tag": want.tag}}); got != want.image() {
		t.Errorf("--set image.registry=%s,image.repository=%s,image.tag=%s renders %s, want %s",
			want.registry, want.repository, want.tag, got, want.image())
	}
	release := exporterImage(nil)
	mirror := exporterImage(map[string]any{"image": map[string]any{"registry": want.registry}})
	if wantMirror := want.registry + "/" + strings.TrimPrefix(release, "ghcr.io/"); mirror != wantMirror {
		t.Errorf("--set image.registry=%s renders %s, want %s (the release image %s in that registry)", want.registry, mirror, wantMirror, release)
	}
}

// TestImageTargets: make image names the image from the version, scripts/image.sh builds every platform of the
// base image (amd64 and arm64 at least, none the base lacks), and without a container engine it says so in one
// line and exits non-zero.
func TestImageTargets(t *testing.T) {
	root := repoRoot(t)
	make := exec.Command("make", "-n", "image", "VERSION=v9.9.9")
	make.Dir = root
	out, err := make.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, out)
	}
	for _, want := range []string{"IMAGE_TAG=v9.9.9", "VERSION=v9.9.9", "scripts/image.sh build"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make -n image VERSION=v9.9.9 runs %q, without %s", out, want)
		}
	}

	print := exec.Command("scripts/image.sh", "print")
	print.Dir = root
	print.Env = append(os.Environ(), "IMAGE_REGISTRY=registry.example", "IMAGE_REPOSITORY=team/exporter", "IMAGE_TAG=v9.9.9", "IMAGE_PLATFORMS=")
	out, err = print.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh print: %v", err)
	}
	m := regexp.MustCompile(`--platform (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("scripts/image.sh print names no platforms: %s", out)
	}
	platforms := strings.Split(string(m[1]), ",")
	for _, p := range platforms {
		if !slices.Contains(baseImagePlatforms, p) {
			t.Errorf("scripts/image.sh builds %s, which the base image does not have", p)
		}
	}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		if !slices.Contains(platforms, p) {
			t.Errorf("scripts/image.sh does not build %s", p)
		}
	}
	if !bytes.Contains(out, []byte("--tag registry.example/team/exporter:v9.9.9 ")) {
		t.Errorf("scripts/image.sh print does not tag registry.example/team/exporter:v9.9.9: %s", out)
	}

	// No container engine: a PATH with nothing but what the script needs to get that far.
	bin := t.TempDir()
	dirname, err := exec.LookPath("dirname")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dirname, filepath.Join(bin, "dirname")); err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"build", "load"} {
		cmd := exec.Command(bash, "scripts/image.sh", mode)
		cmd.Dir = root
		cmd.Env = []string{"PATH=" + bin}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			t.Errorf("scripts/image.sh %s without a container engine exited 0", mode)
		}
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "no container engine") || stdout.Len() != 0 {
			t.Errorf("scripts/image.sh %s without a container engine: want one stderr line saying so, got stdout %q stderr %q", mode, stdout.String(), stderr.String())
		}
	}
}
