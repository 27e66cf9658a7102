package e2e

// Helpers shared by the deploy tests (deploy_*_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

const (
	deployNamespace = "localtraffic-system"
	deployName      = "localtraffic-exporter"
)

// repoDir returns the repository root (the e2e module's parent).
func repoDir(t testing.TB) string {
	t.Helper()
	mod, err := cluster.ModuleDir()
	if err != nil {
		fatalln(t, err)
	}
	return filepath.Dir(mod)
}

// kubectl runs the harness's kubectl (v1.37.2, kustomize built in) with the admin kubeconfig.
func kubectl(ctx context.Context, c *cluster.Cluster, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Binaries().Kubectl, append([]string{"--kubeconfig=" + c.AdminKubeconfig()}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// renderDeploy renders deploy/<dir> with `kubectl kustomize` (what `kubectl apply -k` does) into objects.
func renderDeploy(t testing.TB, c *cluster.Cluster, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := kubectl(testContext(t), c, nil, "kustomize", filepath.Join(repoDir(t), "deploy", dir))
	if err != nil {
		fatalln(t, err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			fatalf(t, "decode kustomize output of deploy/%s: %v", dir, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// renderedDaemonSet returns the typed DaemonSet of deploy/<dir>.
func renderedDaemonSet(t testing.TB, c *cluster.Cluster, dir string) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range renderDeploy(t, c, dir) {
		if o.GetKind() == "DaemonSet" && o.GetName() == deployName {
			var ds appsv1.DaemonSet
			b, _ := json.Marshal(o.Object)
			if err := json.Unmarshal(b, &ds); err != nil {
				fatalln(t, err)
			}
			return &ds
		}
	}
	fatalf(t, "deploy/%s renders no DaemonSet %s", dir, deployName)
	return nil
}

// lockedBuffer collects a child's output while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail returns the last n bytes of s, for logs in failure messages.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func ptr[T any](v T) *T { return &v }
