package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Binaries are the executables the harness runs.
type Binaries struct {
	Etcd, APIServer, KubeProxy, Kubectl, Exporter string
	// ControllerManager and Scheduler run only in clusters with Config.Controllers; Up checks them then.
	ControllerManager, Scheduler string
	// KubeRBACProxy is the sidecar deploy/ puts in front of the metrics port (build-bins.sh builds it from
	// tools/rbacproxy); only the tests that run it need it (Node.StartKubeRBACProxy checks it).
	KubeRBACProxy string
}

const e2eModule = "github.com/localtraffic/localtraffic-exporter/e2e"

// ModuleDir returns the e2e module's directory: found from the working directory upwards (go test and go run
// start inside the module), else from this source file's location.
func ModuleDir() (string, error) {
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if moduleName(filepath.Join(d, "go.mod")) == e2eModule {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Dir(filepath.Dir(file))
		if moduleName(filepath.Join(d, "go.mod")) == e2eModule {
			return d, nil
		}
	}
	return "", fmt.Errorf("cannot find the %s module directory", e2eModule)
}

func moduleName(goMod string) string {
	f, err := os.Open(goMod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.TrimSpace(name)
		}
	}
	return ""
}

// EnsureBinaries returns the pinned cluster binaries and the exporter, building what is missing. The cluster
// binaries come from binDir (else $LT_E2E_BIN_DIR, else build-bins.sh's version-keyed cache); the exporter from
// exporter (else $LT_E2E_EXPORTER, else a fresh `go build` of the repository's command into exporterDir, cheap
// when Go's build cache is warm).
func EnsureBinaries(ctx context.Context, binDir, exporter, exporterDir string) (Binaries, error) {
	binDir, err := BinDir(ctx, binDir)
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		Etcd:      filepath.Join(binDir, "etcd"),
		APIServer: filepath.Join(binDir, "kube-apiserver"),
		KubeProxy: filepath.Join(binDir, "kube-proxy"),
		Kubectl:   filepath.Join(binDir, "kubectl"),

		ControllerManager: filepath.Join(binDir, "kube-controller-manager"),
		Scheduler:         filepath.Join(binDir, "kube-scheduler"),
		KubeRBACProxy:     filepath.Join(binDir, "kube-rbac-proxy"),
	}
	for _, p := range []string{b.Etcd, b.APIServer, b.KubeProxy, b.Kubectl} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("cluster binary: %w", err)
		}
	}
	if exporter == "" {
		exporter = os.Getenv("LT_E2E_EXPORTER")
	}
	if exporter == "" {
		exporter, err = BuildExporter(ctx, exporterDir)
		if err != nil {
			return Binaries{}, err
		}
	}
	b.Exporter = exporter
	return b, nil
}

// BinDir returns the directory of the pinned cluster binaries (etcd, the Kubernetes commands, kubectl): binDir,
// else $LT_E2E_BIN_DIR, else build-bins.sh's version-keyed cache (built when missing).
func BinDir(ctx context.Context, binDir string) (string, error) {
	if binDir == "" {
		binDir = os.Getenv("LT_E2E_BIN_DIR")
	}
	if binDir != "" {
		return binDir, nil
	}
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(mod, "build-bins.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build cluster binaries (build-bins.sh): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// OldestBinDir returns the directory build-bins.sh --oldest fills: the oldest Kubernetes the chart admits
// (kube-apiserver and kube-proxy, pinned in tools/kubeoldest) beside the pinned etcd and kubectl, built when
// missing. The build runs niced: it may overlap other clusters' tests, whose deadlines it must not eat.
func OldestBinDir(ctx context.Context) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "nice", "-n", "10", "bash", filepath.Join(mod, "build-bins.sh"), "--oldest")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build the oldest admitted Kubernetes (build-bins.sh --oldest): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildExporter builds ./cmd/localtraffic-exporter of the repository (the e2e module's parent) into dir.
func BuildExporter(ctx context.Context, dir string) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "localtraffic-exporter")
	// scripts/build.sh, as every shipped binary is built: static. A plain `go build` here links the C library
	// (cgo), which maps libc and the dynamic loader into the process, 1.3 MiB of resident set no node pays.
	cmd := exec.CommandContext(ctx, "sh", "scripts/build.sh", out, "./cmd/localtraffic-exporter")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build exporter: %w: %s", err, b)
	}
	return out, nil
}
