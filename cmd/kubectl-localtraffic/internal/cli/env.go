package cli

import (
	"context"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Env is one invocation: its streams, its environment and how it reaches the apiserver (tests replace the
// clients with fakes).
type Env struct {
	In          io.Reader
	Out, ErrOut io.Writer
	Getenv      func(string) string
	Terminal    bool // stdout is a terminal
	// ErrTerminal: stderr is a terminal, where status shows its progress.
	ErrTerminal bool
	Client      func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error)
	// Forward reaches a port of a pod as the user (status --from-exporters).
	Forward func(*genericclioptions.ConfigFlags) (Fetcher, error)
	// Dynamic reaches the announcers' objects (MetalLB's statuses, Cilium's leases); nil reads none.
	Dynamic func(*genericclioptions.ConfigFlags) (dynamic.Interface, error)
	// Clock is the time the announcers' reads wait by while they watch a Cilium lease in doubt; nil is the
	// wall clock.
	Clock Clock
}

// Clock is a time that can be waited on (announce.Clock's methods): the wall clock, or a test's that moves on at
// once.
type Clock interface {
	Now() time.Time
	// Sleep waits d, and reports false when ctx ended first.
	Sleep(ctx context.Context, d time.Duration) bool
}

// Fetcher gets one path from a port of a pod's own network namespace (its loopback), as the user: the plugin's
// way to an exporter behind kube-rbac-proxy.
type Fetcher interface {
	Get(ctx context.Context, pod *corev1.Pod, port int, scheme, path string) ([]byte, error)
}
